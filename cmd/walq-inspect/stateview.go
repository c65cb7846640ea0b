package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/walq/walq/state"
)

// Helpers that look at a rebuilt state as of a time "now". The state keeps
// waiting items as "waiting" whatever their due time; like the queue, this
// tool calls a waiting item ready once its due time has come.

const (
	statusReady   = "ready"
	statusDelayed = "delayed"
)

// itemStatus says where a stored item is at now: ready, delayed, leased or
// dead.
func itemStatus(it *state.Item, now int64) string {
	if it.Status == state.Waiting {
		if it.Due <= now {
			return statusReady
		}
		return statusDelayed
	}
	return it.Status.String()
}

// sortedItems returns the stored items by ID.
func sortedItems(st *state.State) []*state.Item {
	var items []*state.Item
	st.Each(func(it *state.Item) { items = append(items, it) })
	sort.Slice(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	return items
}

// stateFacts are the figures summary and state print.
type stateFacts struct {
	byStatus      map[string]int
	oldestReady   *state.Item // smallest due time among ready items (then Seq)
	nextDelayed   *state.Item // smallest due time among delayed items
	nextLeaseEnd  *state.Item
	keysOfStored  int // keys held by stored items
	keysInWindows int // keys of items gone, still inside the key window (or not pruned yet)
}

// factsOf gathers the figures of the items in scope.
func factsOf(sc scope, now int64) stateFacts {
	f := stateFacts{byStatus: make(map[string]int)}
	earlier := func(a, b *state.Item) bool { return a.Due < b.Due || (a.Due == b.Due && a.Seq < b.Seq) }
	for _, it := range sc.items() {
		s := itemStatus(it, now)
		f.byStatus[s]++
		switch s {
		case statusReady:
			if f.oldestReady == nil || earlier(it, f.oldestReady) {
				f.oldestReady = it
			}
		case statusDelayed:
			if f.nextDelayed == nil || earlier(it, f.nextDelayed) {
				f.nextDelayed = it
			}
		case state.Leased.String():
			if f.nextLeaseEnd == nil || it.LeaseEnd < f.nextLeaseEnd.LeaseEnd {
				f.nextLeaseEnd = it
			}
		}
		if it.Key() != "" {
			f.keysOfStored++
		}
	}
	f.keysInWindows = sc.keys() - f.keysOfStored
	return f
}

func (f stateFacts) itemsLine(sc scope) string {
	return fmt.Sprintf("%s stored, %s of bodies: %d ready, %d delayed, %d leased, %d dead",
		plural(sc.len(), "item", "items"), fmtSize(sc.bytes()), f.byStatus[statusReady],
		f.byStatus[statusDelayed], f.byStatus[state.Leased.String()], f.byStatus[state.Dead.String()])
}

// countersLine prints the counters; moves between queues only when there
// were any.
func countersLine(c state.Counters) string {
	s := fmt.Sprintf("put %d, delivered %d, acked %d, nacked %d, expired %d, dead-lettered %d, discarded %d, redriven %d, purged %d",
		c.Put, c.Delivered, c.Acked, c.Nacked, c.Expired, c.DeadLettered, c.Discarded, c.Redriven, c.Purged)
	if c.MovedIn != 0 || c.MovedOut != 0 {
		s += fmt.Sprintf(", moved in %d, moved out %d", c.MovedIn, c.MovedOut)
	}
	return s
}

// ago says how long before now t was, or how long after: "4m0s ago", "in 5s".
func ago(t, now int64) string {
	d := time.Duration(now - t)
	if d >= 0 {
		return fmtDur(d) + " ago"
	}
	return "in " + fmtDur(-d)
}

// liveBytes is the queue's estimate of what a snapshot of st takes, the
// figure its compaction trigger compares the log against (liveBytesLocked
// in the root package's sequencer.go: body bytes plus 64 per stored item,
// of every queue of the directory).
func liveBytes(st *state.State) int64 { return st.TotalBytes() + int64(st.TotalLen())*64 }
