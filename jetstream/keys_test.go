package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Keys: a put that failed never holds its key, and a key walq refuses is
// refused here too.

// failDelayedPut makes a delayed Put of body with key fail after it
// reserved its ID (the schedule's publish is refused by a stream limit the
// operator set, as the README advises for MaxBytes; a crash or a server
// blip between the two publishes does the same), then lifts the limit.
func failDelayedPut(t *testing.T, q *closingQueue, body []byte, key string) njs.Stream {
	t.Helper()
	ctx := context.Background()
	st, err := q.js.Stream(ctx, "WALQ_diff")
	if err != nil {
		t.Fatal(err)
	}
	setMax := func(n int32) {
		cfg := st.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := q.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMax(1000)
	if _, err := q.Put(ctx, body, walq.WithKey(key), walq.WithDelay(time.Hour)); err == nil {
		t.Fatal("precondition: the delayed put of a body over the stream's MaxMsgSize must fail")
	}
	setMax(-1)
	return st
}

// TestFailedDelayedPutFreesItsKey: a keyed delayed Put that failed after
// it reserved its ID stored nothing, so a retry without the delay stores
// the item (under the reserved ID), which is delivered; a put of the key
// after that is ErrDuplicate with that ID. (Before, the reservation held
// the key for the whole KeyWindow: the retry was ErrDuplicate naming an
// item that did not exist.)
func TestFailedDelayedPutFreesItsKey(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 2000))
	failDelayedPut(t, q, body, "job-7")
	id, err := q.Put(ctx, body, walq.WithKey("job-7"))
	if err != nil {
		t.Fatalf("the retry of a failed Put = %d, %v; want it stored", id, err)
	}
	m := get(t, q, 2*time.Second)
	if m.ID != id || string(m.Body) != string(body) || m.Key != "job-7" {
		t.Fatalf("delivered %d (key %q, %d B); want item %d", m.ID, m.Key, len(m.Body), id)
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	for _, delay := range []time.Duration{0, time.Hour} {
		if again, err := q.Put(ctx, body, walq.WithKey("job-7"), walq.WithDelay(delay)); !errors.Is(err, walq.ErrDuplicate) || again != id {
			t.Fatalf("a put (delay %v) of the key the retry stored = %d, %v; want %d, ErrDuplicate", delay, again, err, id)
		}
	}
}

// TestFailedDelayedPutRetriedAfterASecond: the same delayed Put retried
// once a second has passed (the TTL reservations had) is stored, its
// schedule under the reserved ID, and a put of the key after it is
// ErrDuplicate with that ID. (Before, the reservation was gone after 1 s
// while its key stayed held for the KeyWindow: the retry was ErrDuplicate
// and scheduled nothing.)
func TestFailedDelayedPutRetriedAfterASecond(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 2000))
	st := failDelayedPut(t, q, body, "job-8")
	time.Sleep(1100 * time.Millisecond)
	id, err := q.Put(ctx, body, walq.WithKey("job-8"), walq.WithDelay(time.Hour))
	if err != nil {
		t.Fatalf("the retried delayed Put = %d, %v; want it stored", id, err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("walq.diff.s.jobs.%d", id)); err != nil {
		t.Fatalf("the schedule of item %d: %v", id, err)
	}
	if again, err := q.Put(ctx, body, walq.WithKey("job-8")); !errors.Is(err, walq.ErrDuplicate) || again != id {
		t.Fatalf("a put of the key the retry stored = %d, %v; want %d, ErrDuplicate", again, err, id)
	}
}

// TestKeyOverMaxKeySizeRefused: a key over walq.MaxKeySize (1 KiB) is
// ErrInvalid, as on walq, and one of MaxKeySize is taken. (Before, the
// adapter stored it.)
func TestKeyOverMaxKeySizeRefused(t *testing.T) {
	key := strings.Repeat("k", walq.MaxKeySize+1)
	wq, err := walq.Open(t.TempDir(), walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wq.Close()
	_, werr := wq.Put(context.Background(), []byte("x"), walq.WithKey(key))
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	_, jerr := q.Put(context.Background(), []byte("x"), walq.WithKey(key))
	if !errors.Is(werr, walq.ErrInvalid) || !errors.Is(jerr, walq.ErrInvalid) {
		t.Fatalf("a %d-byte key: walq's Put = %v; the adapter's Put = %v; want ErrInvalid from both", len(key), werr, jerr)
	}
	for _, delay := range []time.Duration{0, time.Hour} {
		if _, err := q.Put(context.Background(), []byte("x"), walq.WithKey(key[1:]), walq.WithDelay(delay)); err != nil && !errors.Is(err, walq.ErrDuplicate) {
			t.Fatalf("a key of MaxKeySize bytes (delay %v): %v", delay, err)
		}
	}
}
