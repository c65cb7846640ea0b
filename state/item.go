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
type Item struct {
	ID         uint64
	Queue      uint64 // the queue it is stored in
	Body       []byte // never modified after the put
	Key        string
	Priority   int64
	EnqueuedAt int64  // time of the put
	Due        int64  // Waiting: when it becomes ready; ready order within a priority
	Deadline   int64  // 0: none
	Seq        uint64 // LSN of the record that made it Waiting; FIFO tie-breaker
	Attempts   int32  // leases since the put or the last redrive
	Deliveries int32  // leases ever
	Status     Status
	Receipt    uint64 // Leased: LSN of the lease record
	LeaseEnd   int64  // Leased
	LastError  string
	EndedAt    int64 // time of the last lease ending (Dead: when it died)
	// History holds the item's last attempts, oldest first, at most
	// HistoryLen of them (see Attempt).
	History []Attempt

	// heapPos is the position in whichever of the waiting, ready or lease
	// heaps holds the item (an item is in exactly one of them, or in none
	// when dead); deadlinePos in the deadline heap (waiting items with a
	// deadline only). -1 when absent.
	heapPos     int32
	deadlinePos int32
	deadSeq     uint64 // position in the dead-letter order while Dead
	ready       bool   // waiting and in a ready heap (not in delayed)
}

// Clone returns a copy that shares the (immutable) body and has its own
// history.
func (it *Item) Clone() Item {
	c := *it
	c.heapPos, c.deadlinePos = -1, -1
	c.History = slices.Clone(it.History)
	return c
}

// HistoryLen is how many attempts an item remembers, and MaxAttemptError
// how many bytes of each attempt's error text: an item's history costs at
// most HistoryLen*(40+MaxAttemptError) bytes of memory, 5.4 KiB, beside
// the 24 bytes of its slice header in every Item. The history survives a
// redrive (whose attempt count starts again) and a move to another queue.
const (
	HistoryLen      = 10
	MaxAttemptError = 512
)

// Attempt is one lease of an item: when it started and ended, and how it
// ended (0 while it runs; TypeNack, TypeExpire or TypeDeadLetter). An
// attempt that ends in an ack leaves no history: the item is gone.
type Attempt struct {
	Start int64
	End   int64
	How   byte
	Error string // the cause, cut to MaxAttemptError bytes
}

func (it *Item) addAttempt(a Attempt) {
	h := it.History
	switch {
	case len(h) >= HistoryLen:
		copy(h, h[1:])
		h = h[:HistoryLen-1]
	case len(h) == cap(h):
		// Grow by doubling, but never past HistoryLen: append would
		// round 8 up to 16.
		g := make([]Attempt, len(h), min(max(2*cap(h), 1), HistoryLen))
		copy(g, h)
		h = g
	}
	it.History = append(h, a)
}

func (it *Item) endAttempt(t int64, how byte, cause string) {
	if len(it.History) == 0 {
		return
	}
	a := &it.History[len(it.History)-1]
	a.End, a.How, a.Error = t, how, CutError(cause)
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
