package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/walq/walq/state"
)

// TestDeleteEmptyQueueBesideItems: deleting a queue with no items costs
// nothing of the directory's other items. Its delete once walked every
// item of every queue to find the queue's own (found by a hostile review:
// 11 ms a delete beside 200,000 items, under the lock, and again at each
// replay of the record). A queue that holds items still takes one pass.
func TestDeleteEmptyQueueBesideItems(t *testing.T) {
	s := state.New()
	lsn := uint64(0)
	apply := func(queue uint64, rec state.Record) uint64 {
		t.Helper()
		lsn++
		if err := s.ApplyAt(lsn, queue, rec, 4096); err != nil {
			t.Fatalf("%s: %v", state.TypeName(rec.Type()), err)
		}
		return lsn
	}
	apply(state.DefaultQueue, &state.Put{Time: 1, Items: make([]state.NewItem, 10_000)})
	set := state.Settings{Visibility: int64(time.Second), MaxAttempts: 1}
	for i := range 20 {
		id := apply(state.DefaultQueue, &state.CreateQueue{Time: 2, Name: fmt.Sprintf("tenant-%d", i), Settings: set})
		apply(id, &state.DeleteQueue{Time: 2})
	}
	if n := s.DeletePasses(); n != 0 {
		t.Fatalf("20 deletes of empty queues beside 10,000 items took %d passes over the items, want 0", n)
	}
	id := apply(state.DefaultQueue, &state.CreateQueue{Time: 3, Name: "full", Settings: set})
	apply(id, &state.Put{Time: 3, Items: make([]state.NewItem, 3)})
	apply(id, &state.DeleteQueue{Time: 3})
	if n := s.DeletePasses(); n != 1 {
		t.Fatalf("the delete of a queue of 3 items took %d passes, want 1", n)
	}
	if g := s.Gauges(); g.Items != 10_000 {
		t.Fatalf("after the deletes the directory holds %d items, want the default queue's 10,000", g.Items)
	}
}
