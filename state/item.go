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

// Item is one stored item. Callers outside the package get copies (see
// Clone); the state owns the originals.
//
// What every item needs is in it; what only some items have (a key, a
// deadline, a failed attempt, a place in the dead letters) is behind x,
// nil for an item put without key or deadline that has not failed: such
// an item takes 112 bytes, against 176 when every field lived here, and
// its body is not in memory at all (BodyRef).
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

	// heapPos is the position in whichever of the waiting, ready or lease
	// heaps holds the item (an item is in exactly one of them, or in none
	// when dead). -1 when absent.
	heapPos int32
	Status  Status
	ready   bool // waiting and in a ready heap (not in delayed)
}

// itemExtra holds what only some items have.
type itemExtra struct {
	key       string
	deadline  int64 // 0: none
	lastError string
	endedAt   int64  // time of the last lease ending (Dead: when it died)
	deadSeq   uint64 // position in the dead-letter order while Dead
	// history holds the item's last attempts that did not end in an ack,
	// oldest first, at most HistoryLen of them; nil when there was none.
	history []Attempt
	// deadlinePos is the position in the deadline heap (waiting items
	// with a deadline only), -1 when absent.
	deadlinePos int32
}

// ext returns the item's extra fields, made when it had none.
func (it *Item) ext() *itemExtra {
	if it.x == nil {
		it.x = &itemExtra{deadlinePos: -1}
	}
	return it.x
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

func (it *Item) setDeadSeq(v uint64) {
	if v != 0 || it.x != nil {
		it.ext().deadSeq = v
	}
}

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

// Clone returns a copy that shares the (immutable) body and has its own
// history.
func (it *Item) Clone() Item {
	c := *it
	c.heapPos = -1
	if it.x != nil {
		x := *it.x
		x.deadlinePos = -1
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
func (it *Item) addAttempt(a Attempt) {
	x := it.ext()
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
