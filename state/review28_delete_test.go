package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/walq/walq/state"
)

// TestReview28DeleteEmptyQueueWalksEveryItem: applyDelete finds the
// deleted queue's items by walking every item of the directory
// (s.items.each), so deleting an empty queue costs a pass over the items
// of every other queue: under the directory's lock when Delete appends
// the record, and again for each DeleteQueue record a recovery replays.
// docs/queues.md: "What the number of queues costs: nothing per
// operation. A put, a lease or an ack touches its own queue". A tenant
// churn of 1,000 queue deletions in a directory of 10M items is 1,000
// full passes (about 70 ms of held lock each, measured at 7 ns an item
// without -race).
func TestReview28DeleteEmptyQueueWalksEveryItem(t *testing.T) {
	const deletes = 20
	run := func(items int) time.Duration {
		s := state.New()
		lsn := uint64(0)
		apply := func(queue uint64, rec state.Record) uint64 {
			lsn++
			if err := s.ApplyAt(lsn, queue, rec, 4096); err != nil {
				t.Fatalf("%s: %v", state.TypeName(rec.Type()), err)
			}
			return lsn
		}
		batch := make([]state.NewItem, 10000)
		for left := items; left > 0; left -= len(batch) {
			apply(state.DefaultQueue, &state.Put{Time: 1, Items: batch[:min(left, len(batch))]})
		}
		set := state.Settings{Visibility: int64(time.Second), MaxAttempts: 1}
		var took time.Duration
		for i := range deletes {
			id := apply(state.DefaultQueue, &state.CreateQueue{Time: 2, Name: fmt.Sprintf("tenant-%d", i), Settings: set})
			start := time.Now()
			apply(id, &state.DeleteQueue{Time: 2})
			took += time.Since(start)
		}
		return took / deletes
	}
	empty := run(0)
	full := run(200_000)
	t.Logf("deleting an empty queue: %v beside no items, %v beside 200,000 items of another queue", empty, full)
	if full > 20*empty+200*time.Microsecond {
		t.Fatalf("deleting an empty queue costs %v beside 200,000 items of another queue, %v beside none: "+
			"a pass over every item of the directory", full, empty)
	}
}
