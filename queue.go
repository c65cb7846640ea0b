package walq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Receipt names one delivery of an item: the LSN of its lease record. It is
// never reused, so a receipt from an earlier delivery can never end a later
// one.
type Receipt uint64

// Message is one delivery of an item.
type Message struct {
	ID         uint64
	Receipt    Receipt
	Body       []byte // the caller's own copy
	Attempt    int    // 1 on the first delivery since the put or the last redrive
	Deliveries int    // every delivery ever, this one included
	Priority   int
	Key        string
	EnqueuedAt time.Time
	LeaseEnd   time.Time
}

// Queue is a durable work queue in one directory. It is safe for concurrent
// use.
type Queue struct {
	dir   string
	opts  Options
	clock Clock
	log   *wal.Log
	lock  *os.File // holds the flock on the directory

	// mu is the sequencer: a call is checked against st, its record gets
	// the next LSN and joins the log's pending batch, and st applies it,
	// all under mu, so LSN order is the order of application. Callers wait
	// for durability after releasing mu.
	mu       sync.Mutex
	st       *state.State
	encBuf   []byte        // record encoding scratch; under mu
	closed   bool          // under mu
	broken   error         // the state refused a record the log took; under mu
	waiters  waiterList    // blocked Gets, oldest first; under mu
	timerAt  int64         // when the timer loop will wake next (MaxInt64: not armed); under mu
	logBytes int64         // bytes in the log segments, approximately; under mu
	skew     int64         // added to the clock so queue time never goes back; under mu
	kick     chan struct{} // wakes the timer loop to look again
	done     chan struct{} // closed by Close

	compactSignal chan struct{}
	compactMu     sync.Mutex    // one compaction at a time
	snapLSN       atomic.Uint64 // LSN covered by the newest snapshot; written under compactMu
	compactAfter  int64         // no automatic compaction below this log size; under mu

	lateAcks atomic.Uint64
	work     workStats // Work's counters (worker.go)
	metrics  metrics
	recovery RecoveryStats
	wg       sync.WaitGroup
}

// waiterList is the FIFO of Gets waiting for an item. A waiter's channel
// has room for one signal; a waiter that was signalled but gives up passes
// the signal on, so no ready item is left with a waiter asleep.
type waiterList struct {
	list []*waiter
}

type waiter struct {
	ch chan struct{}
}

func (l *waiterList) add() *waiter {
	w := &waiter{ch: make(chan struct{}, 1)}
	l.list = append(l.list, w)
	return w
}

func (l *waiterList) remove(w *waiter) {
	for i, x := range l.list {
		if x == w {
			l.list = append(l.list[:i], l.list[i+1:]...)
			return
		}
	}
}

// wake signals up to n waiters, oldest first, and removes them.
func (l *waiterList) wake(n int) {
	for n > 0 && len(l.list) > 0 {
		w := l.list[0]
		l.list[0] = nil
		l.list = l.list[1:]
		w.ch <- struct{}{}
		n--
	}
}

func (l *waiterList) len() int { return len(l.list) }

// usableLocked returns why the queue takes no calls, or nil.
func (q *Queue) usableLocked() error {
	if q.closed {
		return ErrClosed
	}
	if q.broken != nil {
		return q.broken
	}
	if err := q.log.Err(); err != nil {
		return err
	}
	return nil
}

// nowLocked is the queue's time: the clock plus skew, never behind the
// newest time in the log. When the clock is found behind that time (it was
// stepped back, perhaps across a restart), skew grows by the difference, so
// queue time goes on from the log's time at the clock's pace: delays, leases
// and key windows last as long as they should instead of waiting for the
// clock to catch up.
func (q *Queue) nowLocked() int64 {
	now := q.clock.Now().UnixNano() + q.skew
	if last := q.st.LastTime(); now < last {
		q.skew += last - now
		return last
	}
	return now
}

// appendLocked gives rec the next LSN, adds it to the log's pending batch
// and applies it to the state. The caller waits on the commit after
// releasing mu.
func (q *Queue) appendLocked(rec state.Record) (uint64, *wal.Commit, error) {
	var err error
	q.encBuf, err = state.Encode(q.encBuf[:0], rec)
	if err != nil {
		return 0, nil, err
	}
	lsn, commit := q.log.Append(rec.Type(), q.encBuf)
	if err := q.st.Apply(lsn, rec); err != nil {
		// The log holds a record the state refused. Nothing may be built on
		// that: fail like a failed write, and recover from disk on reopen.
		q.broken = fmt.Errorf("%w: record %d (%s) refused by the state: %v", ErrFailed, lsn, state.TypeName(rec.Type()), err)
		q.opts.Logger.Error("walq: queue failed", "err", q.broken)
		return 0, nil, q.broken
	}
	// Any record can bring the next lease end, deadline or due time closer
	// (a new lease, a put with a deadline or delay, an Extend that shortens
	// a lease, a Nack or Redrive that puts an item back to waiting): this is
	// the one place that tells the timer loop, so it never sleeps past it.
	q.kickLocked(q.nextWakeLocked())
	q.logBytes += int64(len(q.encBuf) + wal.HeaderSize + 3)
	if !q.opts.DisableAutoCompact && q.logBytes >= q.opts.CompactMinBytes && q.logBytes >= q.compactAfter &&
		float64(q.logBytes) > q.opts.CompactRatio*float64(q.liveBytesLocked()) {
		select {
		case q.compactSignal <- struct{}{}:
		default:
		}
	}
	return lsn, commit, nil
}

// liveBytesLocked estimates what a snapshot of the state would take.
func (q *Queue) liveBytesLocked() int64 {
	return q.st.Bytes() + int64(q.st.Len())*64
}

// kickLocked wakes the timer loop when something now needs it earlier than
// it planned to wake.
func (q *Queue) kickLocked(at int64) {
	if at < q.timerAt {
		q.timerAt = at
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

// Put stores an item and returns its ID once its record is durable under
// the sync policy. With WithKey, a key that is held returns the ID of the
// item holding it and ErrDuplicate.
func (q *Queue) Put(ctx context.Context, body []byte, opts ...PutOption) (uint64, error) {
	it := Item{Body: body}
	for _, o := range opts {
		o(&it)
	}
	ids, err := q.PutBatch(ctx, []Item{it})
	if be, ok := err.(*BatchError); ok {
		return ids[0], be.Errors[0]
	}
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// Limits on what one call may put, whatever the options: a key is held in
// memory and in every record that names it, and a batch is one record,
// built and written in one piece.
const (
	MaxKeySize    = 1 << 10
	MaxBatchBytes = 64 << 20
)

// PutBatch stores items in one log record: after a crash either all of the
// items it stored are there or none. ids[i] is the ID of items[i], or for an
// item whose key is held, the ID of the item holding it; those items are
// reported in a *BatchError and the others are stored. Bad input (a body too
// large, a negative delay, a deadline not after the due time) or a batch
// that does not fit the limits stores nothing.
func (q *Queue) PutBatch(ctx context.Context, items []Item) ([]uint64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	total := 0
	for i := range items {
		it := &items[i]
		if len(it.Body) > q.opts.MaxBodySize {
			return nil, fmt.Errorf("%w: item %d: %d bytes, Options.MaxBodySize is %d", ErrTooLarge, i, len(it.Body), q.opts.MaxBodySize)
		}
		if it.Delay < 0 || it.Delay > MaxDuration {
			return nil, fmt.Errorf("%w: item %d: delay %v is negative or over MaxDuration", ErrInvalid, i, it.Delay)
		}
		if len(it.Key) > MaxKeySize {
			return nil, fmt.Errorf("%w: item %d: key of %d bytes, at most %d", ErrInvalid, i, len(it.Key), MaxKeySize)
		}
		total += len(it.Body)
	}
	if total > MaxBatchBytes {
		return nil, fmt.Errorf("%w: batch of %d bytes of bodies, at most %d in one record", ErrTooLarge, total, MaxBatchBytes)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// One copy of all the bodies: the caller may reuse its buffers.
	store := make([]byte, 0, total)
	recItems := make([]state.NewItem, 0, len(items))
	for i := range items {
		store = append(store, items[i].Body...)
		recItems = append(recItems, state.NewItem{
			Body:     store[len(store)-len(items[i].Body) : len(store) : len(store)],
			Priority: int64(items[i].Priority),
			Key:      items[i].Key,
		})
	}

	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	now := q.nowLocked()
	ids := make([]uint64, len(items))
	var errs []error
	accepted := recItems[:0]
	var inBatch map[string]int // key -> index of the accepted item with it (only for batches with keys)
	var sameAs map[int]int     // item index -> index of the earlier item of the batch with its key
	var bytes int64
	for i := range items {
		it := &items[i]
		n := recItems[i]
		n.Due = now + int64(it.Delay)
		if !it.Deadline.IsZero() {
			n.Deadline = it.Deadline.UnixNano()
			if n.Deadline <= n.Due {
				q.mu.Unlock()
				return nil, fmt.Errorf("%w: item %d: deadline %v is not after its due time %v", ErrInvalidDeadline, i,
					it.Deadline.UTC().Format(time.RFC3339Nano), time.Unix(0, n.Due).UTC().Format(time.RFC3339Nano))
			}
		}
		if n.Key != "" {
			if id, held := q.st.KeyHolder(n.Key, now, int64(q.opts.KeyWindow)); held {
				ids[i] = id
				errs = setErr(errs, len(items), i, fmt.Errorf("%w: key %q is held by item %d", ErrDuplicate, n.Key, id))
				continue
			}
			if first, dup := inBatch[n.Key]; dup {
				if sameAs == nil {
					sameAs = make(map[int]int)
				}
				sameAs[i] = first
				continue
			}
			if inBatch == nil {
				inBatch = make(map[string]int)
			}
			inBatch[n.Key] = i
		}
		accepted = append(accepted, n)
		bytes += int64(len(n.Body))
	}
	if q.opts.MaxItems > 0 && q.st.Len()+len(accepted) > q.opts.MaxItems {
		n := q.st.Len()
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %d items stored, %d more would pass Options.MaxItems %d", ErrFull, n, len(accepted), q.opts.MaxItems)
	}
	if q.opts.MaxBytes > 0 && q.st.Bytes()+bytes > q.opts.MaxBytes {
		n := q.st.Bytes()
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %d bytes stored, %d more would pass Options.MaxBytes %d", ErrFull, n, bytes, q.opts.MaxBytes)
	}
	var commit *wal.Commit
	if len(accepted) > 0 {
		first := q.st.NextID()
		var err error
		if _, commit, err = q.appendLocked(&state.Put{Time: now, Items: accepted}); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		next := first
		ready := 0
		for i := range items {
			if _, dup := sameAs[i]; dup || (errs != nil && errs[i] != nil) {
				continue
			}
			ids[i] = next
			next++
			if items[i].Delay == 0 {
				ready++
			}
		}
		q.waiters.wake(ready)
	}
	// A repeated key inside the batch gets the ID of its first item.
	for i, first := range sameAs {
		ids[i] = ids[first]
		errs = setErr(errs, len(items), i, fmt.Errorf("%w: key %q is held by item %d of the same batch", ErrDuplicate, items[i].Key, ids[first]))
	}
	q.mu.Unlock()
	if commit != nil {
		if err := waitDurable(commit); err != nil {
			return nil, err
		}
	}
	if errs != nil {
		return ids, &BatchError{Errors: errs}
	}
	return ids, nil
}

func setErr(errs []error, n, i int, err error) []error {
	if errs == nil {
		errs = make([]error, n)
	}
	errs[i] = err
	return errs
}

// Get leases the next ready item, blocking until there is one or ctx ends
// (a ctx that has already ended returns its error without leasing).
// Under SyncAlways the lease is durable before Get returns, so a crash
// while handling the item counts the attempt.
func (q *Queue) Get(ctx context.Context) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err // an ended context takes nothing, ready or not
	}
	for {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return Message{}, err
		}
		m, commit, err := q.leaseLocked()
		if err != nil {
			q.mu.Unlock()
			return Message{}, err
		}
		if commit != nil {
			q.mu.Unlock()
			if err := waitDurable(commit); err != nil {
				return Message{}, err
			}
			return m, nil
		}
		w := q.waiters.add()
		q.kickLocked(q.nextWakeLocked()) // a waiter makes the next due time count
		q.mu.Unlock()
		select {
		case <-w.ch:
		case <-ctx.Done():
			q.mu.Lock()
			q.waiters.remove(w)
			select {
			case <-w.ch:
				q.waiters.wake(1) // signalled as we gave up: pass it on
			default:
			}
			q.mu.Unlock()
			return Message{}, ctx.Err()
		case <-q.done:
			return Message{}, ErrClosed
		}
	}
}

// TryGet leases the next ready item if there is one; it never blocks for
// an item (it does wait for the lease to be durable).
func (q *Queue) TryGet() (Message, bool, error) {
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return Message{}, false, err
	}
	m, commit, err := q.leaseLocked()
	q.mu.Unlock()
	if err != nil || commit == nil {
		return Message{}, false, err
	}
	if err := waitDurable(commit); err != nil {
		return Message{}, false, err
	}
	return m, true, nil
}

// leaseLocked leases the next ready item; a nil commit means none is ready.
func (q *Queue) leaseLocked() (Message, *wal.Commit, error) {
	now := q.nowLocked()
	if err := q.discardPassedLocked(now); err != nil {
		return Message{}, nil, err
	}
	q.st.Promote(now)
	it := q.st.NextReady()
	if it == nil {
		return Message{}, nil, nil
	}
	rec := &state.Lease{Time: now, ID: it.ID, LeaseEnd: now + int64(q.opts.Visibility)}
	lsn, commit, err := q.appendLocked(rec)
	if err != nil {
		return Message{}, nil, err
	}
	return Message{
		ID:         it.ID,
		Receipt:    Receipt(lsn),
		Body:       append([]byte(nil), it.Body...),
		Attempt:    int(it.Attempts),
		Deliveries: int(it.Deliveries),
		Priority:   int(it.Priority),
		Key:        it.Key,
		EnqueuedAt: time.Unix(0, it.EnqueuedAt),
		LeaseEnd:   time.Unix(0, it.LeaseEnd),
	}, commit, nil
}

// discardPassedLocked discards waiting items whose deadline has come.
func (q *Queue) discardPassedLocked(now int64) error {
	for {
		passed := q.st.PassedDeadlines(now, 1024)
		if len(passed) == 0 {
			return nil
		}
		ids := make([]uint64, len(passed))
		for i, it := range passed {
			ids[i] = it.ID
			q.opts.Logger.Info("walq: item discarded at its deadline", "id", it.ID,
				"deadline", time.Unix(0, it.Deadline).UTC())
		}
		if _, _, err := q.appendLocked(&state.Discard{Time: now, IDs: ids}); err != nil {
			return err
		}
	}
}

// openLeaseLocked finds the lease that receipt names if it is still
// running at now; otherwise it counts a late ack.
func (q *Queue) openLeaseLocked(r Receipt, now int64, call string) (*state.Item, error) {
	it := q.st.Leased(uint64(r))
	if it == nil || now >= it.LeaseEnd {
		q.lateAcks.Add(1)
		q.opts.Logger.Info("walq: call with a lost lease", "call", call, "receipt", uint64(r))
		return nil, fmt.Errorf("%w: %s with receipt %d", ErrLeaseLost, call, uint64(r))
	}
	return it, nil
}

// Extend moves the end of a running lease to d from now (a heartbeat).
func (q *Queue) Extend(r Receipt, d time.Duration) error {
	if d <= 0 || d > MaxDuration {
		return fmt.Errorf("%w: extend by %v: must be positive and at most MaxDuration", ErrInvalid, d)
	}
	q.mu.Lock()
	commit, err := q.extendLocked(r, d)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return waitDurable(commit)
}

func (q *Queue) extendLocked(r Receipt, d time.Duration) (*wal.Commit, error) {
	if err := q.usableLocked(); err != nil {
		return nil, err
	}
	now := q.nowLocked()
	if _, err := q.openLeaseLocked(r, now, "extend"); err != nil {
		return nil, err
	}
	_, commit, err := q.appendLocked(&state.Extend{Time: now, Receipt: uint64(r), LeaseEnd: now + int64(d)})
	return commit, err
}

// Ack ends a lease in success: the item is gone for good. It returns
// ErrLeaseLost when the lease already ended.
func (q *Queue) Ack(r Receipt) error {
	q.mu.Lock()
	commit, err := q.ackLocked(r)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return waitDurable(commit)
}

func (q *Queue) ackLocked(r Receipt) (*wal.Commit, error) {
	if err := q.usableLocked(); err != nil {
		return nil, err
	}
	now := q.nowLocked()
	if _, err := q.openLeaseLocked(r, now, "ack"); err != nil {
		return nil, err
	}
	_, commit, err := q.appendLocked(&state.Ack{Time: now, Receipt: uint64(r)})
	return commit, err
}

// Nack ends a lease in failure: the item comes back after Options.Backoff,
// or goes to the dead letters when it is out of attempts. cause is kept as
// the item's last error.
func (q *Queue) Nack(r Receipt, cause error) error {
	return q.end(r, state.TypeNack, causeText(cause, "nack"))
}

// DeadLetter ends a lease in permanent failure: the item goes straight to
// the dead letters with cause as its last error.
func (q *Queue) DeadLetter(r Receipt, cause error) error {
	return q.end(r, state.TypeDeadLetter, causeText(cause, "dead-lettered"))
}

const maxCause = 8 << 10

func causeText(err error, none string) string {
	if err == nil {
		return none
	}
	s := err.Error()
	if len(s) > maxCause {
		s = s[:maxCause] + "…"
	}
	return s
}

func (q *Queue) end(r Receipt, kind byte, cause string) error {
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	now := q.nowLocked()
	it, err := q.openLeaseLocked(r, now, state.TypeName(kind))
	if err != nil {
		q.mu.Unlock()
		return err
	}
	_, commit, err := q.appendLocked(q.endRecordLocked(kind, it, now, cause))
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return waitDurable(commit)
}

// endRecordLocked decides how a lease ends that did not end in an ack:
// dead-lettered when asked or out of attempts, otherwise back after the
// backoff (the state discards it if that is at or after its deadline).
// The record carries the decision and the jittered due time, so replay
// repeats it without options or randomness. Call it before appending; the
// caller appends the result.
func (q *Queue) endRecordLocked(kind byte, it *state.Item, now int64, cause string) *state.End {
	rec := &state.End{Kind: kind, Time: now, Receipt: it.Receipt, Cause: cause, Due: now}
	rec.Dead = kind == state.TypeDeadLetter || int(it.Attempts) >= q.opts.MaxAttempts
	if !rec.Dead {
		if d := q.opts.Backoff(int(it.Attempts)); d > 0 {
			rec.Due = now + int64(min(d, MaxDuration))
		}
		switch {
		case it.Deadline != 0 && rec.Due >= it.Deadline:
			q.opts.Logger.Info("walq: item discarded: its next attempt would fall after its deadline",
				"id", it.ID, "deadline", time.Unix(0, it.Deadline).UTC())
		case rec.Due <= now:
			defer q.waiters.wake(1)
		}
	} else {
		q.opts.Logger.Info("walq: item dead-lettered", "id", it.ID, "attempts", it.Attempts, "cause", cause)
	}
	if kind == state.TypeExpire {
		q.opts.Logger.Debug("walq: lease expired", "id", it.ID, "receipt", it.Receipt)
	}
	return rec
}

// DeadLetter is an item in the dead-letter list.
type DeadLetter struct {
	ID         uint64
	Body       []byte
	Key        string
	Attempts   int // in the run that ended in the dead-letter list
	Deliveries int
	LastError  string
	DeadAt     time.Time
	EnqueuedAt time.Time
}

// DeadLetters returns up to limit dead letters, oldest first (limit <= 0:
// all of them).
func (q *Queue) DeadLetters(limit int) []DeadLetter {
	q.mu.Lock()
	items := q.st.DeadLetters(limit)
	q.mu.Unlock()
	out := make([]DeadLetter, len(items))
	for i, it := range items {
		out[i] = DeadLetter{
			ID:         it.ID,
			Body:       append([]byte(nil), it.Body...),
			Key:        it.Key,
			Attempts:   int(it.Attempts),
			Deliveries: int(it.Deliveries),
			LastError:  it.LastError,
			DeadAt:     time.Unix(0, it.EndedAt),
			EnqueuedAt: time.Unix(0, it.EnqueuedAt),
		}
	}
	return out
}

// Redrive puts dead letters back as ready items with their attempts reset
// (their delivery counts are kept). Every ID must be a dead letter, or
// nothing is changed and the error is ErrNotFound.
func (q *Queue) Redrive(ids ...uint64) error {
	if len(ids) == 0 {
		return nil
	}
	q.mu.Lock()
	if err := q.checkDeadLocked(ids); err != nil {
		q.mu.Unlock()
		return err
	}
	_, commit, err := q.appendLocked(&state.Redrive{Time: q.nowLocked(), IDs: append([]uint64(nil), ids...)})
	if err == nil {
		q.waiters.wake(len(ids))
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return waitDurable(commit)
}

// PurgeDeadLetters drops the named dead letters for good; with no IDs, all
// of them. Every ID must be a dead letter, or nothing is changed and the
// error is ErrNotFound.
func (q *Queue) PurgeDeadLetters(ids ...uint64) error {
	q.mu.Lock()
	rec := &state.Purge{IDs: append([]uint64(nil), ids...), All: len(ids) == 0}
	if rec.All {
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return err
		}
		if q.st.Gauges().Dead == 0 {
			q.mu.Unlock()
			return nil
		}
	} else if err := q.checkDeadLocked(ids); err != nil {
		q.mu.Unlock()
		return err
	}
	rec.Time = q.nowLocked()
	_, commit, err := q.appendLocked(rec)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return waitDurable(commit)
}

func (q *Queue) checkDeadLocked(ids []uint64) error {
	if err := q.usableLocked(); err != nil {
		return err
	}
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if it := q.st.Item(id); it == nil || it.Status != state.Dead {
			return fmt.Errorf("%w: item %d", ErrNotFound, id)
		}
		if seen[id] {
			return fmt.Errorf("%w: item %d named twice", ErrInvalid, id)
		}
		seen[id] = true
	}
	return nil
}

// timerLoop ends expired leases, discards items at their deadline and wakes
// blocked Gets when delayed items come due. It sleeps on one timer set to
// the earliest of those times; it never polls.
func (q *Queue) timerLoop() {
	defer q.wg.Done()
	timer := q.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		at := q.nextWakeLocked()
		q.timerAt = at
		skew := q.skew
		q.mu.Unlock()
		timer.Stop()
		select {
		case <-timer.C():
		default:
		}
		if at != math.MaxInt64 {
			q.armTimer(timer, at-skew)
		}
		select {
		case <-timer.C():
			q.tick()
		case <-q.kick:
		case <-q.done:
			return
		}
	}
}

// armTimer sets timer to fire when the clock reaches at. A Timer counts its
// duration from the clock's reading when it is armed, so the duration is
// measured right before arming, and measured again if the clock jumped by a
// millisecond or more meanwhile: a ManualClock advanced by a test between
// the reading and the arming would otherwise leave the timer late by the
// jump. A real clock moves by microseconds, so it arms once.
func (q *Queue) armTimer(timer Timer, at int64) {
	for {
		read := q.clock.Now().UnixNano()
		timer.Reset(time.Duration(at - read))
		if q.clock.Now().UnixNano()-read < int64(time.Millisecond) {
			return
		}
	}
}

func (q *Queue) nextWakeLocked() int64 {
	at := int64(math.MaxInt64)
	if t, ok := q.st.NextLeaseEnd(); ok {
		at = min(at, t)
	}
	if t, ok := q.st.NextDeadline(); ok {
		at = min(at, t)
	}
	if q.waiters.len() > 0 {
		if t, ok := q.st.NextDue(); ok {
			at = min(at, t)
		}
	}
	return at
}

// tick does what has come due.
func (q *Queue) tick() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.usableLocked() != nil {
		return
	}
	now := q.nowLocked()
	for {
		expired := q.st.ExpiredLeases(now, 1024)
		if len(expired) == 0 {
			break
		}
		for _, it := range expired {
			if _, _, err := q.appendLocked(q.endRecordLocked(state.TypeExpire, it, now, "lease expired")); err != nil {
				return
			}
		}
	}
	if q.discardPassedLocked(now) != nil {
		return
	}
	if n := q.waiters.len(); n > 0 {
		q.st.Promote(now)
		q.waiters.wake(min(n, q.st.Gauges().Ready))
	}
}

// Close stops the queue: blocked Gets return ErrClosed, background work
// stops, the log is synced and closed and the directory lock released.
// Calls after Close return ErrClosed.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.closed = true
	close(q.done)
	q.mu.Unlock()
	q.wg.Wait()
	q.compactMu.Lock() // let a Compact call in flight finish
	err := q.log.Close()
	q.compactMu.Unlock()
	if uerr := unlockDir(q.lock); err == nil {
		err = uerr
	}
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return err
}
