package state

import (
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BodySum returns the CRC-32C of a body, as BodyRef.Sum holds it.
func BodySum(body []byte) uint32 { return crc32.Checksum(body, castagnoli) }

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
	Redriven     uint64 // dead letters sent back to waiting, here or to another queue
	Purged       uint64
	MovedIn      uint64 // dead letters of another queue redriven into this one
	MovedOut     uint64 // dead letters of this queue redriven into another
}

// Add returns the sum of c and d, field by field.
func (c Counters) Add(d Counters) Counters {
	return Counters{
		Put: c.Put + d.Put, Delivered: c.Delivered + d.Delivered, Acked: c.Acked + d.Acked,
		Nacked: c.Nacked + d.Nacked, Expired: c.Expired + d.Expired, DeadLettered: c.DeadLettered + d.DeadLettered,
		Discarded: c.Discarded + d.Discarded, Redriven: c.Redriven + d.Redriven, Purged: c.Purged + d.Purged,
		MovedIn: c.MovedIn + d.MovedIn, MovedOut: c.MovedOut + d.MovedOut,
	}
}

// State is the pure state machine of a queue directory: every queue in it,
// with its heaps, leases, dead letters and keys. It does no I/O, starts no
// goroutines and never reads a clock: every time comes in a record or as an
// argument. Applying the same records in the same order always yields the
// same state. It is not safe for concurrent use; the directory's sequencer
// owns it.
//
// What is shared by the queues of a directory lives here: the LSN
// sequence, the item IDs (an item keeps its ID when it is redriven into
// another queue), the index of items by ID, the open leases by receipt
// and the heaps the timer reads (lease ends and deadlines). What belongs
// to one queue lives in its QueueState.
type State struct {
	queues map[uint64]*QueueState // by ID; the default queue 0 is always there
	names  map[string]*QueueState // named queues by name (not the default queue)

	items  idIndex           // every stored item (waiting, leased, dead), of every queue
	bytes  int64             // the bodies' bytes of every item in items (the queues' bytes summed)
	extras []*itemExtra      // by entry.xi; extras[0] is never used
	freeX  []uint32          // free places in extras
	leases map[uint64]*lease // open leases by receipt
	// leaseOf holds the same leases by item ID.
	leaseOf map[uint64]*lease

	leaseHeap heap[*lease] // open leases by lease end
	deadlines heap[uint64] // IDs of waiting items that have a deadline, by deadline

	// keyHeap holds the queues that have released keys, by when the first
	// of them ends its window (QueueState.keyDue): pruning visits only the
	// queues with keys to forget, and a queue with a long window holds
	// back no other.
	keyHeap   heap[*QueueState]
	releasedN int // keys released in every queue (QueueState.relKeys), not yet pruned

	// inline holds the bodies that are in no log record (BodyRef.LSN 0):
	// those of a snapshot of an earlier version, which held bodies, until
	// Relocate records copy them into the log. Empty otherwise.
	inline map[uint64][]byte
	// keepBodies makes puts and relocations keep their bodies in inline
	// (KeepBodies).
	keepBodies bool

	// frz is the snapshot being written, nil when none; epoch counts the
	// records applied and the prunings of keys, so that it can tell which
	// keys were there when it started (keyEntry.gone).
	frz   *Freeze
	epoch uint64

	loaded uint64 // the highest ID a snapshot load has stored so far
	// loadFloor is the lowest LSN of a body in the log among the items a
	// snapshot load stored (0: none).
	loadFloor uint64

	deletePasses int // passes over every item a queue's delete took (tests)

	nextID   uint64 // ID of the next item put
	lastLSN  uint64 // LSN of the last record applied (or covered by the snapshot)
	lastTime int64  // newest time seen in any record
}

// lease is an open lease: the item it holds, its receipt (the LSN of the
// lease record) and when it ends. Leases are few (at most the items in
// flight), so they live apart from the entries.
type lease struct {
	id, receipt uint64
	end         int64
	pos         int32 // in the lease heap
}

type deadEntry struct {
	id  uint64
	seq uint64
}

// keyEntry holds an idempotency key. While the item is stored, Released is 0;
// afterwards the key is held for the queue's key window from Released.
type keyEntry struct {
	Key      string
	ID       uint64
	Released int64
	q        *QueueState
	gone     uint64 // State.epoch when it stopped being its queue's entry for Key; 0: it is
}

// New returns an empty state: a directory with only its default queue.
func New() *State {
	s := &State{
		queues:  make(map[uint64]*QueueState),
		names:   make(map[string]*QueueState),
		extras:  make([]*itemExtra, 1),
		leases:  make(map[uint64]*lease),
		leaseOf: make(map[uint64]*lease),
		nextID:  1,
	}
	s.leaseHeap = heap[*lease]{
		less:   leaseLess,
		pos:    func(l *lease) int32 { return l.pos },
		setPos: func(l *lease, i int32) { l.pos = i },
	}
	s.deadlines = heap[uint64]{
		less:   s.deadlineLess,
		pos:    func(id uint64) int32 { return s.xOf(s.items.get(id)).deadlinePos },
		setPos: func(id uint64, i int32) { s.xOf(s.items.get(id)).deadlinePos = i },
	}
	s.keyHeap = heap[*QueueState]{
		less:   func(a, b *QueueState) bool { return a.keyDue() < b.keyDue() },
		pos:    func(q *QueueState) int32 { return q.keyPos },
		setPos: func(q *QueueState, i int32) { q.keyPos = i },
	}
	s.queues[DefaultQueue] = s.newQueueState(DefaultQueue, "", 0, Settings{})
	return s
}

// dueHeap returns an empty heap of item IDs by due time.
func (s *State) dueHeap() heap[uint64] {
	return heap[uint64]{
		less:   s.dueLess,
		pos:    func(id uint64) int32 { return s.items.get(id).heapPos },
		setPos: func(id uint64, i int32) { s.items.get(id).heapPos = i },
	}
}

// dueLess orders by due time, then by the record that made the item waiting,
// then by ID: the items of one put or one redrive share a Seq, and without
// the ID their order would depend on the heap's history (not FIFO, and not the
// same after a snapshot).
func (s *State) dueLess(a, b uint64) bool {
	return entryDueLess(s.items.get(a), a, s.items.get(b), b)
}

// entryDueLess is dueLess of the entries ea of item a and eb of item b.
func entryDueLess(ea *entry, a uint64, eb *entry, b uint64) bool {
	if ea.due != eb.due {
		return ea.due < eb.due
	}
	if ea.seq != eb.seq {
		return ea.seq < eb.seq
	}
	return a < b
}

func leaseLess(a, b *lease) bool {
	if a.end != b.end {
		return a.end < b.end
	}
	return a.receipt < b.receipt
}

func (s *State) deadlineLess(a, b uint64) bool {
	if da, db := s.deadline(s.items.get(a)), s.deadline(s.items.get(b)); da != db {
		return da < db
	}
	return a < b
}

// xOf returns e's extra fields, nil when it has none.
func (s *State) xOf(e *entry) *itemExtra {
	if e.xi == 0 {
		return nil
	}
	return s.extras[e.xi]
}

// ext returns e's extra fields, made when it had none.
func (s *State) ext(e *entry) *itemExtra {
	if e.xi != 0 {
		return s.extras[e.xi]
	}
	x := &itemExtra{deadlinePos: -1}
	if n := len(s.freeX); n > 0 {
		e.xi = s.freeX[n-1]
		s.freeX = s.freeX[:n-1]
		s.extras[e.xi] = x
	} else {
		e.xi = uint32(len(s.extras))
		s.extras = append(s.extras, x)
	}
	return x
}

// dropExt frees e's extra fields. A copy of the item made before keeps
// them: the place is reused, the fields are not.
func (s *State) dropExt(e *entry) {
	if e.xi != 0 {
		s.extras[e.xi] = nil
		s.freeX = append(s.freeX, e.xi)
		e.xi = 0
	}
}

func (s *State) key(e *entry) string {
	if x := s.xOf(e); x != nil {
		return x.key
	}
	return ""
}

func (s *State) deadline(e *entry) int64 {
	if x := s.xOf(e); x != nil {
		return x.deadline
	}
	return 0
}

func (s *State) deadSeq(e *entry) uint64 {
	if x := s.xOf(e); x != nil {
		return x.deadSeq
	}
	return 0
}

// view returns a copy of the item id, whose entry is e.
func (s *State) view(id uint64, e *entry) Item {
	return itemOf(id, e, s.xOf(e), s.leaseOf[id])
}

// itemOf puts together the copy of item id from its entry, its extra
// fields x and, while leased, its lease l (either may be nil).
func itemOf(id uint64, e *entry, x *itemExtra, l *lease) Item {
	it := Item{
		ID: id, Queue: e.queue, Body: e.body, Priority: e.priority,
		EnqueuedAt: e.enqueued, Due: e.due, Seq: e.seq,
		Attempts: e.attempts, Deliveries: e.attempts, Status: e.status, x: x,
	}
	if x != nil {
		it.Deliveries += x.before
	}
	if e.status == Leased && l != nil {
		it.Receipt, it.LeaseEnd = l.receipt, l.end
	}
	return it
}

// viewOf returns a copy of the stored item id, nil when there is none.
func (s *State) viewOf(id uint64) *Item {
	e := s.items.get(id)
	if e == nil {
		return nil
	}
	it := s.view(id, e)
	return &it
}

// LastLSN is the LSN of the last record applied.
func (s *State) LastLSN() uint64 { return s.lastLSN }

// LastTime is the newest time in any record applied; the queue never lets
// its clock run behind it.
func (s *State) LastTime() int64 { return s.lastTime }

// NextID is the ID the next item put will get.
func (s *State) NextID() uint64 { return s.nextID }

// Default is the directory's default queue.
func (s *State) Default() *QueueState { return s.queues[DefaultQueue] }

// Queue returns the queue with ID id, or nil when there is none (never
// created, or deleted).
func (s *State) Queue(id uint64) *QueueState { return s.queues[id] }

// QueueByName returns the named queue called name, or nil; "" is the
// default queue.
func (s *State) QueueByName(name string) *QueueState {
	if name == "" {
		return s.Default()
	}
	return s.names[name]
}

// EachQueue calls f for every queue, in no order, allocating nothing.
func (s *State) EachQueue(f func(*QueueState)) {
	for _, q := range s.queues {
		f(q)
	}
}

// Queues returns every queue, the default queue first, then by ID (the
// order of creation).
func (s *State) Queues() []*QueueState {
	out := make([]*QueueState, 0, len(s.queues))
	for _, q := range s.queues {
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b *QueueState) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return out
}

// The default queue's view, as before there were named queues: Counters,
// Len, Bytes, Gauges, Promote, NextReady, NextDue, KeyHolder and
// DeadLetters are those of the default queue.

// Counters returns the default queue's transition counters.
func (s *State) Counters() Counters { return s.Default().counters }

// Len is the number of items stored in the default queue and Bytes the sum
// of their body sizes.
func (s *State) Len() int     { return s.Default().n }
func (s *State) Bytes() int64 { return s.Default().bytes }

// Release gives back the memory of the state's items now, rather than
// when the collector finds the state unreachable: for a directory being
// closed, whose memory a reopen in the same process would otherwise hold
// twice for a while. Afterwards the state knows its queues, counters and
// counts, but no item: nothing may be applied to it.
func (s *State) Release() {
	s.items.release()
	s.extras, s.freeX = make([]*itemExtra, 1), nil
	s.leases, s.leaseOf = map[uint64]*lease{}, map[uint64]*lease{}
	s.leaseHeap.items, s.deadlines.items = nil, nil
	for _, q := range s.queues {
		q.releasedDelayed = q.delayedLen()
		q.released = true
		q.delayed.items, q.unordered, q.holes = nil, false, 0
		q.ready, q.levels = map[int64]*heap[uint64]{}, nil
		q.deadOrder = nil
	}
}

// MappedBytes is how many bytes of the state's item entries are in memory
// mapped outside the Go heap (where the system has it): heap figures leave
// them out. Its cost is a look at each chunk of 4096 IDs.
func (s *State) MappedBytes() int64 { return s.items.mappedBytes() }

// TotalLen and TotalBytes count every queue's items, in O(1) of the
// queues: the byte total is kept as items come and go.
func (s *State) TotalLen() int     { return s.items.len() }
func (s *State) TotalBytes() int64 { return s.bytes }

// KeysReleased is how many keys of items that are gone are still held
// (within their window): a snapshot holds them beside the items.
func (s *State) KeysReleased() int { return s.releasedN }

// Gauges returns the default queue's gauges.
func (s *State) Gauges() Gauges { return s.Default().Gauges() }

// Promote promotes the default queue's due items (see QueueState.Promote).
func (s *State) Promote(now int64) { s.Default().Promote(now) }

// NextReady is the default queue's next ready item.
func (s *State) NextReady() *Item { return s.Default().NextReady() }

// NextDue is the default queue's earliest delayed due time.
func (s *State) NextDue() (int64, bool) { return s.Default().NextDue() }

// KeyHolder is the default queue's KeyHolder.
func (s *State) KeyHolder(key string, now, window int64) (uint64, bool) {
	return s.Default().KeyHolder(key, now, window)
}

// DeadLetters is the default queue's DeadLetters.
func (s *State) DeadLetters(limit int) []Item { return s.Default().DeadLetters(limit) }

// Item returns a copy of the stored item with id, in any queue, or nil.
func (s *State) Item(id uint64) *Item { return s.viewOf(id) }

// Leased returns a copy of the item whose open lease is receipt, or nil.
func (s *State) Leased(receipt uint64) *Item {
	if l := s.leases[receipt]; l != nil {
		return s.viewOf(l.id)
	}
	return nil
}

// NextLeaseEnd is the earliest end of an open lease, in any queue.
func (s *State) NextLeaseEnd() (int64, bool) {
	if l, ok := s.leaseHeap.Min(); ok {
		return l.end, true
	}
	return 0, false
}

// NextDeadline is the earliest deadline of a waiting item, in any queue.
func (s *State) NextDeadline() (int64, bool) {
	if id, ok := s.deadlines.Min(); ok {
		return s.deadline(s.items.get(id)), true
	}
	return 0, false
}

// ExpiredLeases returns up to max open leases whose end is at or before now,
// sorted by lease end (not necessarily the earliest max of them: callers
// loop until none is left).
func (s *State) ExpiredLeases(now int64, max int) []*Item {
	var ls []*lease
	walkHeap(&s.leaseHeap, func(l *lease) bool { return l.end <= now }, max, &ls)
	out := make([]*Item, len(ls))
	for i, l := range ls {
		out[i] = s.viewOf(l.id)
	}
	return out
}

// PassedDeadlines returns up to max waiting items whose deadline is at or
// before now (callers loop until none is left).
func (s *State) PassedDeadlines(now int64, max int) []*Item {
	var ids []uint64
	walkHeap(&s.deadlines, func(id uint64) bool { return s.deadline(s.items.get(id)) <= now }, max, &ids)
	out := make([]*Item, len(ids))
	for i, id := range ids {
		out[i] = s.viewOf(id)
	}
	return out
}

// walkHeap collects heap elements for which match holds, visiting only the
// part of the heap where it can hold (match must be monotone in the heap
// order).
func walkHeap[T any](h *heap[T], match func(T) bool, max int, out *[]T) {
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

// OpenLeases returns every open lease of every queue, by receipt.
func (s *State) OpenLeases() []*Item {
	// From the lease heap's slice (contiguous, unlike the map), sorted
	// without reflection, into views allocated at once: recovery calls
	// this with every lease a crash left open.
	ls := slices.Clone(s.leaseHeap.items)
	slices.SortFunc(ls, func(a, b *lease) int { return cmp.Compare(a.receipt, b.receipt) })
	views := make([]Item, len(ls))
	out := make([]*Item, len(ls))
	for i, l := range ls {
		views[i] = s.view(l.id, s.items.get(l.id))
		out[i] = &views[i]
	}
	return out
}

// PruneKeys forgets keys released at least window ago, in every queue,
// which from then on prunes with window (see PruneKeysBy). It changes no
// observable behaviour (KeyHolder applies the window itself); it only
// frees memory. Its cost is that of the keys it forgets, and a pass over
// the queues that have released keys.
func (s *State) PruneKeys(now, window int64) {
	for _, q := range slices.Clone(s.keyHeap.items) {
		q.SetKeyWindow(window)
	}
	s.PruneKeysBy(now, func(uint64) int64 { return window })
}

// PruneKeysBy is PruneKeys with a window per queue. It visits only the
// queues whose first released key's window has ended by now, as far as
// they were known (SetKeyWindow, or the window this asked for last), and
// each learns its window here: its keys are forgotten once that window
// ends, whatever the windows of other queues.
func (s *State) PruneKeysBy(now int64, window func(queue uint64) int64) {
	s.epoch++
	for {
		q, ok := s.keyHeap.Min()
		if !ok || q.keyDue() > now {
			return
		}
		if q.SetKeyWindow(window(q.id)); q.keyPos < 0 {
			continue // its released keys were all stale
		}
		q.forgetEnded(now, q.keyWindow)
	}
}

// NextKeyExpiry returns the earliest time at which a released key's window
// ends, and its queue, by the windows known (see PruneKeysBy): PruneKeys
// forgets it then.
func (s *State) NextKeyExpiry() (at int64, queue uint64, ok bool) {
	q, ok := s.keyHeap.Min()
	if !ok {
		return 0, 0, false
	}
	return q.keyDue(), q.id, true
}

// Gauges is a point-in-time view of a queue.
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

// Apply applies the record with the given LSN to the default queue (for a
// record of the directory, such as a queue's creation, the queue is 0 too).
// It checks the whole record before it changes anything: on error the
// state is as before.
func (s *State) Apply(lsn uint64, rec Record) error { return s.ApplyTo(lsn, DefaultQueue, rec) }

// ApplyTo applies the record with the given LSN, which the log holds for
// queue (the queue field of its header), before its place on disk is
// known: the bodies it stores are placed later by PlaceBody.
func (s *State) ApplyTo(lsn, queue uint64, rec Record) error { return s.ApplyAt(lsn, queue, rec, 0) }

// ApplyAt is ApplyTo for a record whose body starts at byte at of its
// segment file (0: not known yet), as replay knows it: the bodies it
// stores are placed at once.
func (s *State) ApplyAt(lsn, queue uint64, rec Record, at int64) error {
	if lsn != s.lastLSN+1 {
		return fmt.Errorf("%w: lsn %d after %d", ErrInvalid, lsn, s.lastLSN)
	}
	s.epoch++
	var err error
	if c, ok := rec.(*CreateQueue); ok {
		if queue != DefaultQueue {
			err = invalid("queue creation in the log of queue %d", queue)
		} else {
			err = s.applyCreate(lsn, c)
		}
	} else if r, ok := rec.(*Relocate); ok {
		if queue != DefaultQueue {
			err = invalid("relocate record in the log of queue %d", queue)
		} else {
			err = s.applyRelocate(lsn, r, at)
		}
	} else if q := s.queues[queue]; q == nil {
		err = invalid("%s record for queue %d, which does not exist", TypeName(rec.Type()), queue)
	} else {
		switch r := rec.(type) {
		case *Put:
			err = s.applyPut(lsn, q, r, at)
		case *Lease:
			err = s.applyLease(lsn, q, r)
		case *Extend:
			err = s.applyExtend(q, r)
		case *Ack:
			err = s.applyAck(q, r)
		case *End:
			err = s.applyEnd(lsn, q, r)
		case *Discard:
			err = s.applyDiscard(q, r)
		case *Redrive:
			err = s.applyRedrive(lsn, q, r)
		case *Purge:
			err = s.applyPurge(q, r)
		case *Delete:
			err = s.applyDeleteItems(q, r)
		case *SetQueue:
			err = s.applySet(q, r)
		case *PauseQueue:
			err = s.applyPause(q, r)
		case *DeleteQueue:
			err = s.applyDelete(q, r)
		case *Move:
			err = s.applyMove(lsn, q, r)
		default:
			err = fmt.Errorf("%w: unknown record %T", ErrInvalid, rec)
		}
	}
	s.items.maintain()
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

// item returns the entry of the stored item id if it belongs to q, for a
// record that may change it (see entry).
func (s *State) item(q *QueueState, id uint64) *entry {
	if e := s.entry(id); e != nil && e.queue == q.id {
		return e
	}
	return nil
}

// entry returns the entry of the stored item id (nil when none) for a
// record that may change it: a snapshot being written copies the item's
// chunk first. Reads that change nothing use s.items.get.
func (s *State) entry(id uint64) *entry {
	if s.frz != nil {
		s.frz.touch(id)
	}
	return s.items.get(id)
}

func (s *State) applyPut(lsn uint64, q *QueueState, r *Put, at int64) error {
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
			if k := q.keys[n.Key]; k != nil && k.Released == 0 {
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
		id := s.nextID
		s.nextID++
		e := s.store(q, id, entry{
			queue:    q.id,
			body:     bodyRef(lsn, at, n.BodyOffset, n.Body),
			priority: n.Priority,
			enqueued: r.Time,
			due:      n.Due,
			seq:      lsn,
			status:   Waiting,
			heapPos:  -1,
		})
		if n.Key != "" || n.Deadline != 0 {
			x := s.ext(e)
			x.key, x.deadline = n.Key, n.Deadline
		}
		if s.keepBodies && len(n.Body) > 0 {
			e.body.LSN, e.body.Off = 0, 0
			s.inline[id] = slices.Clone(n.Body)
		}
		s.pushWaiting(q, id, e)
		if n.Key != "" {
			if k := q.keys[n.Key]; k != nil {
				q.replaceKey(k)
			}
			q.keys[n.Key] = &keyEntry{Key: n.Key, ID: id, q: q}
		}
		q.counters.Put++
	}
	return nil
}

// bodyRef is the BodyRef of a body encoded at offset off of the record
// lsn, whose own body starts at byte at of its segment (0: not known).
// An empty body is stored nowhere: its reference is the zero BodyRef.
func bodyRef(lsn uint64, at int64, off int, body []byte) BodyRef {
	if len(body) == 0 {
		return BodyRef{}
	}
	r := BodyRef{LSN: lsn, Len: uint32(len(body)), Sum: BodySum(body)}
	if at > 0 {
		r.Off = at + int64(off)
	}
	return r
}

// store indexes the new item id of q and returns its entry.
func (s *State) store(q *QueueState, id uint64, e entry) *entry {
	q.n++
	q.bytes += int64(e.body.Len)
	s.bytes += int64(e.body.Len)
	return s.items.set(id, e)
}

// PlaceBody records that the body of item id, stored by record lsn, lies
// at byte off of its segment: the live queue learns where a record went
// only once its frame is written. It does nothing for an item that is gone
// or whose body has moved on since (it reports false then).
func (s *State) PlaceBody(id, lsn uint64, off int64) bool {
	if s.frz != nil {
		s.frz.place(id, lsn, off)
	}
	e := s.items.get(id)
	if e == nil || e.body.Len == 0 || e.body.LSN != lsn || e.body.Off != 0 {
		return false
	}
	e.body.Off = off
	return true
}

// KeepBodies makes the state keep the bodies of the records it applies
// from now on itself, as it keeps those of an old snapshot, instead of
// where they are in the log: for a log of format 1, whose positions are
// not those of bodies, read to carry a directory forward.
func (s *State) KeepBodies() {
	s.keepBodies = true
	if s.inline == nil {
		s.inline = make(map[uint64][]byte)
	}
}

// Inline returns the body of item id if the state holds it itself (it came
// from a snapshot of an earlier version and no Relocate has copied it into
// the log yet).
func (s *State) Inline(id uint64) ([]byte, bool) {
	b, ok := s.inline[id]
	return b, ok
}

// InlineIDs returns the IDs of the items whose bodies the state holds
// itself, in ID order.
func (s *State) InlineIDs() []uint64 {
	ids := make([]uint64, 0, len(s.inline))
	for id := range s.inline {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *State) applyRelocate(lsn uint64, r *Relocate, at int64) error {
	if len(r.Items) == 0 {
		return invalid("relocate of no bodies")
	}
	seen := make(map[uint64]bool, len(r.Items))
	for i := range r.Items {
		n := &r.Items[i]
		e := s.entry(n.ID)
		switch {
		case e == nil:
			return invalid("relocate of item %d, not stored", n.ID)
		case seen[n.ID]:
			return invalid("relocate of item %d twice in one record", n.ID)
		case uint64(len(n.Body)) != uint64(e.body.Len):
			return invalid("relocate of item %d: %d bytes, its body has %d", n.ID, len(n.Body), e.body.Len)
		case BodySum(n.Body) != e.body.Sum:
			return invalid("relocate of item %d: the body is not the item's own (crc mismatch)", n.ID)
		}
		seen[n.ID] = true
	}
	for i := range r.Items {
		n := &r.Items[i]
		e := s.entry(n.ID)
		e.body = bodyRef(lsn, at, n.BodyOffset, n.Body)
		delete(s.inline, n.ID)
		if s.keepBodies && len(n.Body) > 0 {
			e.body.LSN, e.body.Off = 0, 0
			s.inline[n.ID] = slices.Clone(n.Body)
		}
	}
	return nil
}

func (s *State) applyLease(lsn uint64, q *QueueState, r *Lease) error {
	e := s.item(q, r.ID)
	switch {
	case e == nil:
		return invalid("lease of item %d, not stored in queue %d", r.ID, q.id)
	case e.status != Waiting:
		return invalid("lease of item %d that is %s", r.ID, e.status)
	case e.due > r.Time:
		return invalid("lease of item %d at %d before it is due at %d", r.ID, r.Time, e.due)
	case s.deadline(e) != 0 && r.Time >= s.deadline(e):
		return invalid("lease of item %d at %d at or after its deadline %d", r.ID, r.Time, s.deadline(e))
	case r.LeaseEnd <= r.Time:
		return invalid("lease of item %d ends at %d, not after %d", r.ID, r.LeaseEnd, r.Time)
	case q.Paused(r.Time):
		return invalid("lease of item %d at %d in queue %d, paused until %d", r.ID, r.Time, q.id, q.pausedUntil)
	case q.settings.MaxInFlight > 0 && int64(q.leased) >= q.settings.MaxInFlight:
		return invalid("lease of item %d in queue %d, which has %d leases open of at most %d", r.ID, q.id, q.leased, q.settings.MaxInFlight)
	}
	q.removeWaiting(r.ID, e)
	e.status = Leased
	e.attempts++
	e.due = r.Time // while leased: when the lease began (the attempt's start)
	s.openLeaseOf(r.ID, lsn, r.LeaseEnd)
	q.leased++
	q.counters.Delivered++
	return nil
}

// openLeaseOf records the open lease receipt of item id.
func (s *State) openLeaseOf(id, receipt uint64, end int64) {
	l := &lease{id: id, receipt: receipt, end: end}
	s.leases[receipt] = l
	s.leaseOf[id] = l
	s.leaseHeap.Push(l)
}

// openLease finds the lease of queue q named by receipt that is still
// running at t.
func (s *State) openLease(q *QueueState, receipt uint64, t int64, what string) (*lease, *entry, error) {
	l := s.leases[receipt]
	var e *entry
	if l != nil {
		e = s.entry(l.id)
	}
	if e == nil || e.queue != q.id {
		return nil, nil, invalid("%s of receipt %d that is not an open lease of queue %d", what, receipt, q.id)
	}
	if t >= l.end {
		return nil, nil, invalid("%s of receipt %d at %d after its lease ended at %d", what, receipt, t, l.end)
	}
	return l, e, nil
}

func (s *State) applyExtend(q *QueueState, r *Extend) error {
	l, _, err := s.openLease(q, r.Receipt, r.Time, "extend")
	if err != nil {
		return err
	}
	if r.LeaseEnd <= r.Time {
		return invalid("extend of receipt %d to %d, not after %d", r.Receipt, r.LeaseEnd, r.Time)
	}
	l.end = r.LeaseEnd
	s.leaseHeap.Fix(l)
	return nil
}

func (s *State) applyAck(q *QueueState, r *Ack) error {
	l, e, err := s.openLease(q, r.Receipt, r.Time, "ack")
	if err != nil {
		return err
	}
	s.endLease(q, l)
	s.remove(q, l.id, e, r.Time)
	q.counters.Acked++
	return nil
}

func (s *State) applyEnd(lsn uint64, q *QueueState, r *End) error {
	var l *lease
	var e *entry
	var err error
	switch r.Kind {
	case TypeExpire:
		// Recovery expires leases whose end lies in the future: the process
		// that held them is gone.
		if l = s.leases[r.Receipt]; l != nil {
			e = s.entry(l.id)
		}
		if e == nil || e.queue != q.id {
			return invalid("expire of receipt %d that is not an open lease of queue %d", r.Receipt, q.id)
		}
	case TypeNack, TypeDeadLetter:
		if l, e, err = s.openLease(q, r.Receipt, r.Time, TypeName(r.Kind)); err != nil {
			return err
		}
	default:
		return invalid("end of kind %d", r.Kind)
	}
	if r.Kind == TypeDeadLetter && !r.Dead {
		return invalid("deadletter of receipt %d that does not dead-letter", r.Receipt)
	}
	id := l.id
	s.endLease(q, l)
	switch r.Kind {
	case TypeNack:
		q.counters.Nacked++
	case TypeExpire:
		q.counters.Expired++
	}
	x := s.ext(e)
	x.endedAt = r.Time
	if r.Cause != "" {
		x.lastError = r.Cause
	}
	x.addAttempt(Attempt{Start: e.due, End: r.Time, How: r.Kind, Error: CutError(r.Cause)})
	switch {
	case r.Dead:
		e.status = Dead
		x.deadSeq = lsn
		q.deadOrder = append(q.deadOrder, deadEntry{id, lsn})
		q.ndead++
		q.counters.DeadLettered++
	case x.deadline != 0 && r.Due >= x.deadline:
		s.remove(q, id, e, r.Time)
		q.counters.Discarded++
	default:
		e.status = Waiting
		e.due = r.Due
		e.seq = lsn
		s.pushWaiting(q, id, e)
	}
	return nil
}

func (s *State) applyDiscard(q *QueueState, r *Discard) error {
	if len(r.IDs) == 0 {
		return invalid("discard of no items")
	}
	for _, id := range r.IDs {
		e := s.item(q, id)
		if e == nil || e.status != Waiting || s.deadline(e) == 0 || s.deadline(e) > r.Time {
			return invalid("discard of item %d that is not waiting past its deadline at %d in queue %d", id, r.Time, q.id)
		}
	}
	if err := noRepeats(r.IDs); err != nil {
		return err
	}
	for _, id := range r.IDs {
		e := s.entry(id)
		q.removeWaiting(id, e)
		s.remove(q, id, e, r.Time)
		q.counters.Discarded++
	}
	return nil
}

func (s *State) applyRedrive(lsn uint64, q *QueueState, r *Redrive) error {
	if err := s.checkDead(q, r.IDs, "redrive"); err != nil {
		return err
	}
	for _, id := range r.IDs {
		e := s.entry(id)
		q.leaveDead(id, e)
		s.requeue(q, id, e, r.Time, lsn)
		q.counters.Redriven++
	}
	return nil
}

// requeue makes a dead letter of q waiting again, ready at t with its
// attempts reset.
func (s *State) requeue(q *QueueState, id uint64, e *entry, t int64, lsn uint64) {
	if e.attempts != 0 {
		s.ext(e).before += e.attempts
	}
	e.status = Waiting
	e.attempts = 0
	e.due = t
	e.seq = lsn
	s.pushWaiting(q, id, e)
}

func (s *State) applyPurge(q *QueueState, r *Purge) error {
	ids := r.IDs
	if r.All {
		if len(ids) != 0 {
			return invalid("purge of all with ids named")
		}
		for _, d := range q.deadOrder {
			if s.isDead(d) {
				ids = append(ids, d.id)
			}
		}
	} else if err := s.checkDead(q, ids, "purge"); err != nil {
		return err
	}
	for _, id := range ids {
		e := s.entry(id)
		q.leaveDead(id, e)
		s.remove(q, id, e, r.Time)
		q.counters.Purged++
	}
	return nil
}

func (s *State) applyDeleteItems(q *QueueState, r *Delete) error {
	if len(r.IDs) == 0 {
		return invalid("delete of no items")
	}
	for _, id := range r.IDs {
		if s.item(q, id) == nil {
			return invalid("delete of item %d that is not stored in queue %d", id, q.id)
		}
	}
	if err := noRepeats(r.IDs); err != nil {
		return err
	}
	for _, id := range r.IDs {
		e := s.entry(id)
		switch e.status {
		case Waiting:
			q.removeWaiting(id, e)
		case Leased:
			s.endLease(q, s.leaseOf[id])
		case Dead:
			q.leaveDead(id, e)
		}
		s.remove(q, id, e, r.Time)
		q.counters.Purged++
	}
	return nil
}

// isDead reports whether d is a live entry of a dead-letter order: its
// item is still that dead letter (not redriven, purged or dead again
// since).
func (s *State) isDead(d deadEntry) bool {
	e := s.items.get(d.id)
	return e != nil && e.status == Dead && s.deadSeq(e) == d.seq
}

func (s *State) checkDead(q *QueueState, ids []uint64, what string) error {
	if len(ids) == 0 {
		return invalid("%s of no items", what)
	}
	for _, id := range ids {
		if e := s.item(q, id); e == nil || e.status != Dead {
			return invalid("%s of item %d that is not a dead letter of queue %d", what, id, q.id)
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

func (s *State) pushWaiting(q *QueueState, id uint64, e *entry) {
	q.pushDelayed(id, e.due)
	if s.deadline(e) != 0 {
		s.deadlines.Push(id)
	}
}

func (s *State) endLease(q *QueueState, l *lease) {
	delete(s.leases, l.receipt)
	delete(s.leaseOf, l.id)
	s.leaseHeap.Remove(l)
	q.leased--
}

// remove forgets an item of q that was acked, discarded or purged; its key
// is held for the key window from t. e is not valid after.
func (s *State) remove(q *QueueState, id uint64, e *entry, t int64) {
	if e.body.LSN == 0 && e.body.Len > 0 {
		delete(s.inline, id)
	}
	q.n--
	q.bytes -= int64(e.body.Len)
	s.bytes -= int64(e.body.Len)
	if key := s.key(e); key != "" {
		if k := q.keys[key]; k != nil && k.ID == id {
			// Released 0 means "still stored" (also on disk), so a release
			// at time 0 is recorded 1 ns later.
			k.Released = t
			if t == 0 {
				k.Released = 1
			}
			s.releaseKey(q, k)
		}
	}
	s.dropExt(e)
	s.items.del(id)
}

// EachFrom calls fn for a copy of every stored item with an ID at or above
// start, in ID order, until fn returns false; fn must not modify the
// state. Callers that hold a lock can walk a large state in pieces.
func (s *State) EachFrom(start uint64, fn func(*Item) bool) {
	s.items.eachFrom(start, func(id uint64, e *entry) bool {
		it := s.view(id, e)
		return fn(&it)
	})
}

// EachBody calls fn with the body reference of every stored item with an
// ID at or above start, in ID order, until fn returns false; fn must not
// modify the state. It copies no item: it is how compaction and recovery
// walk millions of bodies. InLog tells the references of bodies in the
// log from those of empty bodies and of bodies the state holds itself.
func (s *State) EachBody(start uint64, fn func(id uint64, body BodyRef) bool) {
	s.items.eachFrom(start, func(id uint64, e *entry) bool { return fn(id, e.body) })
}

// BodyFloor returns the lowest LSN of a record that holds the body of a
// stored item (0 when no stored body is in the log): the segments wholly
// before it hold no live body. Its cost is one pass over the items.
func (s *State) BodyFloor() uint64 {
	var floor uint64
	s.EachBody(0, func(_ uint64, b BodyRef) bool {
		if b.InLog() && (floor == 0 || b.LSN < floor) {
			floor = b.LSN
		}
		return true
	})
	return floor
}

// SnapshotBodyFloor returns the lowest LSN of a record that held the body
// of an item the snapshot this state was loaded from stored (0 when none
// was in the log). No body the state names since lies below it, or below
// the snapshot's LSN: records applied after the load only add bodies of
// later records or take bodies away. It costs nothing, where BodyFloor
// passes over the items.
func (s *State) SnapshotBodyFloor() uint64 { return s.loadFloor }

// Each calls fn for a copy of every stored item of every queue in ID
// order; fn must not modify the state. Each call gets its own copy.
func (s *State) Each(fn func(*Item)) {
	s.items.each(func(id uint64, e *entry) {
		it := s.view(id, e)
		fn(&it)
	})
}
