package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// killAll leases every ready item of q and dead-letters it.
func killAll(t *testing.T, q *closingQueue, n int) []uint64 {
	t.Helper()
	var ids []uint64
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := q.Get(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.DeadLetter(m.Receipt, errors.New("poison")); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func deadSet(t *testing.T, q *closingQueue) map[uint64]bool {
	t.Helper()
	dl, err := q.DeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[uint64]bool)
	for _, d := range dl {
		out[d.ID] = true
	}
	return out
}

// TestDeadLetterCallsAllOrNothing: Redrive and PurgeDeadLetters with an
// ID that is no dead letter change nothing and answer ErrNotFound (before,
// they acted on the others and then answered ErrNotFound, so a retry of
// the call failed on the ones already done), and PurgeDeadLetters with no
// IDs purges them all, as a walq queue's does (before, it did nothing).
func TestDeadLetterCallsAllOrNothing(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	put(t, q, "a")
	put(t, q, "b")
	put(t, q, "c")
	ids := killAll(t, q, 3)
	const unknown = 1 << 40

	if err := q.PurgeDeadLetters(ids[0], unknown); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("PurgeDeadLetters(%d, unknown) = %v, want ErrNotFound", ids[0], err)
	}
	if got := deadSet(t, q); len(got) != 3 {
		t.Fatalf("after a refused purge: dead letters %v, want all 3", got)
	}
	if err := q.Redrive(ids[1], unknown); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("Redrive(%d, unknown) = %v, want ErrNotFound", ids[1], err)
	}
	if got := deadSet(t, q); len(got) != 3 {
		t.Fatalf("after a refused redrive: dead letters %v, want all 3", got)
	}
	if m, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("after a refused redrive: TryGet = %d, %v, %v; want nothing ready", m.ID, ok, err)
	}

	if err := q.Redrive(ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := deadSet(t, q); got[ids[1]] || len(got) != 2 {
		t.Fatalf("after Redrive(%d): dead letters %v", ids[1], got)
	}
	if err := q.PurgeDeadLetters(); err != nil {
		t.Fatal(err)
	}
	if got := deadSet(t, q); len(got) != 0 {
		t.Fatalf("after PurgeDeadLetters(): dead letters %v, want none", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := q.Get(ctx); err != nil || m.ID != ids[1] {
		t.Fatalf("the redriven item: %d, %v; want %d", m.ID, err, ids[1])
	}
}
