package state

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

	// heapPos is the position in whichever of the waiting, ready or lease
	// heaps holds the item (an item is in exactly one of them, or in none
	// when dead); deadlinePos in the deadline heap (waiting items with a
	// deadline only). -1 when absent.
	heapPos     int32
	deadlinePos int32
	deadSeq     uint64 // position in the dead-letter order while Dead
	ready       bool   // waiting and in a ready heap (not in delayed)
}

// Clone returns a copy that shares the (immutable) body.
func (it *Item) Clone() Item {
	c := *it
	c.heapPos, c.deadlinePos = -1, -1
	return c
}
