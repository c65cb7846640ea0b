package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Sizes are known before publishing: a body that cannot fit with its
// headers (and those its dead letter needs) under the server's
// max_payload is refused at Put, a dead letter that cannot carry its
// whole history is still moved with what was cut said, and a directory
// with a body the server cannot take is refused before anything moves.

const smallPayload = 64 << 10

func smallServerQueue(t *testing.T, qo walqjs.QueueOptions) *closingQueue {
	t.Helper()
	s := startServerWith(t, t.TempDir(), 0, func(o *server.Options) { o.MaxPayload = smallPayload })
	t.Cleanup(s.Shutdown)
	q, err := openQueue(s.ClientURL(), "sizes", "jobs", walqjs.Options{}, qo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// TestPutTooLargeForServer: a body at the server's max_payload is
// ErrTooLarge, naming the limit; one that fits with room for its dead
// letter is stored.
func TestPutTooLargeForServer(t *testing.T) {
	q := smallServerQueue(t, walqjs.QueueOptions{})
	for _, delay := range []time.Duration{0, time.Hour} {
		_, err := q.Put(context.Background(), make([]byte, smallPayload), walq.WithKey("big"), walq.WithDelay(delay))
		if !errors.Is(err, walq.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(smallPayload)) {
			t.Fatalf("put of %d B (delay %v) on a server of max_payload %d: %v; want ErrTooLarge naming the limit", smallPayload, delay, smallPayload, err)
		}
	}
	if _, err := q.Put(context.Background(), make([]byte, smallPayload-4096), walq.WithKey("fits")); err != nil {
		t.Fatalf("put of a body 4 KiB under the limit: %v", err)
	}
}

// TestDeadLetterNearMaxPayload: the largest body Put takes, failed with
// the longest errors for every attempt, is dead-lettered on its last
// attempt with its body whole and a history cut to fit, the cut said
// (before, the dead letter's headers pushed it over the limit, the Nack
// failed, and the item came back forever).
func TestDeadLetterNearMaxPayload(t *testing.T) {
	const attempts = 12
	q := smallServerQueue(t, walqjs.QueueOptions{MaxAttempts: attempts, Backoff: func(int) time.Duration { return 0 }})
	size := smallPayload
	for {
		_, err := q.Put(context.Background(), make([]byte, size), walq.WithKey(strings.Repeat("k", 1000)))
		if err == nil {
			break
		}
		if !errors.Is(err, walq.ErrTooLarge) {
			t.Fatal(err)
		}
		size -= 16
	}
	cause := errors.New(strings.Repeat("e", 2000))
	for i := 1; i <= attempts; i++ {
		m := get(t, q, 2*time.Second)
		if err := q.Nack(m.Receipt, cause); err != nil {
			t.Fatalf("nack %d of a %d-byte body: %v", i, size, err)
		}
	}
	dead, err := q.DeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || len(dead[0].Body) != size || dead[0].Attempts != attempts {
		t.Fatalf("dead letters: %d (want one of %d B, %d attempts)", len(dead), size, attempts)
	}
	d := dead[0]
	if len(d.History) == 0 || !strings.HasPrefix(cause.Error(), d.History[len(d.History)-1].Error) || !strings.Contains(d.LastError, "cut to the server's max_payload") {
		t.Fatalf("the dead letter's history has %d entries, its error ends %q: want the last attempt kept and the cut said", len(d.History), d.LastError[max(0, len(d.LastError)-200):])
	}
	if m, ok, err := q.TryGet(); err != nil || ok {
		t.Fatalf("the item is back after it was dead-lettered: %d %v %v", m.ID, ok, err)
	}
}

// TestMoveBodyTooLargeForServer: a directory holding a body the server
// cannot take is refused before anything moves, with an error that names
// the item and the limit (before, every run stopped at the same batch).
func TestMoveBodyTooLargeForServer(t *testing.T) {
	dir := t.TempDir()
	wq, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		wq.Put(ctx, []byte(fmt.Sprint(i)))
	}
	big, _ := wq.Put(ctx, make([]byte, smallPayload))
	wq.Close()
	q := smallServerQueue(t, walqjs.QueueOptions{})
	st, err := q.js.Stream(ctx, "WALQ_sizes")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := st.Info(ctx)
	_, err = q.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{Batch: 2})
	if !errors.Is(err, walq.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(big)) || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("move of a directory with a %d B body to a server of max_payload %d: %v", smallPayload, smallPayload, err)
	}
	after, _ := st.Info(ctx)
	if after.State.LastSeq != before.State.LastSeq {
		t.Fatalf("the refused move published %d messages", after.State.LastSeq-before.State.LastSeq)
	}
}

// TestDeadLetterNearLimitKeepsLastAttemptAndCause: the largest body Put
// takes, nacked on its last attempt with an error that JSON writes 6 bytes
// a byte ('<', as in an HTML fragment), is dead-lettered with its last
// attempt in its history and at least the first 128 bytes of its cause
// (the room Put keeps for a cut cause). (Before,
// Put kept room for the error as 512 plain bytes, and fitDeadLetter cut the
// cause to nothing and then dropped the last attempt too.)
func TestDeadLetterNearLimitKeepsLastAttemptAndCause(t *testing.T) {
	const causeKept = 128
	q := smallServerQueue(t, walqjs.QueueOptions{MaxAttempts: 1})
	size := smallPayload
	for {
		_, err := q.Put(context.Background(), make([]byte, size))
		if err == nil {
			break
		}
		if !errors.Is(err, walq.ErrTooLarge) {
			t.Fatal(err)
		}
		size -= 16
	}
	cause := errors.New(strings.Repeat("<", 600))
	m := get(t, q, 2*time.Second)
	if err := q.Nack(m.Receipt, cause); err != nil {
		t.Fatal(err)
	}
	dead, err := q.DeadLetters(0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters: %d, %v", len(dead), err)
	}
	d := dead[0]
	if len(d.History) != 1 || !strings.HasPrefix(d.LastError, strings.Repeat("<", causeKept)) || len(d.Body) != size {
		t.Fatalf("the largest body Put takes (%d B), nacked once on its last attempt with a 600-byte error of '<': its dead letter has %d history entries, "+
			"a body of %d B, and its LastError is %q...; want the last attempt, the body and at least the cause's first %d bytes kept",
			size, len(d.History), len(d.Body), d.LastError[:min(160, len(d.LastError))], causeKept)
	}
}
