//go:build long

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Row "fencing": the server does not fence. An ack sent with the reply
// subject of a delivery that has since been redelivered acks the current
// delivery; the adapter refuses the stale receipt and sends nothing.
func TestDiffServerDoesNotFence(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second, Backoff: zeroBackoff})
	id := put(t, q, "a")
	var first *nats.Msg
	m1 := get(t, q, 5*time.Second)
	time.Sleep(1200 * time.Millisecond) // past the AckWait
	m2 := get(t, q, 5*time.Second)
	if m2.ID != id || m2.Attempt != 2 {
		t.Fatalf("second delivery: item %d attempt %d", m2.ID, m2.Attempt)
	}
	// The adapter: the first receipt is stale.
	if err := q.Ack(m1.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("Ack with the first receipt: %v, want ErrLeaseLost", err)
	}
	// The server: an ack on the first delivery's reply subject, sent by
	// hand, acts on the second delivery (pending is keyed by the stream
	// sequence).
	first = replyOf(t, q, m1)
	if _, err := q.nc.Request(first.Reply, []byte("+ACK"), time.Second); err != nil {
		t.Fatal(err)
	}
	// The second lease runs out without an ack, and the item never comes
	// back: the stale ack removed it.
	time.Sleep(1500 * time.Millisecond)
	noneWithin(t, q, 500*time.Millisecond)
	if err := q.Ack(m2.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("Ack with the second, expired receipt: %v", err)
	}
}

// Row "fence margin": a lease ends on the client Fence before the server's
// AckWait; a call after that is refused even though the server would
// still take it, and the item comes back only at the AckWait.
func TestDiffFence(t *testing.T) {
	const vis, fence = 2 * time.Second, 500 * time.Millisecond
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: vis, Fence: fence})
	put(t, q, "a")
	before := time.Now()
	m := get(t, q, 5*time.Second)
	after := time.Now()
	if m.LeaseEnd.Before(before.Add(vis-fence)) || m.LeaseEnd.After(after.Add(vis-fence)) {
		t.Fatalf("LeaseEnd %v not within [%v, %v] + Visibility - Fence", m.LeaseEnd, before, after)
	}
	time.Sleep(time.Until(m.LeaseEnd) + 50*time.Millisecond)
	if err := q.Ack(m.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("Ack past LeaseEnd: %v, want ErrLeaseLost", err)
	}
	// Between the client's end and the server's, nothing is redelivered.
	noneWithin(t, q, time.Until(before.Add(vis))-100*time.Millisecond)
	m2 := get(t, q, 5*time.Second)
	if m2.Attempt != 2 || time.Since(before) < vis {
		t.Fatalf("redelivered %v after the lease began (attempt %d), want at least the AckWait %v", time.Since(before), m2.Attempt, vis)
	}
}

// Row "extend": Extend reaches at most the Visibility from now: InProgress
// restarts the consumer's AckWait and cannot extend by a chosen duration.
func TestDiffExtendAtMostVisibility(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second})
	put(t, q, "a")
	m := get(t, q, 5*time.Second)
	if err := q.Extend(m.Receipt, 2*time.Second); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "AckWait") {
		t.Fatalf("Extend past the Visibility: %v, want ErrInvalid saying why", err)
	}
	for range 4 {
		time.Sleep(500 * time.Millisecond)
		if err := q.Extend(m.Receipt, time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatalf("Ack after 2s of extensions of 1s: %v", err)
	}
}

// Row "expiry": an expired lease comes back after the AckWait alone; the
// Backoff applies to nacks.
func TestDiffExpiryNoBackoff(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second,
		Backoff: func(int) time.Duration { return time.Hour }})
	put(t, q, "a")
	start := time.Now()
	get(t, q, 5*time.Second)
	m := get(t, q, 5*time.Second)
	if m.Attempt != 2 || time.Since(start) > 3*time.Second {
		t.Fatalf("after an expiry: attempt %d, %v later; walq would wait the hour of backoff", m.Attempt, time.Since(start))
	}
	if err := q.Nack(m.Receipt, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	noneWithin(t, q, 2*time.Second) // the nack's hour
}

// Row "delays": the adapter writes the schedule's time to the nanosecond;
// nats.go's WithScheduleAt cuts it to the second, which fires early.
func TestDiffDelayScheduleAtTruncates(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 5 * time.Second})
	ctx := context.Background()
	// WithScheduleAt, at 0.9s into a second: the header says the second.
	for time.Now().Nanosecond() > 100e6 {
		time.Sleep(10 * time.Millisecond)
	}
	at := time.Now().Truncate(time.Second).Add(1900 * time.Millisecond)
	msg := &nats.Msg{Subject: "walq.diff.s.jobs.fact", Header: nats.Header{walqjs.HeaderVersion: {"1"}}, Data: []byte("fact")}
	if _, err := q.js.PublishMsg(ctx, msg, njs.WithScheduleAt(at), njs.WithScheduleTarget("walq.diff.q.jobs.p0")); err != nil {
		t.Fatal(err)
	}
	m := get(t, q, 5*time.Second)
	early := time.Until(at)
	t.Logf("WithScheduleAt(%v): the message came %v before that time", at.Format(time.StampMilli), early)
	if early <= 0 {
		t.Fatalf("WithScheduleAt was not early (%v): the fact the adapter works around no longer holds", early)
	}
	q.Ack(m.Receipt)
	// The adapter's delays: never early.
	for _, d := range []time.Duration{150 * time.Millisecond, 900 * time.Millisecond, 1100 * time.Millisecond} {
		start := time.Now()
		id := put(t, q, "delayed", walq.WithDelay(d))
		m := get(t, q, 5*time.Second)
		if m.ID != id || time.Since(start) < d {
			t.Fatalf("delay %v: item %d after %v", d, m.ID, time.Since(start))
		}
		t.Logf("delay %v: delivered %v after the put", d, time.Since(start))
		q.Ack(m.Receipt)
	}
}

// Row "keys": a key is held for the Dir's KeyWindow from its put (the
// stream's duplicate window), not from the ack: an item still waiting
// past the window no longer holds it.
func TestDiffKeyWindowFromPut(t *testing.T) {
	q := newQueue(t, walqjs.Options{KeyWindow: time.Second}, walqjs.QueueOptions{})
	id := put(t, q, "first", walq.WithKey("k"))
	if got, err := q.Put(context.Background(), []byte("again"), walq.WithKey("k")); !errors.Is(err, walq.ErrDuplicate) || got != id {
		t.Fatalf("put within the window: %d, %v", got, err)
	}
	time.Sleep(1500 * time.Millisecond)
	id2, err := q.Put(context.Background(), []byte("after the window"), walq.WithKey("k"))
	if err != nil || id2 == id {
		t.Fatalf("put after the window, the first item still waiting: %d, %v (walq would refuse it)", id2, err)
	}
	// Keys are per queue, as in walq: another queue of the Dir takes the
	// same key.
	other, err := q.dir.OpenQueue(context.Background(), "other", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Put(context.Background(), []byte("x"), walq.WithKey("k")); err != nil {
		t.Fatalf("the same key in another queue: %v", err)
	}
	if _, err := walqjs.OpenDir(context.Background(), q.js, "short", walqjs.Options{KeyWindow: 50 * time.Millisecond}); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("a key window under 100ms: %v", err)
	}
}

func noneWithin(t *testing.T, q *closingQueue, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := q.Get(ctx); err == nil {
		t.Fatalf("item %d (attempt %d) delivered, want none within %v", m.ID, m.Attempt, d)
	}
}

// replyOf finds the reply subject a delivery had: the adapter does not
// expose it, so the test keeps a tap on the Dir's acks.
func replyOf(t *testing.T, q *closingQueue, m walq.Message) *nats.Msg {
	t.Helper()
	// The reply subject of delivery n of stream sequence s names them;
	// rebuild it from the consumer's info.
	info, err := q.js.Consumer(context.Background(), "WALQ_diff", consumerNameFor("jobs", 0))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := info.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>:
	// the server reads the stream sequence (and checks the consumer
	// sequence only against its range), so any delivered count, timestamp
	// and pending do.
	return &nats.Msg{Reply: fmt.Sprintf("$JS.ACK.WALQ_diff.%s.1.%d.%d.0.0", ci.Name, m.ID, ci.Delivered.Consumer-1)}
}

func consumerNameFor(queue string, prio int) string {
	// As the adapter names it; the test looks it up by listing instead of
	// copying the hash.
	return walqjs.ConsumerName(queue, prio)
}
