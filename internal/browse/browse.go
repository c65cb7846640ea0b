// Package browse reads a queue's state for display: items by state in ID
// order with keyset paging, the head of a queue in delivery order, and
// exact filters. Every walk is bounded by a budget of items looked at, so a
// page never costs a scan of the whole state; a walk that stops at its
// budget says where to resume.
//
// It only reads a state.State, through its exported calls, and the caller
// holds whatever lock guards it: the queue's sequencer for a live queue,
// nothing for a state rebuilt from a directory.
package browse

import (
	"math"
	"strings"

	"github.com/walq/walq/state"
)

// The states an item is listed under. Ready and Delayed split the state's
// Waiting status at the time of the listing: an item whose due time has
// come is ready even before the queue promotes it.
const (
	Ready   = "ready"
	Delayed = "delayed"
	Leased  = "leased"
	Dead    = "dead"
)

// States lists the states in the order pages show them.
var States = []string{Ready, Delayed, Leased, Dead}

// ValidState reports whether s names a state ("" for any is valid).
func ValidState(s string) bool {
	switch s {
	case "", Ready, Delayed, Leased, Dead:
		return true
	}
	return false
}

// StateOf says where it stands at now.
func StateOf(it *state.Item, now int64) string {
	switch it.Status {
	case state.Leased:
		return Leased
	case state.Dead:
		return Dead
	}
	if it.Due > now {
		return Delayed
	}
	return Ready
}

// Filter selects items by exact fields. The zero Filter selects every
// item. Text searches are not here: they need bodies, which are read
// outside the state's lock (see Matches and the callers' searches).
type Filter struct {
	State string // one of the States, "" for any
	ID    uint64 // only this item (0: any)
	Key   string // only the item holding this key ("": any)
	// From and To bound the time of the put: From <= EnqueuedAt < To
	// (0: unbounded on that side).
	From, To int64
	// Text is a substring of the item's last error or history errors, or
	// with InBody of its body too. The walk leaves it to the caller.
	Text   string
	InBody bool
}

// Exact reports whether f names at most one item (by ID or key).
func (f Filter) Exact() bool { return f.ID != 0 || f.Key != "" }

// Matches reports whether it, of queue, passes f's exact fields at now.
func (f Filter) Matches(it *state.Item, queue uint64, now int64) bool {
	switch {
	case it.Queue != queue,
		f.State != "" && StateOf(it, now) != f.State,
		f.ID != 0 && it.ID != f.ID,
		f.Key != "" && it.Key() != f.Key,
		f.From != 0 && it.EnqueuedAt < f.From,
		f.To != 0 && it.EnqueuedAt >= f.To:
		return false
	}
	return true
}

// ErrorMatches reports whether text is in it's last error or in an error
// of its history.
func ErrorMatches(it *state.Item, text string) bool {
	if strings.Contains(it.LastError(), text) {
		return true
	}
	for _, a := range it.History() {
		if strings.Contains(a.Error, text) {
			return true
		}
	}
	return false
}

// Walk is where a bounded walk stopped.
type Walk struct {
	// Next is the ID to resume after: the last ID looked at when the walk
	// stopped at its budget or its limit, 0 when it reached the end.
	Next uint64
	// Scanned counts the stored items looked at.
	Scanned int
}

// QueueStart returns an ID at or below the queue's smallest: that of the
// first item put after the queue was created, when no item ever moved in
// from another queue (a move keeps the item's older ID), else 1. A walk
// over a queue created late in a big directory starts there instead of
// at the directory's first item.
func QueueStart(st *state.State, queue uint64) uint64 {
	qs := st.Queue(queue)
	if qs == nil || qs.Created() == 0 || qs.Counters().MovedIn != 0 {
		return 1
	}
	return FirstAt(st, qs.Created())
}

// Each calls fn, in ID order, for the items of queue above after that
// pass f's exact fields at now, until fn returns false or budget stored
// items have been looked at. It starts at the item f names when f is
// exact, and otherwise at the first item put at or after f.From or the
// queue's creation, whichever is later (IDs are handed out in the order
// of put times, which never go back; see QueueStart). It stops at the
// first item put at or after f.To.
func Each(st *state.State, queue uint64, f Filter, after uint64, budget int, now int64, fn func(*state.Item) bool) Walk {
	var w Walk
	if f.Exact() {
		it := exact(st, queue, f, now)
		if it != nil && it.ID > after && f.Matches(it, queue, now) {
			w.Scanned = 1
			fn(it)
		}
		return w
	}
	if after == math.MaxUint64 {
		return w
	}
	start := max(after+1, QueueStart(st, queue))
	if f.From != 0 {
		start = max(start, FirstAt(st, f.From))
	}
	stopped := false
	st.EachFrom(start, func(it *state.Item) bool {
		if f.To != 0 && it.EnqueuedAt >= f.To {
			return false
		}
		if w.Scanned >= budget {
			stopped = true
			return false
		}
		w.Scanned++
		w.Next = it.ID
		if f.Matches(it, queue, now) && !fn(it) {
			stopped = true
			return false
		}
		return true
	})
	if !stopped {
		w.Next = 0
	}
	return w
}

// exact returns the item f names by ID or key, nil when none is stored.
func exact(st *state.State, queue uint64, f Filter, now int64) *state.Item {
	if f.ID != 0 {
		return st.Item(f.ID)
	}
	qs := st.Queue(queue)
	if qs == nil {
		return nil
	}
	// A window of 0 counts only a key held by a stored item.
	id, held := qs.KeyHolder(f.Key, now, 0)
	if !held {
		return nil
	}
	return st.Item(id)
}

// FirstAt returns the smallest ID whose item, if stored, was put at or
// after t: a binary search over the IDs, each probe the first stored item
// at or above an ID. It relies on put times growing with IDs.
func FirstAt(st *state.State, t int64) uint64 {
	lo, hi := uint64(1), st.NextID() // the answer lies in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		var probe *state.Item
		st.EachFrom(mid, func(it *state.Item) bool {
			probe = it
			return false
		})
		switch {
		case probe == nil:
			hi = mid
		case probe.EnqueuedAt >= t:
			hi = mid
		default:
			lo = probe.ID + 1
		}
	}
	return lo
}

// None reports whether f can match no item of qs at now because the queue
// holds none in f's state: a walk need not look. It promotes the items
// whose due time has come, as a Get would, so that the counts of ready
// and delayed items are those of StateOf.
func None(qs *state.QueueState, f Filter, now int64) bool {
	if f.State == "" {
		return qs.Len() == 0
	}
	qs.Promote(now)
	g := qs.Gauges()
	switch f.State {
	case Ready:
		return g.Ready == 0
	case Delayed:
		return g.Delayed == 0
	case Leased:
		return g.Leased == 0
	case Dead:
		return g.Dead == 0
	}
	return false
}
