package walq

import (
	"context"
	"errors"
	"time"
)

// Engine is what Work runs on: a queue that leases one item at a time to a
// worker, for a visibility timeout that the worker can extend, and ends
// the lease by ack, nack or dead-letter. *Queue is an Engine; so can be a
// queue of another system (package walqtest holds the behaviours an Engine
// must show, and checks them).
//
// An Engine's receipts fence: a call with the receipt of a lease that has
// ended (expired, acked, nacked, dead-lettered, or its item redriven)
// changes nothing and returns an error wrapping ErrLeaseLost, even when the
// same item has been leased again since. Work relies on that to drop the
// result of a handler that lost its lease.
type Engine interface {
	// Get blocks until an item is ready or ctx ends, and leases it for
	// Visibility. Message.Attempt counts the leases of the item since it
	// was put or redriven, this one included. Message.LeaseEnd is the
	// lease's end on Clock's wall time; the zero time if the engine cannot
	// tell, and Work then counts the lease from the moment it called Get.
	Get(ctx context.Context) (Message, error)
	// Extend moves the end of r's lease to d from now.
	Extend(r Receipt, d time.Duration) error
	// Ack ends r's lease and removes its item: done.
	Ack(r Receipt) error
	// Nack ends r's lease with cause: the item comes back after the
	// engine's backoff, or goes to the dead-letter list with cause when it
	// has had its attempts.
	Nack(r Receipt, cause error) error
	// DeadLetter ends r's lease and moves its item to the dead-letter list
	// with cause, whatever its attempts.
	DeadLetter(r Receipt, cause error) error
	// Visibility is how long a lease lasts from Get, and what Work extends
	// a running handler's lease by.
	Visibility() time.Duration
	// Clock is the clock the engine's leases run on; Work's timers run on
	// it too.
	Clock() Clock
}

// Visibility is how long a lease lasts: Options.Visibility.
func (q *Queue) Visibility() time.Duration {
	return time.Duration(q.rt.vis.Load())
}

// Clock is the queue's clock: Options.Clock.
func (q *Queue) Clock() Clock { return q.clock }

// fastEngine is what walq's own Queue offers Work beyond Engine: an ack and
// the next lease in one pass of the sequencer and one fsync wait, a
// heartbeat that does not wait for its fsync, and signals that end
// running handlers at once when the queue stops serving.
type fastEngine interface {
	Engine
	ackAndLease(r Receipt) (next Message, ok bool, ackErr, err error)
	heartbeat(r Receipt, d time.Duration) error
	// stopped returns channels closed when the engine failed and when it
	// was closed; failure says why it failed.
	stopped() (failed, closed, deleted <-chan struct{})
	failure() error
}

func (q *Queue) stopped() (failed, closed, deleted <-chan struct{}) {
	return q.failed, q.done, q.rt.deleted
}

var _ fastEngine = (*Queue)(nil)

// NewReceipt makes a receipt for an Engine other than walq's Queue, from
// the three numbers every receipt holds: issuer names the engine instance
// that leased (a random value made when it starts, so that receipts of
// two instances never meet), queue a queue of that engine, and lease one
// delivery, never 0 and never reused by the issuer. Fields gives them back.
// A walq Queue refuses a receipt it did not issue, with ErrInvalid.
func NewReceipt(issuer [16]byte, queue, lease uint64) Receipt {
	return Receipt{dir: issuer, queue: queue, lease: lease}
}

// Fields returns the numbers a receipt holds: for a receipt a walq Queue
// issued, the identity of its directory, the queue number and the LSN of
// the lease record.
func (r Receipt) Fields() (issuer [16]byte, queue, lease uint64) {
	return r.dir, r.queue, r.lease
}

// ackAndLease acks r and leases the next ready item, if any, in one pass of
// the sequencer, and waits once, for the last of the two records: the log
// is written in order, so the lease's durability implies the ack's. ackErr
// is the ack's own failure (ErrLeaseLost for a late ack, ErrInvalid for a
// receipt of another queue, leasing nothing); err is a failure of the
// queue, after which neither outcome is known.
func (q *Queue) ackAndLease(r Receipt) (next Message, ok bool, ackErr, err error) {
	if ackErr := q.checkReceipt(r, "ack"); ackErr != nil {
		return Message{}, false, ackErr, nil // not this queue's: nothing acked, nothing leased
	}
	q.mu.Lock()
	commit, ackErr := q.ackLocked(r)
	if ackErr != nil && !errors.Is(ackErr, ErrLeaseLost) {
		return Message{}, false, nil, q.answerLocked(ackErr) // a delete, say, not durable yet
	}
	next, src, leaseCommit, err := q.leaseLocked()
	if err == nil && commit == nil && leaseCommit == nil {
		// A lost lease and nothing to lease: both read from the state,
		// whose records may not be durable yet.
		commit = q.log.Barrier()
	}
	q.mu.Unlock()
	if err != nil {
		return Message{}, false, nil, err
	}
	if leaseCommit != nil {
		commit = leaseCommit
		// A bad body sends its item to the dead letters: no next message.
		if ok, err = q.deliverBody(&next, src); err != nil {
			return Message{}, false, nil, err
		}
	}
	if commit != nil {
		if err := q.wait(commit); err != nil {
			return Message{}, false, nil, err
		}
	}
	if !ok {
		next = Message{}
	}
	return next, ok, ackErr, nil
}

// heartbeat is Extend without the wait for durability. Recovery ends every
// lease open at a crash, whatever its end, so an extension's durability
// buys nothing; the in-memory lease is what keeps the timer loop from
// taking the item back. A heartbeat that waited for its fsync would stall
// with the disk: an fsync slower than the visibility would let leases run
// out under live handlers. The record still goes into the log, before any
// ack or nack that relies on it, so replay agrees.
func (q *Queue) heartbeat(r Receipt, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, err := q.extendLocked(r, d)
	return err
}
