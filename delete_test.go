package walq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDeleteItems: items in every state are deleted for good, through the
// log (a reopen does not bring them back); a lease on one ends with it;
// its key is released as on an ack; an ID of another queue, or of no
// item, deletes nothing.
func TestDeleteItems(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	opts := Options{Clock: clock, MaxAttempts: 1, KeyWindow: time.Hour}
	q, err := Open(dir, opts)
	must(t, err)
	ctx := context.Background()
	leased := mustPut(t, q, "leased", WithKey("k-leased"))
	m := mustTryGet(t, q)
	dead := mustPut(t, q, "dead")
	must(t, q.DeadLetter(mustTryGet(t, q).Receipt, errors.New("bad")))
	waiting := mustPut(t, q, "waiting")
	delayed, err := q.Put(ctx, []byte("delayed"), WithDelay(time.Hour))
	must(t, err)
	kept := mustPut(t, q, "kept")
	other, err := q.OpenQueue("other", QueueOptions{})
	must(t, err)
	foreign := mustPut(t, other, "of another queue")

	for _, bad := range [][]uint64{{foreign}, {waiting, 999}, {waiting, waiting}, nil} {
		if err := q.DeleteItems(bad...); err == nil {
			t.Fatalf("DeleteItems(%v) = nil", bad)
		}
	}
	if st := q.Stats(); st.Items != 5 {
		t.Fatalf("a refused delete changed the queue: %d items", st.Items)
	}
	must(t, q.DeleteItems(leased, dead, waiting, delayed))
	if err := q.Ack(m.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Ack of a deleted item's lease = %v, want ErrLeaseLost", err)
	}
	if _, err := q.Put(ctx, []byte("again"), WithKey("k-leased")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Put with a deleted item's key within its window = %v, want ErrDuplicate", err)
	}
	check := func(q *Queue, when string) {
		t.Helper()
		st := q.Stats()
		if st.Items != 1 || st.Leased != 0 || st.Dead != 0 || st.Purged < 4 {
			t.Fatalf("%s: %d items, %d leased, %d dead, %d purged; want the one kept", when, st.Items, st.Leased, st.Dead, st.Purged)
		}
		if got := mustTryGet(t, q); got.ID != kept {
			t.Fatalf("%s: delivered item %d, want %d", when, got.ID, kept)
		}
	}
	must(t, q.Close())
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	check(q, "after a reopen")
	other, err = q.OpenQueue("other", QueueOptions{})
	must(t, err)
	if st := other.Stats(); st.Items != 1 {
		t.Fatalf("the other queue holds %d items, want its one", st.Items)
	}
}
