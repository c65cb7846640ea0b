package walq

import (
	"errors"
	"fmt"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// The sequencer is q.mu: a call is checked against the state, its record
// gets the next LSN and joins the log's pending batch, and the state applies
// it, all under q.mu, so LSN order is the order of application. Callers wait
// for durability after releasing q.mu.

// usableLocked returns why the queue takes no calls, or nil.
func (q *Queue) usableLocked() error {
	if q.closed {
		return ErrClosed
	}
	if err := q.failure(); err != nil {
		return err
	}
	select {
	case <-q.log.Failed(): // closed once the log's failure is set: no lock to take on every call
		return q.fail(q.log.Err())
	default:
	}
	return nil
}

// fail puts the queue in its failed state for good and returns the error
// every call returns from now on. The first failure wins. Closing q.failed
// wakes every blocked Get and Work and stops the background loops; only a
// new Open brings the queue back, from what is on disk.
func (q *Queue) fail(err error) error {
	q.failOnce.Do(func() {
		if !errors.Is(err, ErrFailed) {
			err = fmt.Errorf("%w: %w", ErrFailed, err)
		}
		q.failErr = err
		close(q.failed)
		// The log must write nothing more: a record the state refused, or
		// one appended after a failed write, must never reach the disk.
		q.log.Fail(err)
		q.opts.Logger.Error("walq: queue failed; close it and open it again to recover from disk", "dir", q.dir, "err", err)
		// Idle WorkQueues pools learn of it from TryGet. fail may be
		// called with mu held: the signals go out from a goroutine of
		// their own.
		go func() {
			q.mu.Lock()
			q.signalAllWatchersLocked()
			q.mu.Unlock()
		}()
	})
	return q.failErr
}

// failure returns the error the queue failed with, or nil.
func (q *Queue) failure() error {
	select {
	case <-q.failed:
		return q.failErr
	default:
		return nil
	}
}

// wait waits until the record behind c is durable under the sync policy,
// and fails the queue if its batch failed (a failed write or fsync: nothing
// after it can be trusted).
func (q *Queue) wait(c *wal.Commit) error {
	err := waitDurable(c)
	if err != nil && errors.Is(err, ErrFailed) {
		return q.fail(err)
	}
	return err
}

// answerLocked gives an answer that a call appending nothing read from the
// state (a key held, no pause to end, no dead letter, an item not there):
// it releases mu and waits until every record appended so far is durable
// under the sync policy, as a write would, so that no answer rests on a
// record a crash can still take back. It returns err, or the failure of
// the records it waited for. It never waits while holding mu, and costs a
// lock and a load when everything is durable already.
func (q *Queue) answerLocked(err error) error {
	c := q.log.Barrier()
	q.mu.Unlock()
	if werr := q.wait(c); werr != nil {
		return werr
	}
	return err
}

// appendToLocked gives rec, a record of the given queue, the next LSN,
// adds it to the log's pending batch and applies it to the state. The
// caller waits on the commit after releasing mu.
func (q *Queue) appendToLocked(queue uint64, rec state.Record) (uint64, *wal.Commit, error) {
	var err error
	q.encBuf, err = state.Encode(q.encBuf[:0], rec)
	if err != nil {
		return 0, nil, err
	}
	buf := q.encBuf
	lsn, commit := q.log.AppendQueue(queue, rec.Type(), func(dst []byte) []byte { return append(dst, buf...) })
	if lsn == 0 {
		return 0, nil, q.fail(commit.Wait())
	}
	if err := q.st.ApplyTo(lsn, queue, rec); err != nil {
		// The log holds a record the state refused. Nothing may be built on
		// that: fail like a failed write, and recover from disk on reopen.
		return 0, nil, q.fail(fmt.Errorf("record %d (%s) refused by the state: %v", lsn, state.TypeName(rec.Type()), err))
	}
	// Any record can bring the next lease end, deadline or due time closer
	// (a new lease, a put with a deadline or delay, an Extend that shortens
	// a lease, a Nack or Redrive that puts an item back to waiting): this is
	// the one place that tells the timer loop, so it never sleeps past it.
	// And any record can make items of its queue leasable (a move, those of
	// its target): this is the one place that wakes their consumers.
	// What the record made due now (a put, a nack without backoff, a
	// redrive) is ready now: the timer is not woken for it.
	// At the record's own time, not the clock's now: a caller that read
	// its time before appending (a Get that discards items past their
	// deadline, then leases) must not find ready an item due after it.
	now := rec.At()
	q.promoteLocked(queue, now)
	q.kickLocked(q.changedWakeLocked(queue))
	q.wakeLocked(q.rts[queue], now)
	if m, ok := rec.(*state.Move); ok {
		q.promoteLocked(m.Target, now)
		q.kickLocked(q.changedWakeLocked(m.Target))
		q.wakeLocked(q.rts[m.Target], now)
	}
	q.logBytes += int64(len(q.encBuf) + wal.HeaderSize + 3)
	q.disk.appended += int64(len(q.encBuf) + wal.HeaderSize + 3)
	if q.compactDueLocked() {
		select {
		case q.compactSignal <- struct{}{}:
		default:
		}
	}
	return lsn, commit, nil
}

// appendEndLocked ends the lease of it, an item of rt's queue, in a
// failure of the given kind (see endRecordLocked).
func (q *Queue) appendEndLocked(rt *queueRT, kind byte, it *state.Item, now int64, cause string) (uint64, *wal.Commit, error) {
	return q.appendToLocked(rt.id, q.endRecordLocked(rt, kind, it, now, cause))
}

// liveBytesLocked estimates what a snapshot of the state would take.
func (q *Queue) liveBytesLocked() int64 {
	return q.st.TotalBytes() + int64(q.st.TotalLen())*64
}

// checkRoom refuses, with ErrFull, n more items of the given bytes in the
// queue qs when they would pass its MaxItems or MaxBytes.
func (rt *queueRT) checkRoom(qs *state.QueueState, n int, bytes int64) error {
	if rt.set.maxItems > 0 && qs.Len()+n > rt.set.maxItems {
		return fmt.Errorf("%w: %s: %d items stored, %d more would pass its MaxItems %d", ErrFull, rt.label(), qs.Len(), n, rt.set.maxItems)
	}
	if rt.set.maxBytes > 0 && qs.Bytes()+bytes > rt.set.maxBytes {
		return fmt.Errorf("%w: %s: %d bytes stored, %d more would pass its MaxBytes %d", ErrFull, rt.label(), qs.Bytes(), bytes, rt.set.maxBytes)
	}
	return nil
}
