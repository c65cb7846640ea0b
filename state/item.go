package state

import (
	"slices"
	"unicode/utf8"
)

// Status is where a stored item stands. Acked and discarded items are not
// stored: they leave the state and only the counters remember them.
type Status uint8

const (
	// Waiting items are delayed (Due in the future) or ready (Due passed).
	Waiting Status = iota + 1
	Leased
	Dead
)

func (s Status) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Leased:
		return "leased"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Item is a copy of one stored item, as the state's accessors return it.
// The state itself keeps a smaller, pointer-free entry per item (see
// entry): the fields here that only some items have (a key, a deadline, a
// failed attempt) or that only leased items have (receipt, lease end) are
// kept apart from it, so that an item put without key or deadline costs
// 80 bytes of entry and 8 of heap, and its body is not in memory at all
// (BodyRef).
type Item struct {
	ID         uint64
	Queue      uint64  // the ID of the queue it is stored in
	Body       BodyRef // where the body is stored; the body itself is not in memory
	Priority   int64
	EnqueuedAt int64 // time of the put
	// Due is, while Waiting, when it becomes ready (and its order in the
	// ready heap of its priority); while Leased, when its lease began.
	Due      int64
	Seq      uint64 // LSN of the record that made it Waiting; FIFO tie-breaker
	Receipt  uint64 // Leased: LSN of the lease record
	LeaseEnd int64  // Leased
	x        *itemExtra

	Attempts   int32 // leases since the put or the last redrive
	Deliveries int32 // leases ever
	Status     Status
}

// entry is what the state keeps of every item: 80 bytes with no pointer,
// stored by value in chunks of the ID index, so that the garbage collector
// never scans them. Its ID is where it is stored; its extra fields, when
// it has any, are s.extras[xi]; its lease, while leased, is in s.leases.
type entry struct {
	queue    uint64
	body     BodyRef
	priority int64
	enqueued int64
	due      int64
	seq      uint64
	xi       uint32 // index of its itemExtra in State.extras; 0: none
	attempts int32
	// heapPos is the position in whichever of the delayed or ready heaps
	// holds the item, -1 when in neither (leased or dead).
	heapPos int32
	status  Status // 0: no item (a free place in a chunk)
	ready   bool   // waiting and in a ready heap (not in delayed)
}

// itemExtra holds what only some items have.
type itemExtra struct {
	key       string
	deadline  int64 // 0: none
	lastError string
	endedAt   int64  // time of the last lease ending (Dead: when it died)
	deadSeq   uint64 // position in the dead-letter order while Dead
	// before is how many leases the item had before its last redrive:
	// its deliveries are attempts + before.
	before int32
	// deadlinePos is the position in the deadline heap (waiting items
	// with a deadline only), -1 when absent.
	deadlinePos int32
	// history holds the item's last attempts that did not end in an ack,
	// oldest first, at most HistoryLen of them; nil when there was none.
	history []Attempt
}

// empty reports whether x holds nothing, so that its item can do without.
func (x *itemExtra) empty() bool {
	return x.key == "" && x.deadline == 0 && x.lastError == "" && x.endedAt == 0 &&
		x.deadSeq == 0 && x.before == 0 && x.history == nil && x.deadlinePos < 0
}

// Key is the item's idempotency key ("" for none).
func (it *Item) Key() string {
	if it.x == nil {
		return ""
	}
	return it.x.key
}

// Deadline is the time at or after which no delivery starts (0: none).
func (it *Item) Deadline() int64 {
	if it.x == nil {
		return 0
	}
	return it.x.deadline
}

// LastError is the cause the last failed attempt ended with.
func (it *Item) LastError() string {
	if it.x == nil {
		return ""
	}
	return it.x.lastError
}

// EndedAt is the time its last lease ended (Dead: when it died); 0 when
// none did.
func (it *Item) EndedAt() int64 {
	if it.x == nil {
		return 0
	}
	return it.x.endedAt
}

func (it *Item) deadSeq() uint64 {
	if it.x == nil {
		return 0
	}
	return it.x.deadSeq
}

// DeadPlace is a dead letter's place in its queue's list (see
// QueueState.DeadLettersAfter); meaningless unless it is Dead.
func (it *Item) DeadPlace() DeadPlace { return DeadPlace{it.deadSeq(), it.ID} }

// BodyRef says where an item's body is stored: Len bytes at byte Off of
// the segment file that holds the log record LSN (a put or a relocate),
// whose CRC-32C is Sum. A body is read with one positioned read and
// verified by Sum, so a body damaged on disk is never delivered.
//
// Off is 0 while the record's frame is not yet written: the live queue
// keeps the body in memory until the log says where it went (PlaceBody).
// LSN is 0 for a body that is not in the log at all: one loaded from a
// snapshot of an earlier version, which held bodies. State.Inline holds
// those until a Relocate record copies them into the log.
type BodyRef struct {
	LSN uint64
	Off int64
	Len uint32
	Sum uint32
}

// InLog reports whether the body is in a record of the log: not empty,
// and not one the state holds itself (see BodyRef).
func (r BodyRef) InLog() bool { return r.Len > 0 && r.LSN != 0 }

// Placed reports whether the body's place on disk is known.
func (r BodyRef) Placed() bool { return r.Len == 0 || (r.LSN != 0 && r.Off != 0) }

// History returns the item's last attempts that did not end in an ack
// (nack, expiry, dead letter), oldest first: at most HistoryLen. The
// caller must not modify it.
func (it *Item) History() []Attempt {
	if it.x == nil {
		return nil
	}
	return it.x.history
}

// Clone returns a copy with its own history.
func (it *Item) Clone() Item {
	c := *it
	if it.x != nil {
		x := *it.x
		x.history = slices.Clone(it.x.history)
		c.x = &x
	}
	return c
}

// HistoryLen is how many attempts an item remembers, and MaxAttemptError
// how many bytes of each attempt's error text: an item's history costs at
// most 32+HistoryLen*(40+MaxAttemptError) bytes of memory, 5.4 KiB, and
// nothing for an item whose attempts all ended in an ack (the common case:
// it is gone). The history survives a redrive (whose attempt count starts
// again) and a move to another queue.
const (
	HistoryLen      = 10
	MaxAttemptError = 512
)

// Attempt is one lease of an item that ended without an ack: when it
// started and ended, and how it ended (TypeNack, TypeExpire or
// TypeDeadLetter). An attempt that ends in an ack leaves no history: the
// item is gone.
type Attempt struct {
	Start int64
	End   int64
	How   byte
	Error string // the cause, cut to MaxAttemptError bytes
}

// addAttempt records an attempt that ended.
func (x *itemExtra) addAttempt(a Attempt) {
	if x.history == nil {
		x.history = make([]Attempt, 0, 1)
	}
	h := x.history
	switch {
	case len(h) >= HistoryLen:
		copy(h, h[1:])
		h = h[:HistoryLen-1]
	case len(h) == cap(h):
		// Grow by doubling, but never past HistoryLen: append would
		// round 8 up to 16.
		g := make([]Attempt, len(h), min(2*cap(h), HistoryLen))
		copy(g, h)
		h = g
	}
	x.history = append(h, a)
}

// CutError cuts an error text to at most MaxAttemptError bytes, on a UTF-8
// boundary.
func CutError(s string) string {
	if len(s) <= MaxAttemptError {
		return s
	}
	n := MaxAttemptError
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
