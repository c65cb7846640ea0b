package state

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// ErrInvalid is returned by Apply for a record that does not fit the state
// (an unknown receipt, a lease of an item that is not ready, an LSN out of
// sequence). The live queue checks every call before it makes a record, so
// during replay this means the log is corrupt.
var ErrInvalid = errors.New("record does not apply to the state")

// Counters count transitions since the queue was created. They are part of
// the state: replay and snapshots restore them.
type Counters struct {
	Put          uint64 // items put
	Delivered    uint64 // leases started
	Acked        uint64
	Nacked       uint64
	Expired      uint64 // leases that ran out (the item is redelivered)
	DeadLettered uint64
	Discarded    uint64 // deadline passed before a delivery started
	Redriven     uint64
	Purged       uint64
}

// State is the queue's pure state machine: heaps, leases, dead letters and
// keys. It does no I/O, starts no goroutines and never reads a clock: every
// time comes in a record or as an argument. Applying the same records in the
// same order always yields the same state. It is not safe for concurrent
// use; the queue's sequencer owns it.
type State struct {
	items  idIndex          // every stored item (waiting, leased, dead)
	leases map[uint64]*Item // open leases by receipt

	// Waiting items are in exactly one of delayed (ordered by due time) or
	// the ready heap of their priority (ordered by due time, then Seq).
	// An item moves from delayed to ready only in Promote, so a due item may
	// still sit in delayed until a consumer asks: that lag is a metric.
	delayed itemHeap
	// maxDelayedDue bounds the due times in delayed from above (pushes
	// raise it, removals leave it): when now reaches it, every delayed item
	// is due and Promote moves them all at once.
	maxDelayedDue int64
	ready         map[int64]*itemHeap
	levels        []int64 // priorities whose ready heap is non-empty, ascending
	nready        int

	leaseHeap itemHeap // leased items by lease end
	deadlines itemHeap // waiting items that have a deadline, by deadline

	deadOrder []deadEntry // dead letters oldest first; stale entries skipped
	ndead     int

	keys     map[string]*keyEntry
	released []*keyEntry // keys released, in release order (times only grow); pruned from the front

	nextID   uint64 // ID of the next item put
	lastLSN  uint64 // LSN of the last record applied (or covered by the snapshot)
	lastTime int64  // newest time seen in any record
	bytes    int64  // sum of body sizes of stored items
	counters Counters
}

type deadEntry struct {
	it  *Item
	seq uint64
}

// keyEntry holds an idempotency key. While the item is stored, Released is 0;
// afterwards the key is held for the queue's key window from Released.
type keyEntry struct {
	Key      string
	ID       uint64
	Released int64
}

// New returns an empty state.
func New() *State {
	s := &State{
		leases: make(map[uint64]*Item),
		ready:  make(map[int64]*itemHeap),
		keys:   make(map[string]*keyEntry),
		nextID: 1,

		maxDelayedDue: math.MinInt64,
	}
	s.delayed = itemHeap{less: dueLess, pos: heapPos}
	s.leaseHeap = itemHeap{less: leaseLess, pos: heapPos}
	s.deadlines = itemHeap{less: deadlineLess, pos: deadlinePos}
	return s
}

func heapPos(it *Item) *int32     { return &it.heapPos }
func deadlinePos(it *Item) *int32 { return &it.deadlinePos }

// dueLess orders by due time, then by the record that made the item waiting,
// then by ID: the items of one put or one redrive share a Seq, and without
// the ID their order would depend on the heap's history (not FIFO, and not the
// same after a snapshot).
func dueLess(a, b *Item) bool {
	if a.Due != b.Due {
		return a.Due < b.Due
	}
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	return a.ID < b.ID
}

func leaseLess(a, b *Item) bool {
	if a.LeaseEnd != b.LeaseEnd {
		return a.LeaseEnd < b.LeaseEnd
	}
	return a.Receipt < b.Receipt
}

func deadlineLess(a, b *Item) bool {
	if a.Deadline != b.Deadline {
		return a.Deadline < b.Deadline
	}
	return a.ID < b.ID
}

// LastLSN is the LSN of the last record applied.
func (s *State) LastLSN() uint64 { return s.lastLSN }

// LastTime is the newest time in any record applied; the queue never lets
// its clock run behind it.
func (s *State) LastTime() int64 { return s.lastTime }

// NextID is the ID the next item put will get.
func (s *State) NextID() uint64 { return s.nextID }

// Counters returns the transition counters.
func (s *State) Counters() Counters { return s.counters }

// Len is the number of stored items and Bytes the sum of their body sizes;
// MaxItems and MaxBytes bound these.
func (s *State) Len() int     { return s.items.len() }
func (s *State) Bytes() int64 { return s.bytes }

// Item returns the stored item with id, or nil. The caller must not modify it.
func (s *State) Item(id uint64) *Item { return s.items.get(id) }

// Leased returns the item whose open lease is receipt, or nil.
func (s *State) Leased(receipt uint64) *Item { return s.leases[receipt] }

// Promote moves waiting items whose due time is at or before now from the
// delayed heap to the ready heaps.
func (s *State) Promote(now int64) {
	if s.delayed.Len() > bulkPromote && s.maxDelayedDue <= now {
		s.promoteAll()
		return
	}
	for {
		it := s.delayed.Min()
		if it == nil || it.Due > now {
			return
		}
		s.delayed.Remove(it)
		s.pushReady(it)
	}
}

// bulkPromote is the size of delayed from which Promote, when every item
// is due (after a recovery, typically), rebuilds the ready heaps in O(n)
// instead of moving items one at a time in O(n log n).
const bulkPromote = 256

func (s *State) promoteAll() {
	touched := make(map[int64]bool)
	for _, it := range s.delayed.items {
		h := s.ready[it.Priority]
		if h == nil {
			h = &itemHeap{less: dueLess, pos: heapPos}
			s.ready[it.Priority] = h
		}
		if h.Len() == 0 && !touched[it.Priority] {
			s.levels = append(s.levels, it.Priority)
		}
		touched[it.Priority] = true
		h.items = append(h.items, it)
		it.ready = true
		s.nready++
	}
	for p := range touched {
		s.ready[p].init()
	}
	slices.Sort(s.levels)
	s.delayed.items = nil
	s.maxDelayedDue = math.MinInt64
}

// NextReady returns the ready item that the next delivery should take
// (smallest priority, then earliest due time, then smallest Seq, then
// smallest ID), or nil.
// Call Promote first.
func (s *State) NextReady() *Item {
	if len(s.levels) == 0 {
		return nil
	}
	return s.ready[s.levels[0]].Min()
}

// NextDue is the due time of the earliest delayed item (ok false if none).
func (s *State) NextDue() (int64, bool) {
	if it := s.delayed.Min(); it != nil {
		return it.Due, true
	}
	return 0, false
}

// NextLeaseEnd is the earliest end of an open lease.
func (s *State) NextLeaseEnd() (int64, bool) {
	if it := s.leaseHeap.Min(); it != nil {
		return it.LeaseEnd, true
	}
	return 0, false
}

// NextDeadline is the earliest deadline of a waiting item.
func (s *State) NextDeadline() (int64, bool) {
	if it := s.deadlines.Min(); it != nil {
		return it.Deadline, true
	}
	return 0, false
}

// ExpiredLeases returns up to max open leases whose end is at or before now,
// sorted by lease end (not necessarily the earliest max of them: callers
// loop until none is left).
func (s *State) ExpiredLeases(now int64, max int) []*Item {
	var out []*Item
	s.walkHeap(&s.leaseHeap, func(it *Item) bool { return it.LeaseEnd <= now }, max, &out)
	return out
}

// PassedDeadlines returns up to max waiting items whose deadline is at or
// before now (callers loop until none is left).
func (s *State) PassedDeadlines(now int64, max int) []*Item {
	var out []*Item
	s.walkHeap(&s.deadlines, func(it *Item) bool { return it.Deadline <= now }, max, &out)
	return out
}

// walkHeap collects heap items for which match holds, visiting only the part
// of the heap where it can hold (match must be monotone in the heap order).
func (s *State) walkHeap(h *itemHeap, match func(*Item) bool, max int, out *[]*Item) {
	var visit func(i int)
	visit = func(i int) {
		if i >= len(h.items) || len(*out) >= max || !match(h.items[i]) {
			return
		}
		*out = append(*out, h.items[i])
		visit(2*i + 1)
		visit(2*i + 2)
	}
	visit(0)
	sort.Slice(*out, func(i, j int) bool { return h.less((*out)[i], (*out)[j]) })
}

// OpenLeases returns every open lease, by receipt.
func (s *State) OpenLeases() []*Item {
	out := make([]*Item, 0, len(s.leases))
	for _, it := range s.leases {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Receipt < out[j].Receipt })
	return out
}

// KeyHolder reports the item that holds key at now under a key window of
// window nanoseconds: a stored item, or one acked, discarded or purged less
// than window ago.
func (s *State) KeyHolder(key string, now, window int64) (uint64, bool) {
	k := s.keys[key]
	if k == nil {
		return 0, false
	}
	if k.Released != 0 && k.Released+window <= now {
		return 0, false
	}
	return k.ID, true
}

// PruneKeys forgets keys released at least window ago. It changes no
// observable behaviour (KeyHolder applies the window itself); it only frees
// memory. Its cost is that of the keys it forgets.
func (s *State) PruneKeys(now, window int64) {
	n := 0
	for _, k := range s.released {
		if k.Released+window > now {
			break
		}
		if s.keys[k.Key] == k {
			delete(s.keys, k.Key)
		}
		n++
	}
	if n == 0 {
		return
	}
	clear(s.released[:n])
	s.released = s.released[n:]
	// Copy the rest down only when it is small next to what was dropped,
	// so the backing array does not grow without bound and the copying
	// costs O(1) per key.
	if len(s.released) < n {
		s.released = append([]*keyEntry(nil), s.released...)
	}
}

// NextKeyRelease returns the release time of the oldest released key that
// is not yet pruned: PruneKeys forgets it once the key window has passed.
func (s *State) NextKeyRelease() (int64, bool) {
	if len(s.released) == 0 {
		return 0, false
	}
	return s.released[0].Released, true
}

// Gauges is a point-in-time view of the state.
type Gauges struct {
	Ready, Delayed, Leased, Dead int
	Items                        int
	Bytes                        int64
	Keys                         int
	// OldestReadyDue is the earliest due time among ready items (0: none);
	// DelayedHeadDue the due time of the earliest delayed item (0: none).
	OldestReadyDue int64
	DelayedHeadDue int64
}

// Gauges returns counts by status and the times behind the age metrics.
func (s *State) Gauges() Gauges {
	g := Gauges{
		Ready:   s.nready,
		Delayed: s.delayed.Len(),
		Leased:  len(s.leases),
		Dead:    s.ndead,
		Items:   s.items.len(),
		Bytes:   s.bytes,
		Keys:    len(s.keys),
	}
	for _, p := range s.levels {
		if it := s.ready[p].Min(); it != nil && (g.OldestReadyDue == 0 || it.Due < g.OldestReadyDue) {
			g.OldestReadyDue = it.Due
		}
	}
	if it := s.delayed.Min(); it != nil {
		g.DelayedHeadDue = it.Due
	}
	return g
}

// DeadLetters returns copies of up to limit dead letters, oldest first
// (limit <= 0: all).
func (s *State) DeadLetters(limit int) []Item {
	var out []Item
	for _, e := range s.deadOrder {
		if limit > 0 && len(out) >= limit {
			break
		}
		if e.it.Status == Dead && e.it.deadSeq == e.seq {
			out = append(out, e.it.Clone())
		}
	}
	return out
}

// Apply applies the record with the given LSN. It checks the whole record
// before it changes anything: on error the state is as before.
func (s *State) Apply(lsn uint64, rec Record) error {
	if lsn != s.lastLSN+1 {
		return fmt.Errorf("%w: lsn %d after %d", ErrInvalid, lsn, s.lastLSN)
	}
	var err error
	switch r := rec.(type) {
	case *Put:
		err = s.applyPut(lsn, r)
	case *Lease:
		err = s.applyLease(lsn, r)
	case *Extend:
		err = s.applyExtend(r)
	case *Ack:
		err = s.applyAck(r)
	case *End:
		err = s.applyEnd(lsn, r)
	case *Discard:
		err = s.applyDiscard(r)
	case *Redrive:
		err = s.applyRedrive(lsn, r)
	case *Purge:
		err = s.applyPurge(r)
	default:
		err = fmt.Errorf("%w: unknown record %T", ErrInvalid, rec)
	}
	if err != nil {
		return err
	}
	s.lastLSN = lsn
	if t := rec.At(); t > s.lastTime {
		s.lastTime = t
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func (s *State) applyPut(lsn uint64, r *Put) error {
	if len(r.Items) == 0 {
		return invalid("put of no items")
	}
	seen := make(map[string]bool)
	for i := range r.Items {
		n := &r.Items[i]
		if n.Deadline != 0 && n.Deadline <= n.Due {
			return invalid("put item %d: deadline %d not after due %d", i, n.Deadline, n.Due)
		}
		if n.Key != "" {
			if k := s.keys[n.Key]; k != nil && k.Released == 0 {
				return invalid("put item %d: key %q held by stored item %d", i, n.Key, k.ID)
			}
			if seen[n.Key] {
				return invalid("put item %d: key %q twice in one put", i, n.Key)
			}
			seen[n.Key] = true
		}
	}
	for i := range r.Items {
		n := &r.Items[i]
		body := n.Body
		if len(body) == 0 {
			body = nil // one form for empty, so equal states encode equally
		}
		it := &Item{
			ID:          s.nextID,
			Body:        body,
			Key:         n.Key,
			Priority:    n.Priority,
			EnqueuedAt:  r.Time,
			Due:         n.Due,
			Deadline:    n.Deadline,
			Seq:         lsn,
			Status:      Waiting,
			heapPos:     -1,
			deadlinePos: -1,
		}
		s.nextID++
		s.items.set(it)
		s.bytes += int64(len(it.Body))
		s.pushWaiting(it)
		if it.Key != "" {
			s.keys[it.Key] = &keyEntry{Key: it.Key, ID: it.ID}
		}
		s.counters.Put++
	}
	return nil
}

func (s *State) applyLease(lsn uint64, r *Lease) error {
	it := s.items.get(r.ID)
	switch {
	case it == nil:
		return invalid("lease of unknown item %d", r.ID)
	case it.Status != Waiting:
		return invalid("lease of item %d that is %s", r.ID, it.Status)
	case it.Due > r.Time:
		return invalid("lease of item %d at %d before it is due at %d", r.ID, r.Time, it.Due)
	case it.Deadline != 0 && r.Time >= it.Deadline:
		return invalid("lease of item %d at %d at or after its deadline %d", r.ID, r.Time, it.Deadline)
	case r.LeaseEnd <= r.Time:
		return invalid("lease of item %d ends at %d, not after %d", r.ID, r.LeaseEnd, r.Time)
	}
	s.removeWaiting(it)
	it.Status = Leased
	it.Receipt = lsn
	it.LeaseEnd = r.LeaseEnd
	it.Attempts++
	it.Deliveries++
	s.leases[lsn] = it
	s.leaseHeap.Push(it)
	s.counters.Delivered++
	return nil
}

// openLease finds the lease named by receipt that is still running at t.
func (s *State) openLease(receipt uint64, t int64, what string) (*Item, error) {
	it := s.leases[receipt]
	if it == nil {
		return nil, invalid("%s of receipt %d that is not an open lease", what, receipt)
	}
	if t >= it.LeaseEnd {
		return nil, invalid("%s of receipt %d at %d after its lease ended at %d", what, receipt, t, it.LeaseEnd)
	}
	return it, nil
}

func (s *State) applyExtend(r *Extend) error {
	it, err := s.openLease(r.Receipt, r.Time, "extend")
	if err != nil {
		return err
	}
	if r.LeaseEnd <= r.Time {
		return invalid("extend of receipt %d to %d, not after %d", r.Receipt, r.LeaseEnd, r.Time)
	}
	it.LeaseEnd = r.LeaseEnd
	s.leaseHeap.Fix(it)
	return nil
}

func (s *State) applyAck(r *Ack) error {
	it, err := s.openLease(r.Receipt, r.Time, "ack")
	if err != nil {
		return err
	}
	s.endLease(it)
	s.remove(it, r.Time)
	s.counters.Acked++
	return nil
}

func (s *State) applyEnd(lsn uint64, r *End) error {
	var it *Item
	var err error
	switch r.Kind {
	case TypeExpire:
		// Recovery expires leases whose end lies in the future: the process
		// that held them is gone.
		if it = s.leases[r.Receipt]; it == nil {
			return invalid("expire of receipt %d that is not an open lease", r.Receipt)
		}
	case TypeNack, TypeDeadLetter:
		if it, err = s.openLease(r.Receipt, r.Time, TypeName(r.Kind)); err != nil {
			return err
		}
	default:
		return invalid("end of kind %d", r.Kind)
	}
	if r.Kind == TypeDeadLetter && !r.Dead {
		return invalid("deadletter of receipt %d that does not dead-letter", r.Receipt)
	}
	s.endLease(it)
	switch r.Kind {
	case TypeNack:
		s.counters.Nacked++
	case TypeExpire:
		s.counters.Expired++
	}
	it.EndedAt = r.Time
	if r.Cause != "" {
		it.LastError = r.Cause
	}
	switch {
	case r.Dead:
		it.Status = Dead
		it.deadSeq = lsn
		s.deadOrder = append(s.deadOrder, deadEntry{it, lsn})
		s.ndead++
		s.counters.DeadLettered++
	case it.Deadline != 0 && r.Due >= it.Deadline:
		s.remove(it, r.Time)
		s.counters.Discarded++
	default:
		it.Status = Waiting
		it.Due = r.Due
		it.Seq = lsn
		s.pushWaiting(it)
	}
	return nil
}

func (s *State) applyDiscard(r *Discard) error {
	if len(r.IDs) == 0 {
		return invalid("discard of no items")
	}
	for _, id := range r.IDs {
		it := s.items.get(id)
		if it == nil || it.Status != Waiting || it.Deadline == 0 || it.Deadline > r.Time {
			return invalid("discard of item %d that is not waiting past its deadline at %d", id, r.Time)
		}
	}
	if err := noRepeats(r.IDs); err != nil {
		return err
	}
	for _, id := range r.IDs {
		it := s.items.get(id)
		s.removeWaiting(it)
		s.remove(it, r.Time)
		s.counters.Discarded++
	}
	return nil
}

func (s *State) applyRedrive(lsn uint64, r *Redrive) error {
	if err := s.checkDead(r.IDs, "redrive"); err != nil {
		return err
	}
	for _, id := range r.IDs {
		it := s.items.get(id)
		s.leaveDead(it)
		it.Status = Waiting
		it.Attempts = 0
		it.Due = r.Time
		it.Seq = lsn
		s.pushWaiting(it)
		s.counters.Redriven++
	}
	return nil
}

func (s *State) applyPurge(r *Purge) error {
	ids := r.IDs
	if r.All {
		if len(ids) != 0 {
			return invalid("purge of all with ids named")
		}
		for _, e := range s.deadOrder {
			if e.it.Status == Dead && e.it.deadSeq == e.seq {
				ids = append(ids, e.it.ID)
			}
		}
	} else if err := s.checkDead(ids, "purge"); err != nil {
		return err
	}
	for _, id := range ids {
		it := s.items.get(id)
		s.leaveDead(it)
		s.remove(it, r.Time)
		s.counters.Purged++
	}
	return nil
}

func (s *State) checkDead(ids []uint64, what string) error {
	if len(ids) == 0 {
		return invalid("%s of no items", what)
	}
	for _, id := range ids {
		if it := s.items.get(id); it == nil || it.Status != Dead {
			return invalid("%s of item %d that is not a dead letter", what, id)
		}
	}
	return noRepeats(ids)
}

func noRepeats(ids []uint64) error {
	if len(ids) < 2 {
		return nil
	}
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return invalid("item %d named twice", id)
		}
		seen[id] = true
	}
	return nil
}

func (s *State) pushWaiting(it *Item) {
	s.delayed.Push(it)
	s.maxDelayedDue = max(s.maxDelayedDue, it.Due)
	if it.Deadline != 0 {
		s.deadlines.Push(it)
	}
}

func (s *State) pushReady(it *Item) {
	h := s.ready[it.Priority]
	if h == nil {
		h = &itemHeap{less: dueLess, pos: heapPos}
		s.ready[it.Priority] = h
	}
	if h.Len() == 0 {
		i := sort.Search(len(s.levels), func(i int) bool { return s.levels[i] >= it.Priority })
		s.levels = append(s.levels, 0)
		copy(s.levels[i+1:], s.levels[i:])
		s.levels[i] = it.Priority
	}
	h.Push(it)
	it.Status = Waiting
	s.nready++
	it.ready = true
}

// removeWaiting takes a waiting item out of its heaps.
func (s *State) removeWaiting(it *Item) {
	if it.ready {
		h := s.ready[it.Priority]
		h.Remove(it)
		s.nready--
		if h.Len() == 0 {
			i := sort.Search(len(s.levels), func(i int) bool { return s.levels[i] >= it.Priority })
			s.levels = append(s.levels[:i], s.levels[i+1:]...)
			delete(s.ready, it.Priority)
		}
		it.ready = false
	} else {
		s.delayed.Remove(it)
	}
	if it.deadlinePos >= 0 {
		s.deadlines.Remove(it)
	}
}

func (s *State) endLease(it *Item) {
	delete(s.leases, it.Receipt)
	s.leaseHeap.Remove(it)
	it.Receipt = 0
	it.LeaseEnd = 0
}

func (s *State) leaveDead(it *Item) {
	it.deadSeq = 0
	s.ndead--
	// Drop stale entries once they are the majority, so the order does not
	// grow without bound under redrive and purge.
	if len(s.deadOrder) > 64 && s.ndead < len(s.deadOrder)/2 {
		live := s.deadOrder[:0:0]
		for _, e := range s.deadOrder {
			if e.it.Status == Dead && e.it.deadSeq == e.seq && e.it != it {
				live = append(live, e)
			}
		}
		s.deadOrder = live
	}
}

// remove forgets an item that was acked, discarded or purged; its key is
// held for the key window from t.
func (s *State) remove(it *Item, t int64) {
	s.items.del(it.ID)
	s.bytes -= int64(len(it.Body))
	it.Status = 0
	if it.Key != "" {
		if k := s.keys[it.Key]; k != nil && k.ID == it.ID {
			// Released 0 means "still stored" (also on disk), so a release
			// at time 0 is recorded 1 ns later.
			k.Released = t
			if t == 0 {
				k.Released = 1
			}
			s.released = append(s.released, k)
		}
	}
}

// Each calls fn for every stored item in ID order; fn must not
// modify the item or the state.
func (s *State) Each(fn func(*Item)) {
	s.items.each(fn)
}
