package browse

import (
	"container/heap"
	"slices"

	"github.com/walq/walq/state"
)

// Before reports whether a is delivered before b among ready items: the
// smaller priority, then the earlier due time, then the smaller Seq, then
// the smaller ID (the order of the state's ready heaps).
func Before(a, b *state.Item) bool {
	switch {
	case a.Priority != b.Priority:
		return a.Priority < b.Priority
	case a.Due != b.Due:
		return a.Due < b.Due
	case a.Seq != b.Seq:
		return a.Seq < b.Seq
	}
	return a.ID < b.ID
}

// Head selects the first n ready items of a queue in delivery order from
// items offered to it one at a time, keeping n copies at most: a walk
// offers every ready item (the state shows only the very first, NextReady),
// in as many steps as the caller likes, and Items gives the selection.
type Head struct {
	n       int
	worst   selection // max-heap by delivery order: the root is the last kept
	offered int       // ready items offered
}

// NewHead returns a selection of up to n items.
func NewHead(n int) *Head { return &Head{n: n} }

// Offer considers it, which the caller found ready.
func (h *Head) Offer(it *state.Item) {
	h.offered++
	if h.n <= 0 {
		return
	}
	if len(h.worst) < h.n {
		heap.Push(&h.worst, it.Clone())
		return
	}
	if Before(it, &h.worst[0]) {
		h.worst[0] = it.Clone()
		heap.Fix(&h.worst, 0)
	}
}

// Items returns the selection in delivery order.
func (h *Head) Items() []state.Item {
	out := slices.Clone(h.worst)
	slices.SortFunc(out, func(a, b state.Item) int {
		if Before(&a, &b) {
			return -1
		}
		return 1
	})
	return out
}

type selection []state.Item

func (s selection) Len() int           { return len(s) }
func (s selection) Less(i, j int) bool { return Before(&s[j], &s[i]) }
func (s selection) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *selection) Push(x any)        { *s = append(*s, x.(state.Item)) }
func (s *selection) Pop() any {
	old := *s
	it := old[len(old)-1]
	*s = old[:len(old)-1]
	return it
}

// Walk offers h the ready items of queue above after in ID order, looking
// at budget stored items at most, and stops early once no item further on
// can enter the selection. That is known without looking: a waiting item
// is never due before it was put (a put, a retry, a redrive or a move
// only ever sets its due time at or after that moment), and put times
// grow with IDs; so once the selection is full, its last item has the
// queue's smallest ready priority (minPriority, from NextReady after a
// Promote) and is due before the put time of the item the walk reached,
// every item from there on comes after it. It stops too once it has been
// offered ready items (the queue's count of ready items: all of them).
// On a queue of one priority that stops the walk soon after n items, and
// on a small queue after its last ready item; with several priorities it
// may have to look at every item. done reports that the selection is
// final.
func (h *Head) Walk(st *state.State, queue, after uint64, budget int, now, minPriority int64, ready int) (w Walk, done bool) {
	stopped := false
	st.EachFrom(max(after+1, QueueStart(st, queue)), func(it *state.Item) bool {
		if w.Scanned >= budget {
			stopped = true
			return false
		}
		if h.offered >= ready || h.complete(it, minPriority) {
			done = true
			return false
		}
		w.Scanned++
		w.Next = it.ID
		if it.Queue == queue && it.Status == state.Waiting && it.Due <= now {
			h.Offer(it)
		}
		return true
	})
	if !stopped {
		w.Next = 0
		done = true
	}
	return w, done
}

// complete reports whether no item from next on in ID order can enter the
// selection (see Walk).
func (h *Head) complete(next *state.Item, minPriority int64) bool {
	if h.n <= 0 {
		return true
	}
	if len(h.worst) < h.n {
		return false
	}
	last := &h.worst[0]
	return last.Priority == minPriority && last.Due < next.EnqueuedAt
}
