package state

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// DefaultQueue is the ID of a directory's default queue. It always exists,
// has no name and cannot be deleted. A named queue's ID is the LSN of the
// record that created it, so IDs are never reused: a queue deleted and
// created again under its name is a new incarnation with a new ID, and no
// receipt, record or handle of the old one can touch it.
const DefaultQueue uint64 = 0

// MaxQueueName is the longest queue name, in bytes.
const MaxQueueName = 100

// CheckQueueName says what is wrong with name as the name of a queue, or
// returns nil: 1 to MaxQueueName bytes of ASCII letters, digits, '.', '_'
// and '-', starting with a letter or digit. Names are case-sensitive. The
// characters are those safe in a file name, a URL path segment, a metric
// label and a NATS subject token, so a name means the same everywhere it
// travels.
func CheckQueueName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("queue name is empty (the default queue has no name)")
	case len(name) > MaxQueueName:
		return fmt.Errorf("queue name of %d bytes, at most %d", len(name), MaxQueueName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !ok && i > 0 {
			ok = c == '.' || c == '_' || c == '-'
		}
		if !ok {
			return fmt.Errorf("queue name %q: byte %d (%q) is not allowed: use letters, digits, '.', '_' and '-', starting with a letter or digit", name, i, c)
		}
	}
	return nil
}

// Settings are a queue's recorded settings, the effective values (the
// caller has applied its defaults): durations in nanoseconds, 0 meaning "no
// bound" for MaxItems, MaxBytes and MaxInFlight. The state enforces
// MaxInFlight on every lease; the others are the caller's to apply, and are
// kept so that every reader of the directory knows them.
type Settings struct {
	Visibility  int64
	MaxAttempts int64
	KeyWindow   int64
	MaxItems    int64
	MaxBytes    int64
	MaxInFlight int64
}

// QueueState is one queue of a directory: its heaps of waiting items, its
// dead letters, its keys, its counts and its settings.
type QueueState struct {
	id          uint64
	name        string
	created     int64
	settings    Settings
	pausedUntil int64 // 0: not paused; math.MaxInt64: until resumed

	// Waiting items are in exactly one of delayed (ordered by due time) or
	// the ready heap of their priority (ordered by due time, then Seq).
	// An item moves from delayed to ready only in Promote, so a due item may
	// still sit in delayed until a consumer asks: that lag is a metric.
	st      *State
	delayed heap[uint64] // use dheap, but for its length and whole contents
	// unordered: delayed holds its items in no order yet (a snapshot was
	// just loaded, in ID order, which is most often due order); dheap
	// orders them when first asked, and a promotion needs no order at all.
	// An item that leaves it meanwhile leaves a hole (ID 0, never an
	// item's), so the rest keep their order: holes counts them.
	unordered bool
	holes     int
	released  bool // the state's items were released: counts only
	// releasedDelayed is how many items were delayed then.
	releasedDelayed int
	// maxDelayedDue bounds the due times in delayed from above (pushes
	// raise it, removals leave it): when now reaches it, every delayed item
	// is due and Promote moves them all at once.
	maxDelayedDue int64
	ready         map[int64]*heap[uint64]
	levels        []int64 // priorities whose ready heap is non-empty, ascending
	nready        int
	leased        int

	deadOrder []deadEntry // dead letters oldest first; stale entries skipped
	ndead     int

	keys map[string]*keyEntry
	// relKeys are its keys of items that are gone, held for its key
	// window, in release order (times only grow); pruned from the front.
	// relStale of them are no longer its entry for their key (a later
	// item took it once the window ended; they go at the next prune).
	relKeys  []*keyEntry
	relStale int
	// staleMax bounds the release times of the stale ones (while relStale
	// is not 0), so KeysAt knows when they are all past a window.
	staleMax int64
	// keyWindow is the key window its place in State.keyHeap counts with;
	// keyPos is that place (-1: it has no released keys).
	keyWindow int64
	keyPos    int32

	n        int   // items stored
	bytes    int64 // sum of their body sizes
	counters Counters
}

func (s *State) newQueueState(id uint64, name string, created int64, set Settings) *QueueState {
	return &QueueState{
		id: id, name: name, created: created, settings: set,
		st:            s,
		delayed:       s.dueHeap(),
		maxDelayedDue: math.MinInt64,
		ready:         make(map[int64]*heap[uint64]),
		keys:          make(map[string]*keyEntry),
		keyWindow:     set.KeyWindow,
		keyPos:        -1,
	}
}

// keyDue is when the window of its first released key ends, by the
// window known to it.
func (q *QueueState) keyDue() int64 { return q.relKeys[0].Released + q.keyWindow }

// SetKeyWindow tells the state q's key window, which pruning and
// GaugesAt count with: a named queue's is in its settings, the default
// queue's is the directory's (not recorded), to be set after loading.
func (q *QueueState) SetKeyWindow(w int64) {
	if w == q.keyWindow {
		return
	}
	if w > q.keyWindow && q.relStale > 0 {
		q.dropStale()
	}
	q.keyWindow = w
	if q.keyPos >= 0 {
		q.st.keyHeap.Fix(q)
	}
}

// releaseKey adds k, just released, to q's released keys, in order of
// release time: the queue's records come in time order, so k goes last,
// but a state can be given records out of order (or a snapshot whose keys
// were released after its newest record), and pruning, KeysAt and the
// snapshot rely on the order.
func (s *State) releaseKey(q *QueueState, k *keyEntry) {
	i := len(q.relKeys)
	if i > 0 && q.relKeys[i-1].Released > k.Released {
		// After every key released at or before it.
		i, _ = slices.BinarySearchFunc(q.relKeys, k.Released, func(x *keyEntry, t int64) int {
			if x.Released <= t {
				return -1
			}
			return 1
		})
	}
	q.relKeys = slices.Insert(q.relKeys, i, k)
	s.releasedN++
	switch {
	case len(q.relKeys) == 1:
		s.keyHeap.Push(q)
	case i == 0:
		s.keyHeap.Fix(q) // a new first key: an earlier due
	}
}

// dropStale drops q's stale released keys. Each was taken once its window
// had ended, by the window of the day; a longer window would count it as
// not ended yet, so a window that grows drops them first (KeysAt relies on
// their being past the window, and pruning them later is no cheaper).
func (q *QueueState) dropStale() {
	live := q.relKeys[:0]
	for _, k := range q.relKeys {
		if q.keys[k.Key] == k {
			live = append(live, k)
		}
	}
	clear(q.relKeys[len(live):])
	q.st.releasedN -= len(q.relKeys) - len(live)
	q.relKeys = live
	q.relStale = 0
	if len(live) == 0 && q.keyPos >= 0 {
		q.st.keyHeap.Remove(q)
	}
}

// forgetEnded forgets q's released keys whose window has ended by now,
// and gives q its place in State.keyHeap again.
func (q *QueueState) forgetEnded(now, window int64) {
	s := q.st
	n := 0
	for _, k := range q.relKeys {
		if k.Released+window > now {
			break
		}
		if q.keys[k.Key] == k {
			delete(q.keys, k.Key)
			k.gone = s.epoch
		} else {
			q.relStale--
		}
		n++
	}
	if n == 0 {
		return
	}
	q.dropReleased(n)
	s.releasedN -= n
	if len(q.relKeys) == 0 {
		s.keyHeap.Remove(q)
	} else {
		s.keyHeap.Fix(q)
	}
}

// replaceKey marks k, q's entry for its key, as taken by a later item.
func (q *QueueState) replaceKey(k *keyEntry) {
	k.gone = q.st.epoch
	if k.Released != 0 {
		q.relStale++
		q.staleMax = max(q.staleMax, k.Released)
	}
}

func (q *QueueState) dropReleased(n int) {
	if n == 0 {
		return
	}
	clear(q.relKeys[:n])
	q.relKeys = q.relKeys[n:]
	// Copy the rest down only when it is small next to what was dropped,
	// so the backing array does not grow without bound and the copying
	// costs O(1) per key.
	if len(q.relKeys) < n {
		q.relKeys = append([]*keyEntry(nil), q.relKeys...)
	}
}

// KeysAt is how many keys q holds as KeyHolder at now with window sees
// them: those of its stored items and those released within the window.
// Gauges counts the keys not forgotten yet (PruneKeys), which on a queue
// with no records can be all it ever had. It costs O(log n) of the keys.
func (q *QueueState) KeysAt(now, window int64) int {
	ended, _ := slices.BinarySearchFunc(q.relKeys, now, func(k *keyEntry, now int64) int {
		return cmp.Compare(k.Released+window, now+1)
	})
	if q.relStale == 0 || q.staleMax+window <= now {
		// The stale keys are all among the ended ones (a later item took
		// each key only once its window had ended).
		return len(q.keys) - (ended - q.relStale)
	}
	// Asked with a window longer than the one the keys were taken under
	// (a window the state is told drops stale keys as it grows): count.
	gone := 0
	for _, k := range q.relKeys[:ended] {
		if q.keys[k.Key] == k {
			gone++
		}
	}
	return len(q.keys) - gone
}

// dheap returns the delayed heap, in heap order.
func (q *QueueState) dheap() *heap[uint64] {
	if q.unordered {
		q.squeeze()
		q.delayed.init()
		q.unordered = false
	}
	return &q.delayed
}

// delayedLen is the number of items in the delayed heap.
func (q *QueueState) delayedLen() int { return q.delayed.Len() - q.holes }

// squeeze closes the holes in the unordered delayed heap, keeping the
// order of the rest.
func (q *QueueState) squeeze() {
	if q.holes == 0 {
		return
	}
	h := &q.delayed
	w := 0
	for _, id := range h.items {
		if id != 0 {
			h.items[w] = id
			h.setPos(id, int32(w))
			w++
		}
	}
	clear(h.items[w:])
	h.items = h.items[:w]
	h.shrink()
	q.holes = 0
}

// pushDelayed adds id to the delayed heap, leaving it unordered if it is:
// the records replayed after a snapshot's items were loaded neither order
// them nor pay for it.
func (q *QueueState) pushDelayed(id uint64, due int64) {
	if q.unordered {
		q.delayed.Append(id)
	} else {
		q.delayed.Push(id)
	}
	q.maxDelayedDue = max(q.maxDelayedDue, due)
}

// removeDelayed takes id out of the delayed heap, ordered or not.
func (q *QueueState) removeDelayed(id uint64) {
	if !q.unordered {
		q.delayed.Remove(id)
		return
	}
	h := &q.delayed
	h.items[h.pos(id)] = 0
	h.setPos(id, -1)
	q.holes++
	if len(h.items) > 1024 && q.holes > len(h.items)/2 {
		q.squeeze() // most of it left: hold no more than twice what stays
	}
}

// ID is the queue's incarnation ID (DefaultQueue for the default queue).
func (q *QueueState) ID() uint64 { return q.id }

// Name is the queue's name ("" for the default queue).
func (q *QueueState) Name() string { return q.name }

// Created is the time of the record that created the queue (0 for the
// default queue).
func (q *QueueState) Created() int64 { return q.created }

// Settings are the queue's recorded settings (zero for the default queue
// unless recorded: its settings are the Options given at Open).
func (q *QueueState) Settings() Settings { return q.settings }

// PausedUntil is 0 when the queue is not paused, math.MaxInt64 when it is
// paused until resumed, otherwise the time its pause ends.
func (q *QueueState) PausedUntil() int64 { return q.pausedUntil }

// Paused reports whether the queue delivers nothing at t.
func (q *QueueState) Paused(t int64) bool { return q.pausedUntil != 0 && t < q.pausedUntil }

// Counters returns the queue's transition counters.
func (q *QueueState) Counters() Counters { return q.counters }

// Len is the number of stored items and Bytes the sum of their body sizes;
// MaxItems and MaxBytes bound these.
func (q *QueueState) Len() int     { return q.n }
func (q *QueueState) Bytes() int64 { return q.bytes }

// ReadyLen is the number of items in the ready heaps: those Promote moved
// there (GaugesAt counts the due ones it has not moved yet too).
func (q *QueueState) ReadyLen() int { return q.nready }

// Leased is the number of open leases.
func (q *QueueState) Leased() int { return q.leased }

// Gauges returns counts by status and the times behind the age metrics.
func (q *QueueState) Gauges() Gauges {
	g := Gauges{
		Ready:   q.nready,
		Delayed: q.delayedLen(),
		Leased:  q.leased,
		Dead:    q.ndead,
		Items:   q.n,
		Bytes:   q.bytes,
		Keys:    len(q.keys),
	}
	if q.released {
		g.Delayed = q.releasedDelayed
		return g
	}
	for _, p := range q.levels {
		if id, ok := q.ready[p].Min(); ok {
			if due := q.st.items.get(id).due; g.OldestReadyDue == 0 || due < g.OldestReadyDue {
				g.OldestReadyDue = due
			}
		}
	}
	if id, ok := q.dheap().Min(); ok {
		g.DelayedHeadDue = q.st.items.get(id).due
	}
	return g
}

// GaugesAt is Gauges as a reader at now sees the queue: an item whose due
// time has passed is ready, whether or not a consumer has looked (and
// Promote moved it), and counts in OldestReadyDue. Nothing is moved: the
// count costs O(the due items still in the delayed heap).
func (q *QueueState) GaugesAt(now int64) Gauges {
	g := q.Gauges()
	if q.released {
		return g
	}
	if n, oldest := q.dueDelayed(now); n > 0 {
		g.Ready += n
		g.Delayed -= n
		if g.OldestReadyDue == 0 || oldest < g.OldestReadyDue {
			g.OldestReadyDue = oldest
		}
	}
	return g
}

// Promote moves waiting items whose due time is at or before now from the
// delayed heap to the ready heaps. Moving k of the n delayed items one at
// a time costs O(k log n); one pass over the heap that keeps the rest
// costs O(n). Promote takes the pass when every item is due, when the heap
// is unordered (just loaded: ordering it would cost a pass anyway), and
// when a count of the due items, which stops at n/log2(n), reaches that
// bound; so the first Promote after an open costs a pass whatever the
// backlog holds, and later ones what they move.
func (q *QueueState) Promote(now int64) {
	n := q.delayedLen()
	if n == 0 {
		return
	}
	if n > bulkPromote {
		if q.maxDelayedDue <= now {
			q.promotePass(math.MaxInt64)
			return
		}
		if bound := n / bits.Len(uint(n)); q.unordered || q.countDue(now, bound) >= bound {
			q.promotePass(now)
			return
		}
	}
	for {
		id, ok := q.dheap().Min()
		if !ok {
			return
		}
		e := q.st.items.get(id)
		if e.due > now {
			return
		}
		q.delayed.Remove(id)
		q.pushReady(id, e)
	}
}

// bulkPromote is the size of delayed from which Promote considers moving
// items in one pass rather than one at a time.
const bulkPromote = 256

// countDue counts the delayed items due at or before now, stopping at
// limit: a walk of the heap's top, O(the count).
func (q *QueueState) countDue(now int64, limit int) int {
	h := q.dheap()
	if len(h.items) == 0 || q.st.items.get(h.items[0]).due > now {
		return 0
	}
	n := 0
	stack := []int{0}
	for len(stack) > 0 && n < limit {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n++
		for c := 2*i + 1; c <= 2*i+2 && c < len(h.items); c++ {
			if q.st.items.get(h.items[c]).due <= now {
				stack = append(stack, c)
			}
		}
	}
	return n
}

// dueDelayed counts the delayed items due at or before now, without
// moving them, and gives the earliest due time among them: O(their
// number), or a pass when the heap is unordered.
func (q *QueueState) dueDelayed(now int64) (n int, oldest int64) {
	if q.unordered {
		for _, id := range q.delayed.items {
			if id == 0 {
				continue // a hole
			}
			if due := q.st.items.get(id).due; due <= now {
				if n == 0 || due < oldest {
					oldest = due
				}
				n++
			}
		}
		return n, oldest
	}
	if id, ok := q.delayed.Min(); ok {
		if due := q.st.items.get(id).due; due <= now {
			return q.countDue(now, math.MaxInt), due
		}
	}
	return 0, 0
}

// promotePass moves every due item to the ready heaps in one pass over the
// delayed heap, which keeps the others and is ordered again in O(their
// number). Each priority's due items join its heap at the end; those of a
// priority whose heap was empty and that come in due order (as a
// snapshot's do, loaded in ID order) are a heap as they stand, and the
// first such priority's take the delayed heap's own slice, so a backlog of
// one priority is made ready without a copy. Other heaps are ordered once,
// in O(n).
func (q *QueueState) promotePass(now int64) {
	type run struct {
		p       int64
		h       *heap[uint64]
		sorted  bool // h was empty and holds its items in due order
		inPlace bool // its items go to the front of the delayed heap's slice
		start   int  // how many items h held before the pass
		last    *entry
		lastID  uint64
	}
	var runs []run
	items := q.delayed.items
	var rest []uint64
	maxDue := int64(math.MinInt64)
	w := 0 // the in-place run's length
	r := -1
	for _, id := range items {
		if id == 0 {
			continue // a hole: unordered, an item left
		}
		e := q.st.items.get(id)
		if e.due > now {
			rest = append(rest, id)
			maxDue = max(maxDue, e.due)
			continue
		}
		if r < 0 || runs[r].p != e.priority {
			r = slices.IndexFunc(runs, func(x run) bool { return x.p == e.priority })
			if r < 0 {
				h := q.ready[e.priority]
				if h == nil {
					h = new(heap[uint64])
					*h = q.st.dueHeap()
					q.ready[e.priority] = h
				}
				empty := h.Len() == 0
				if empty {
					q.levels = append(q.levels, e.priority)
				}
				inPlace := empty && !slices.ContainsFunc(runs, func(x run) bool { return x.inPlace })
				runs = append(runs, run{p: e.priority, h: h, sorted: empty, inPlace: inPlace, start: h.Len()})
				r = len(runs) - 1
			}
		}
		x := &runs[r]
		if x.sorted && x.last != nil && entryDueLess(e, id, x.last, x.lastID) {
			x.sorted = false
		}
		x.last, x.lastID = e, id
		if x.inPlace {
			e.heapPos = int32(w)
			items[w] = id // w is at most the index read: nothing unread is overwritten
			w++
		} else {
			e.heapPos = int32(len(x.h.items))
			x.h.items = append(x.h.items, id)
		}
		e.ready = true
		q.nready++
	}
	clear(items[w:])
	for _, x := range runs {
		if x.inPlace {
			x.h.items = items[:w]
			x.h.shrink() // most items stayed delayed: no need to hold their slice
		}
		switch added := len(x.h.items) - x.start; {
		case x.sorted:
		case x.start > 0 && added*bits.Len(uint(len(x.h.items))) < len(x.h.items):
			// A few items joined a large heap (a put of a batch into a
			// backlog): pushed one by one, each in O(log n), and mostly at
			// once, as they are due no sooner than what it holds. Ordering
			// the whole heap again would cost O(n) per pass.
			for i := x.start; i < len(x.h.items); i++ {
				x.h.up(i)
			}
		default:
			x.h.init()
		}
	}
	if len(runs) > 0 {
		slices.Sort(q.levels)
	}
	q.delayed.items = rest
	q.delayed.init()
	q.unordered, q.holes = false, 0
	q.maxDelayedDue = maxDue
}

// NextReady returns the ready item that the next delivery should take
// (smallest priority, then earliest due time, then smallest Seq, then
// smallest ID), or nil. It does not look at pauses or caps. Call Promote
// first.
func (q *QueueState) NextReady() *Item {
	if len(q.levels) == 0 {
		return nil
	}
	id, _ := q.ready[q.levels[0]].Min()
	return q.st.viewOf(id)
}

// NextDue is the due time of the earliest delayed item (ok false if none).
func (q *QueueState) NextDue() (int64, bool) {
	if id, ok := q.dheap().Min(); ok {
		return q.st.items.get(id).due, true
	}
	return 0, false
}

// KeyHolder reports the item that holds key in this queue at now under a
// key window of window nanoseconds: a stored item, or one acked, discarded
// or purged less than window ago.
func (q *QueueState) KeyHolder(key string, now, window int64) (uint64, bool) {
	k := q.keys[key]
	if k == nil {
		return 0, false
	}
	if k.Released != 0 && k.Released+window <= now {
		return 0, false
	}
	return k.ID, true
}

// DeadLetters returns copies of up to limit dead letters, oldest first
// (limit <= 0: all).
func (q *QueueState) DeadLetters(limit int) []Item {
	out, _ := q.DeadLettersAfter(DeadPlace{}, limit)
	return out
}

// DeadPlace is a dead letter's place in its queue's list, oldest first:
// the LSN of the record that dead-lettered it, then its ID (a snapshot of
// an early version gives every dead letter LSN 0).
type DeadPlace struct{ Seq, ID uint64 }

func (d deadEntry) place() DeadPlace { return DeadPlace{d.seq, d.id} }

func comparePlaces(a, b DeadPlace) int {
	if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// DeadLettersAfter returns copies of up to limit dead letters (limit <= 0:
// all) placed after place in the list, oldest first, and the place of the
// last one returned (the zero DeadPlace starts the list, and comes back
// when nothing was returned). A listing goes page by page with it, each
// page costing O(log n + limit): a dead letter redriven or purged between
// pages is not returned, one dead-lettered meanwhile comes last.
func (q *QueueState) DeadLettersAfter(place DeadPlace, limit int) (out []Item, last DeadPlace) {
	i, found := slices.BinarySearchFunc(q.deadOrder, place, func(d deadEntry, p DeadPlace) int { return comparePlaces(d.place(), p) })
	if found {
		i++
	}
	for _, d := range q.deadOrder[i:] {
		if limit > 0 && len(out) >= limit {
			break
		}
		if q.st.isDead(d) {
			out = append(out, q.st.Item(d.id).Clone())
			last = d.place()
		}
	}
	return out, last
}

func (q *QueueState) pushReady(id uint64, e *entry) {
	p := e.priority
	h := q.ready[p]
	if h == nil {
		h = new(heap[uint64])
		*h = q.st.dueHeap()
		q.ready[p] = h
	}
	if h.Len() == 0 {
		i := sort.Search(len(q.levels), func(i int) bool { return q.levels[i] >= p })
		q.levels = append(q.levels, 0)
		copy(q.levels[i+1:], q.levels[i:])
		q.levels[i] = p
	}
	e.status = Waiting
	e.ready = true
	h.Push(id)
	q.nready++
}

// removeWaiting takes a waiting item out of its heaps.
func (q *QueueState) removeWaiting(id uint64, e *entry) {
	if e.ready {
		p := e.priority
		h := q.ready[p]
		h.Remove(id)
		q.nready--
		if h.Len() == 0 {
			i := sort.Search(len(q.levels), func(i int) bool { return q.levels[i] >= p })
			q.levels = append(q.levels[:i], q.levels[i+1:]...)
			delete(q.ready, p)
		}
		e.ready = false
	} else {
		q.removeDelayed(id)
	}
	if x := q.st.xOf(e); x != nil && x.deadlinePos >= 0 {
		q.st.deadlines.Remove(id)
	}
}

func (q *QueueState) leaveDead(id uint64, e *entry) {
	if x := q.st.xOf(e); x != nil {
		x.deadSeq = 0
	}
	q.ndead--
	// Drop stale entries once they are the majority, so the order does not
	// grow without bound under redrive and purge.
	if len(q.deadOrder) > 64 && q.ndead < len(q.deadOrder)/2 {
		live := q.deadOrder[:0:0]
		for _, d := range q.deadOrder {
			if d.id != id && q.st.isDead(d) {
				live = append(live, d)
			}
		}
		q.deadOrder = live
	}
}

func checkSettings(set Settings) error {
	switch {
	case set.Visibility <= 0:
		return fmt.Errorf("visibility %d is not positive", set.Visibility)
	case set.MaxAttempts <= 0:
		return fmt.Errorf("max attempts %d is not positive", set.MaxAttempts)
	case set.KeyWindow < 0, set.MaxItems < 0, set.MaxBytes < 0, set.MaxInFlight < 0:
		return fmt.Errorf("negative setting in %+v", set)
	}
	return nil
}

func (s *State) applyCreate(lsn uint64, r *CreateQueue) error {
	if err := CheckQueueName(r.Name); err != nil {
		return invalid("create: %v", err)
	}
	if s.names[r.Name] != nil {
		return invalid("create of queue %q, which exists as queue %d", r.Name, s.names[r.Name].id)
	}
	if err := checkSettings(r.Settings); err != nil {
		return invalid("create of queue %q: %v", r.Name, err)
	}
	q := s.newQueueState(lsn, r.Name, r.Time, r.Settings)
	s.queues[lsn] = q
	s.names[r.Name] = q
	return nil
}

func (s *State) applySet(q *QueueState, r *SetQueue) error {
	if err := checkSettings(r.Settings); err != nil {
		return invalid("settings of queue %d: %v", q.id, err)
	}
	if old := q.settings.KeyWindow; r.Settings.KeyWindow > old && q.keyPos >= 0 {
		// A longer window counts for the keys whose window is still
		// running; those whose recorded window ended by the record's time
		// are forgotten first, as a prune would have, so that the answer
		// for them does not turn on whether a prune came before (records
		// of other queues start one).
		q.forgetEnded(r.Time, old)
	}
	q.settings = r.Settings
	q.SetKeyWindow(r.Settings.KeyWindow)
	return nil
}

func (s *State) applyPause(q *QueueState, r *PauseQueue) error {
	if r.Until < 0 {
		return invalid("pause of queue %d until %d", q.id, r.Until)
	}
	q.pausedUntil = r.Until
	return nil
}

func (s *State) applyDelete(q *QueueState, r *DeleteQueue) error {
	switch {
	case q.id == DefaultQueue:
		return invalid("delete of the default queue")
	case q.leased > 0 && !r.Force:
		return invalid("delete of queue %d with %d leases open, not forced", q.id, q.leased)
	}
	var gone []uint64
	if q.n > 0 {
		// A pass over the items of every queue: the state keeps no list of
		// a queue's items (a tenant's queue is most often deleted empty,
		// which costs nothing here).
		s.deletePasses++
		s.items.each(func(id uint64, e *entry) {
			if e.queue == q.id {
				gone = append(gone, id)
			}
		})
	}
	for _, id := range gone {
		e := s.items.get(id)
		if s.frz != nil {
			s.frz.keep(id, e) // as it was: the snapshot holds the queue
		}
		switch e.status {
		case Waiting:
			q.removeWaiting(id, e)
		case Leased:
			s.endLease(q, s.leaseOf[id])
		}
		delete(s.inline, id)
		s.dropExt(e)
		s.items.del(id)
	}
	s.bytes -= q.bytes
	if q.keyPos >= 0 {
		s.keyHeap.Remove(q)
	}
	s.releasedN -= len(q.relKeys)
	delete(s.queues, q.id)
	delete(s.names, q.name)
	return nil
}

func (s *State) applyMove(lsn uint64, q *QueueState, r *Move) error {
	to := s.queues[r.Target]
	switch {
	case to == nil:
		return invalid("redrive from queue %d into queue %d, which does not exist", q.id, r.Target)
	case to == q:
		return invalid("redrive of queue %d into itself as a move", q.id)
	}
	if err := s.checkDead(q, r.IDs, "redrive"); err != nil {
		return err
	}
	for _, id := range r.IDs {
		if key := s.key(s.entry(id)); key != "" {
			if k := to.keys[key]; k != nil && k.Released == 0 {
				return invalid("redrive of item %d into queue %d: key %q held by stored item %d", id, to.id, key, k.ID)
			}
		}
	}
	for _, id := range r.IDs {
		e := s.entry(id)
		q.leaveDead(id, e)
		q.n--
		q.bytes -= int64(e.body.Len)
		if key := s.key(e); key != "" {
			if k := q.keys[key]; k != nil && k.ID == id {
				delete(q.keys, key)
				k.gone = s.epoch
			}
			if k := to.keys[key]; k != nil {
				to.replaceKey(k)
			}
			to.keys[key] = &keyEntry{Key: key, ID: id, q: to}
		}
		e.queue = to.id
		to.n++
		to.bytes += int64(e.body.Len)
		s.requeue(to, id, e, r.Time, lsn)
		q.counters.Redriven++
		q.counters.MovedOut++
		to.counters.MovedIn++
	}
	return nil
}
