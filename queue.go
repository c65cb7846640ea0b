package walq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Message is one delivery of an item.
type Message struct {
	ID         uint64
	Queue      string // the queue's name ("" for the default queue)
	Receipt    Receipt
	Body       []byte // the caller's own copy
	Attempt    int    // 1 on the first delivery since the put or the last redrive
	Deliveries int    // every delivery ever, this one included
	Priority   int
	Key        string
	EnqueuedAt time.Time // wall-clock time, translated from queue time (see qtime.go)
	LeaseEnd   time.Time // wall-clock time, translated from queue time

	// leaseEndMono is LeaseEnd on the monotonic scale of the queue's
	// clock, exact (0 when the engine is not a walq Queue): Work dates
	// its heartbeats from it, where a wall-clock reading can be stepped.
	leaseEndMono time.Duration
	// leaseVis is the visibility the lease was granted for (0 when the
	// engine is not a walq Queue): Work plans the first heartbeat from it,
	// whatever the settings say by the time the handler starts.
	leaseVis time.Duration
}

// Queue is a handle on one queue of a queue directory: the directory's
// default queue (what Open returns) or a named queue (OpenQueue). Every
// handle of a directory shares its log, its sequencer, its group commit,
// its timer and its compaction. It is safe for concurrent use.
type Queue struct {
	*directory
	rt *queueRT // the queue's incarnation, shared by its handles

	// detached is closed by Close on a named queue's handle (nil for the
	// default queue's, whose Close closes the directory).
	detached   chan struct{}
	detachOnce sync.Once
}

// directory is what the queues of one directory share.
type directory struct {
	dir   string
	dirID wal.DirID // the directory's identity, from its marker; every receipt carries it (receipt.go)
	opts  Options
	clock Clock
	qt    queueTime // the queue's one time; see qtime.go
	log   *wal.Log
	lock  *os.File // holds the flock on the directory

	// mu is the sequencer (sequencer.go).
	mu       sync.Mutex
	st       *state.State
	rts      map[uint64]*queueRT // every queue's runtime, by incarnation ID; under mu
	encBuf   []byte              // record encoding scratch; under mu
	bodies   *bodies             // bodies in memory: unplaced and cached (bodies.go); under mu
	closed   bool                // under mu
	timerAt  int64               // when the timer loop will wake next (MaxInt64: not armed); under mu
	wakes    wakeHeap            // the queues that have a time for the timer, by that time (timer.go); under mu
	logBytes int64               // bytes in the log segments, approximately; under mu
	disk     diskSpace           // the free space last read; under mu
	kick     chan struct{}       // wakes the timer loop to look again
	done     chan struct{}       // closed by Close

	// failed is closed at the first failure (a failed write or fsync, or a
	// record the state refused), after failErr is set: every blocked call
	// and loop selects on it. See fail.
	failed   chan struct{}
	failOnce sync.Once
	failErr  error

	compactSignal chan struct{}
	reserveSignal chan struct{} // capacity 1: the reserve is short of the next snapshot by a step (reserveStep)
	compactMu     sync.Mutex    // one compaction at a time
	snapLSN       atomic.Uint64 // LSN covered by the newest snapshot; written under compactMu
	compactAfter  int64         // no automatic compaction below this log size; under mu
	tightAfter    int64         // nor one for a tight disk (diskTightLocked); under mu
	lastSnapBytes int64         // size of the last snapshot a compaction wrote (or Open loaded), or twice what one wrote before it passed its room; under mu
	lastSnapUnits int           // its items and released keys (snapshotUnits); under mu
	compactWait   atomic.Int64  // how long compactLoop waits after a failure; a success sets it back to compactRetryMin

	metrics  metrics
	recovery RecoveryStats
	wg       sync.WaitGroup
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
// built and written in one piece. MaxBatchBytes bounds the record: its
// bodies, its keys and batchItemOverhead bytes for each item's other
// fields, so a batch of many empty items is bounded too.
const (
	MaxKeySize    = 1 << 10
	MaxBatchBytes = 64 << 20

	batchItemOverhead = 16
)

// MaxIDs is the most item IDs one call that names items (DeleteItems,
// Redrive, PurgeDeadLetters, RedriveTo) takes: the IDs are one record,
// bounded as a batch is (MaxBatchBytes, at 8 bytes an ID). More is
// ErrTooLarge, and nothing is changed.
const MaxIDs = MaxBatchBytes / 8

// checkIDs refuses a list of IDs longer than MaxIDs.
func checkIDs(call string, ids []uint64) error {
	if len(ids) > MaxIDs {
		return fmt.Errorf("%w: %s of %d items: at most %d in one call", ErrTooLarge, call, len(ids), MaxIDs)
	}
	return nil
}

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
	total, record := 0, 0
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
		record += len(it.Body) + len(it.Key) + batchItemOverhead
	}
	if record > MaxBatchBytes {
		return nil, fmt.Errorf("%w: batch of %d items, %d bytes of bodies: a record of about %d bytes, at most %d",
			ErrTooLarge, len(items), total, record, MaxBatchBytes)
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
	if err := q.callLocked(); err != nil {
		return nil, q.answerLocked(err) // a delete, say, not durable yet
	}
	rt := q.rt
	qs := q.st.Queue(rt.id)
	now := q.qt.now()
	ids := make([]uint64, len(items))
	var errs []error
	accepted := recItems[:0]
	var inBatch map[string]int // key -> index of the accepted item with it (only for batches with keys)
	var sameAs map[int]int     // item index -> index of the earlier item of the batch with its key
	var bytes, recBytes int64  // the accepted items' bodies, and their record
	for i := range items {
		it := &items[i]
		n := recItems[i]
		n.Due = now + int64(it.Delay)
		if !it.Deadline.IsZero() {
			// A deadline is a wall-clock time: it means the same span from
			// now in queue time, whatever offset lies between the two.
			n.Deadline = q.qt.fromWall(it.Deadline)
			if n.Deadline <= n.Due {
				q.mu.Unlock()
				return nil, fmt.Errorf("%w: item %d: deadline %v is not after its due time %v", ErrInvalidDeadline, i,
					it.Deadline.UTC().Format(time.RFC3339Nano), q.qt.toWall(n.Due).UTC().Format(time.RFC3339Nano))
			}
		}
		if n.Key != "" {
			if id, held := qs.KeyHolder(n.Key, now, int64(rt.set.keyWindow)); held {
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
		recBytes += int64(len(n.Body) + len(n.Key) + batchItemOverhead)
	}
	if err := rt.checkRoom(qs, len(accepted), bytes); err != nil {
		return nil, q.answerLocked(err) // the items it counts may not be durable yet
	}
	if err := q.checkDiskLocked(len(accepted), recBytes); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	var commit *wal.Commit
	if len(accepted) > 0 {
		first := q.st.NextID()
		var err error
		var lsn uint64
		q.bodies.drainLocked(q.st)
		if lsn, commit, err = q.appendToLocked(rt.id, &state.Put{Time: now, Items: accepted}); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		q.addPutBodiesLocked(lsn, first, accepted)
		q.metrics.putBytes.Add(bytes)
		next := first
		for i := range items {
			if _, dup := sameAs[i]; dup || (errs != nil && errs[i] != nil) {
				continue
			}
			ids[i] = next
			next++
		}
	}
	// A repeated key inside the batch gets the ID of its first item.
	for i, first := range sameAs {
		ids[i] = ids[first]
		errs = setErr(errs, len(items), i, fmt.Errorf("%w: key %q is held by item %d of the same batch", ErrDuplicate, items[i].Key, ids[first]))
	}
	if commit == nil {
		// Every key was held: the holders may not be durable yet, and a
		// crash that takes them back must not have been answered
		// "duplicate" (a record appended, when there is one, comes after
		// them and is waited for anyway).
		commit = q.log.Barrier()
	}
	q.mu.Unlock()
	if commit != nil {
		if err := q.wait(commit); err != nil {
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
	rt := q.rt
	signalled := false // the last wait ended in a signal, counted in rt.woken
	for {
		q.mu.Lock()
		passOn := signalled // a Get that leaves without leasing passes its signal on
		if signalled {
			rt.woken--
			signalled = false
		}
		if err := q.callLocked(); err != nil {
			if passOn {
				q.wakeLocked(rt, q.qt.now()) // the handle closed as the signal came
			}
			return Message{}, q.answerLocked(err) // a delete, say, not durable yet
		}
		m, src, commit, err := q.leaseLocked()
		if err != nil {
			if passOn {
				q.wakeLocked(rt, q.qt.now())
			}
			q.mu.Unlock()
			return Message{}, err
		}
		if commit != nil {
			q.mu.Unlock()
			ok, err := q.deliverBody(&m, src)
			if err != nil {
				return Message{}, err
			}
			if err := q.wait(commit); err != nil {
				return Message{}, err
			}
			if !ok {
				continue // its body was bad: it went to the dead letters
			}
			return m, nil
		}
		w := rt.waiters.add()
		q.kickLocked(q.changedWakeLocked(rt.id)) // a waiter makes the next pause end count
		q.mu.Unlock()
		var end error
		select {
		case <-w.ch:
			signalled = true
			continue
		case <-ctx.Done():
			end = ctx.Err()
		case <-q.done:
			end = ErrClosed
		case <-q.failed:
			end = q.failErr
		case <-rt.deleted:
			end = fmt.Errorf("%w: %s", ErrQueueDeleted, rt.label())
		case <-q.detached: // nil for the default queue: never ready
			// A handle closed after its queue was deleted says the
			// queue was deleted, whichever the wait saw first.
			select {
			case <-rt.deleted:
				end = fmt.Errorf("%w: %s", ErrQueueDeleted, rt.label())
			default:
				end = fmt.Errorf("%w: the handle on %s", ErrClosed, rt.label())
			}
		}
		// Every way out takes the waiter off the list, so that no signal
		// goes to a Get that is gone; one that came as it gave up is passed
		// on.
		q.mu.Lock()
		rt.waiters.remove(w)
		select {
		case <-w.ch:
			rt.woken--
			q.wakeLocked(rt, q.qt.now())
		default:
		}
		q.mu.Unlock()
		return Message{}, end
	}
}

// TryGet leases the next ready item if there is one; it never blocks for
// an item (it does wait for the lease to be durable).
func (q *Queue) TryGet() (Message, bool, error) {
	m, ok, commit, err := q.tryLease()
	if err == nil && commit != nil {
		err = q.wait(commit)
	}
	if err != nil {
		return Message{}, false, err
	}
	return m, ok, nil
}

// tryLease is TryGet without the wait for the lease to be durable: the
// caller waits on commit (nil when nothing was leased, or when the answer
// rested on no record) before it hands the message on. A WorkQueues round
// leases from several queues this way and waits once.
func (q *Queue) tryLease() (Message, bool, *wal.Commit, error) {
	var prev *wal.Commit // of an item whose body was bad, sent to the dead letters
	for {
		q.mu.Lock()
		if err := q.callLocked(); err != nil {
			return Message{}, false, nil, q.answerLocked(err)
		}
		m, src, commit, err := q.leaseLocked()
		q.mu.Unlock()
		if err != nil {
			return Message{}, false, nil, err
		}
		if commit == nil {
			return Message{}, false, prev, nil // "none" rests on prev's record too
		}
		ok, err := q.deliverBody(&m, src)
		if err != nil {
			return Message{}, false, nil, err
		}
		if ok {
			return m, true, commit, nil // later than prev: it covers it
		}
		// Its body was bad: it went to the dead letters; try the next.
		prev = commit
	}
}

// leaseLocked leases the next ready item; a nil commit means none is ready,
// or the queue is paused or at its cap of leases in flight. The message
// has no body yet: the caller gives it one with deliverBody from the
// source returned, after releasing mu.
func (q *Queue) leaseLocked() (Message, bodySource, *wal.Commit, error) {
	now := q.qt.now()
	if err := q.discardPassedLocked(now); err != nil {
		return Message{}, bodySource{}, nil, err
	}
	rt := q.rt
	qs := q.st.Queue(rt.id)
	if qs.Paused(now) || (rt.set.maxInFlight > 0 && qs.Leased() >= rt.set.maxInFlight) {
		return Message{}, bodySource{}, nil, nil
	}
	qs.Promote(now)
	it := qs.NextReady()
	if it == nil {
		return Message{}, bodySource{}, nil, nil
	}
	rec := &state.Lease{Time: now, ID: it.ID, LeaseEnd: now + int64(rt.set.visibility)}
	lsn, commit, err := q.appendToLocked(rt.id, rec)
	if err != nil {
		return Message{}, bodySource{}, nil, err
	}
	q.bodies.drainLocked(q.st)
	it = q.st.Item(it.ID) // as leased, with its body placed if it was not
	src := q.sourceLocked(it.ID, it.Body, true)
	off := q.qt.offset()
	return Message{
		ID:         it.ID,
		Queue:      rt.name,
		Receipt:    q.receiptFor(lsn),
		Attempt:    int(it.Attempts),
		Deliveries: int(it.Deliveries),
		Priority:   int(it.Priority),
		Key:        it.Key(),
		EnqueuedAt: off.toWall(it.EnqueuedAt),
		LeaseEnd:   off.toWall(it.LeaseEnd),

		leaseEndMono: q.qt.monotonic(it.LeaseEnd),
		leaseVis:     rt.set.visibility,
	}, src, commit, nil
}

// discardPassedLocked discards waiting items whose deadline has come.
func (q *Queue) discardPassedLocked(now int64) error {
	for {
		passed := q.st.PassedDeadlines(now, 1024)
		if len(passed) == 0 {
			return nil
		}
		for _, it := range passed {
			q.opts.Logger.Info("walq: item discarded at its deadline", "id", it.ID,
				"deadline", q.qt.toWall(it.Deadline()).UTC())
		}
		if err := q.discardLocked(now, passed); err != nil {
			return err
		}
	}
}

// discardLocked writes the discards of items passed their deadline, one
// record per queue.
func (q *Queue) discardLocked(now int64, passed []*state.Item) error {
	byQueue := make(map[uint64][]uint64)
	var order []uint64
	for _, it := range passed {
		if byQueue[it.Queue] == nil {
			order = append(order, it.Queue)
		}
		byQueue[it.Queue] = append(byQueue[it.Queue], it.ID)
	}
	for _, id := range order {
		if _, _, err := q.appendToLocked(id, &state.Discard{Time: now, IDs: byQueue[id]}); err != nil {
			return err
		}
	}
	return nil
}

// openLeaseLocked finds the lease that receipt names if it is still
// running at now; otherwise it counts a late ack. The caller has checked r
// with checkReceipt.
func (q *Queue) openLeaseLocked(r Receipt, now int64, call string) (*state.Item, error) {
	it := q.st.Leased(r.lease)
	if it == nil || it.Queue != q.rt.id || now >= it.LeaseEnd {
		q.rt.lateAcks.Add(1)
		q.opts.Logger.Info("walq: call with a lost lease", "call", call, "receipt", r)
		return nil, fmt.Errorf("%w: %s with receipt %s", ErrLeaseLost, call, r)
	}
	return it, nil
}

// Extend moves the end of a running lease to d from now (a heartbeat). It
// returns ErrLeaseLost when the lease already ended, and ErrInvalid for a
// receipt this queue did not issue.
func (q *Queue) Extend(r Receipt, d time.Duration) error {
	if err := q.checkReceipt(r, "extend"); err != nil {
		return err
	}
	if d <= 0 || d > MaxDuration {
		return fmt.Errorf("%w: extend by %v: must be positive and at most MaxDuration", ErrInvalid, d)
	}
	q.mu.Lock()
	commit, err := q.extendLocked(r, d)
	if err != nil {
		return q.answerLocked(err) // a lease lost to a record not durable yet
	}
	q.mu.Unlock()
	return q.wait(commit)
}

func (q *Queue) extendLocked(r Receipt, d time.Duration) (*wal.Commit, error) {
	if err := q.checkReceiptLocked(r, "extend"); err != nil {
		return nil, err
	}
	if err := q.callLocked(); err != nil {
		return nil, err
	}
	now := q.qt.now()
	if _, err := q.openLeaseLocked(r, now, "extend"); err != nil {
		return nil, err
	}
	_, commit, err := q.appendToLocked(q.rt.id, &state.Extend{Time: now, Receipt: r.lease, LeaseEnd: now + int64(d)})
	return commit, err
}

// Ack ends a lease in success: the item is gone for good. It returns
// ErrLeaseLost when the lease already ended, and ErrInvalid for a receipt
// this queue did not issue; one of a queue since deleted (an earlier queue
// of this name, say) is ErrQueueDeleted too.
func (q *Queue) Ack(r Receipt) error {
	commit, err := q.ackPending(r)
	if err != nil {
		return err
	}
	return q.wait(commit)
}

// ackPending is Ack without the wait for its record: the caller waits on
// the commit returned. An error is an answer that rests on durable records
// already (a lease lost to a record not durable yet waits for it).
func (q *Queue) ackPending(r Receipt) (*wal.Commit, error) {
	q.mu.Lock()
	commit, err := q.ackLocked(r)
	if err != nil {
		return nil, q.answerLocked(err)
	}
	q.mu.Unlock()
	return commit, nil
}

func (q *Queue) ackLocked(r Receipt) (*wal.Commit, error) {
	if err := q.checkReceiptLocked(r, "ack"); err != nil {
		return nil, err
	}
	if err := q.callLocked(); err != nil {
		return nil, err
	}
	now := q.qt.now()
	if _, err := q.openLeaseLocked(r, now, "ack"); err != nil {
		return nil, err
	}
	_, commit, err := q.appendToLocked(q.rt.id, &state.Ack{Time: now, Receipt: r.lease})
	return commit, err
}

// Nack ends a lease in failure: the item comes back after Options.Backoff,
// or goes to the dead letters when it is out of attempts. cause is kept as
// the item's last error. Its errors are those of Ack.
func (q *Queue) Nack(r Receipt, cause error) error {
	return q.end(r, state.TypeNack, causeText(cause, "nack"))
}

// DeadLetter ends a lease in permanent failure: the item goes straight to
// the dead letters with cause as its last error. Its errors are those of
// Ack.
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
		n := maxCause
		for n > 0 && !utf8.RuneStart(s[n]) {
			n-- // cut before a rune, not inside it
		}
		s = s[:n] + "…"
	}
	return s
}

func (q *Queue) end(r Receipt, kind byte, cause string) error {
	if err := q.checkReceipt(r, state.TypeName(kind)); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return q.answerLocked(err)
	}
	now := q.qt.now()
	it, err := q.openLeaseLocked(r, now, state.TypeName(kind))
	if err != nil {
		return q.answerLocked(err) // a lease lost to a record not durable yet
	}
	_, commit, err := q.appendEndLocked(q.rt, kind, it, now, cause)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.wait(commit)
}

// endRecordLocked decides how a lease ends that did not end in an ack:
// dead-lettered when asked or out of attempts, otherwise back after the
// backoff (the state discards it if that is at or after its deadline).
// The record carries the decision and the jittered due time, so replay
// repeats it without options or randomness. Call it before appending; the
// caller appends the result.
func (q *Queue) endRecordLocked(rt *queueRT, kind byte, it *state.Item, now int64, cause string) *state.End {
	rec := &state.End{Kind: kind, Time: now, Receipt: it.Receipt, Cause: cause, Due: now}
	rec.Dead = kind == state.TypeDeadLetter || int(it.Attempts) >= rt.set.maxAttempts
	if !rec.Dead {
		if d := rt.set.backoff(int(it.Attempts)); d > 0 {
			rec.Due = now + int64(min(d, MaxDuration))
		}
		switch {
		case it.Deadline() != 0 && rec.Due >= it.Deadline():
			q.opts.Logger.Info("walq: item discarded: its next attempt would fall after its deadline",
				"id", it.ID, "deadline", q.qt.toWall(it.Deadline()).UTC())
		}
	} else {
		q.opts.Logger.Info("walq: item dead-lettered", "id", it.ID, "attempts", it.Attempts, "cause", cause)
	}
	if kind == state.TypeExpire && q.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		q.opts.Logger.Debug("walq: lease expired", "id", it.ID, "receipt", it.Receipt)
	}
	return rec
}

// DeadLetter is an item in the dead-letter list.
type DeadLetter struct {
	ID   uint64
	Body []byte
	// BodyError says why Body is nil for a body that is stored but could
	// not be read or failed its check; "" otherwise.
	BodyError  string
	Key        string
	Attempts   int // in the run that ended in the dead-letter list
	Deliveries int
	LastError  string
	DeadAt     time.Time
	EnqueuedAt time.Time
	// History is the item's last attempts, oldest first: at most
	// state.HistoryLen (10), each error text cut to 512 bytes.
	History []Attempt

	place state.DeadPlace // its place in the list (DeadLetterPage)
}

// Attempt is one delivery of an item that did not end in an ack: when its
// lease started and ended, how it ended ("nack", "expire" or
// "deadletter") and the error text, cut to 512 bytes.
type Attempt struct {
	Start, End time.Time
	How        string
	Error      string
}

func attemptsOf(h []state.Attempt, off offset) []Attempt {
	if len(h) == 0 {
		return nil
	}
	out := make([]Attempt, len(h))
	for i, a := range h {
		out[i] = Attempt{Start: off.toWall(a.Start), End: off.toWall(a.End), How: state.TypeName(a.How), Error: a.Error}
	}
	return out
}

// DeadLetters returns up to limit dead letters, oldest first (limit <= 0:
// all of them), with their bodies. All of them means every body in memory
// at once: a list that can grow large is read with DeadLetterPage. On a
// handle whose queue was deleted it returns none.
func (q *Queue) DeadLetters(limit int) []DeadLetter {
	out, _ := q.deadLetters(state.DeadPlace{}, limit, 0)
	return out
}

// DeadLetterCursor is a place in a queue's dead-letter list: the zero
// value is its start, and DeadLetterPage returns the place after the last
// letter it returned.
type DeadLetterCursor struct{ place state.DeadPlace }

// DeadLetterPageBytes bounds the bodies of one page of DeadLetterPage: a
// page ends after the letter that brings them past it (so it always holds
// at least one letter).
const DeadLetterPageBytes = 4 << 20

// MaxDeadLetterPage bounds the letters of one page of DeadLetterPage.
const MaxDeadLetterPage = 1000

// DeadLetterPage returns the dead letters after the cursor, oldest first,
// with their bodies: at most limit of them (limit <= 0: 100; at most
// MaxDeadLetterPage), ending early past DeadLetterPageBytes of bodies;
// and the cursor for the next page.
// The list is done when a page comes back empty. Each page costs O(log n)
// of the list plus its own letters; a letter redriven or purged between
// pages is not returned, and one dead-lettered meanwhile comes at the end.
func (q *Queue) DeadLetterPage(after DeadLetterCursor, limit int) ([]DeadLetter, DeadLetterCursor) {
	if limit <= 0 {
		limit = 100
	}
	out, last := q.deadLetters(after.place, min(limit, MaxDeadLetterPage), DeadLetterPageBytes)
	if len(out) == 0 {
		return nil, after
	}
	return out, DeadLetterCursor{last}
}

// deadLetters returns up to limit dead letters after place (limit <= 0:
// all), stopping after the one whose body takes the page past maxBytes
// (0: no bound), and the place of the last one returned.
func (q *Queue) deadLetters(place state.DeadPlace, limit int, maxBytes int64) ([]DeadLetter, state.DeadPlace) {
	q.mu.Lock()
	var items []state.Item
	var srcs []bodySource
	if qs := q.st.Queue(q.rt.id); qs != nil && !q.rt.gone {
		q.bodies.drainLocked(q.st)
		items, _ = qs.DeadLettersAfter(place, limit)
		srcs = make([]bodySource, len(items))
		for i := range items {
			srcs[i] = q.sourceLocked(items[i].ID, items[i].Body, false)
		}
	}
	q.mu.Unlock()
	out := make([]DeadLetter, 0, len(items))
	off := q.qt.offset()
	var bytes int64
	for i, it := range items {
		if maxBytes > 0 && bytes >= maxBytes {
			break
		}
		// A body that cannot be read is left out; BodyError says why.
		body, berr := q.loadBody(srcs[i])
		var bodyErr string
		if berr != nil {
			bodyErr = berr.Error()
		}
		bytes += int64(it.Body.Len)
		out = append(out, DeadLetter{
			ID:         it.ID,
			Body:       body,
			BodyError:  bodyErr,
			Key:        it.Key(),
			Attempts:   int(it.Attempts),
			Deliveries: int(it.Deliveries),
			LastError:  it.LastError(),
			DeadAt:     off.toWall(it.EndedAt()),
			EnqueuedAt: off.toWall(it.EnqueuedAt),
			History:    attemptsOf(it.History(), off),
			place:      it.DeadPlace(),
		})
	}
	if len(out) == 0 {
		return nil, state.DeadPlace{}
	}
	return out, out[len(out)-1].place
}

// Redrive puts dead letters back as ready items with their attempts reset
// (their delivery counts are kept). Every ID must be a dead letter, or
// nothing is changed and the error is ErrNotFound.
func (q *Queue) Redrive(ids ...uint64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := checkIDs("redrive", ids); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.checkDeadLocked(ids); err != nil {
		return q.answerLocked(err)
	}
	if err := q.roomForIDsLocked("redrive", ids); err != nil {
		return q.answerLocked(err)
	}
	_, commit, err := q.appendToLocked(q.rt.id, &state.Redrive{Time: q.qt.now(), IDs: append([]uint64(nil), ids...)})
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.wait(commit)
}

// PurgeDeadLetters drops the named dead letters for good; with no IDs, all
// of them. Every ID must be a dead letter, or nothing is changed and the
// error is ErrNotFound.
func (q *Queue) PurgeDeadLetters(ids ...uint64) error {
	if err := checkIDs("purge", ids); err != nil {
		return err
	}
	q.mu.Lock()
	rec := &state.Purge{IDs: append([]uint64(nil), ids...), All: len(ids) == 0}
	if rec.All {
		if err := q.callLocked(); err != nil {
			return q.answerLocked(err)
		}
		if q.st.Queue(q.rt.id).Gauges().Dead == 0 {
			return q.answerLocked(nil)
		}
	} else if err := q.checkDeadLocked(ids); err != nil {
		return q.answerLocked(err)
	} else if err := q.roomForIDsLocked("purge", ids); err != nil {
		return q.answerLocked(err)
	}
	rec.Time = q.qt.now()
	_, commit, err := q.appendToLocked(q.rt.id, rec)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.wait(commit)
}

// DeleteItems removes stored items of this queue for good, whatever their
// state: waiting, delayed, leased or dead. A lease on one ends with it (an
// Ack, Nack or Extend with its receipt then returns ErrLeaseLost, and Work
// cancels its handler's context at the next heartbeat); its key is released
// as on an ack. It is an operator's call (the dashboard's delete), counted
// in Stats.Purged. An ID that is not an item of this queue is ErrNoItem,
// and then nothing is deleted.
func (q *Queue) DeleteItems(ids ...uint64) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: delete of no items", ErrInvalid)
	}
	if err := checkIDs("delete", ids); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return q.answerLocked(err)
	}
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if it := q.st.Item(id); it == nil || it.Queue != q.rt.id {
			return q.answerLocked(fmt.Errorf("%w: item %d in %s", ErrNoItem, id, q.rt.label()))
		}
		if seen[id] {
			return q.answerLocked(fmt.Errorf("%w: item %d named twice", ErrInvalid, id))
		}
		seen[id] = true
	}
	if err := q.roomForIDsLocked("delete", ids); err != nil {
		return q.answerLocked(err)
	}
	rec := &state.Delete{Time: q.qt.now(), IDs: append([]uint64(nil), ids...)}
	_, commit, err := q.appendToLocked(q.rt.id, rec)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	q.opts.Logger.Info("walq: items deleted", "queue", q.rt.label(), "items", len(ids))
	return q.wait(commit)
}

func (q *Queue) checkDeadLocked(ids []uint64) error {
	if err := q.callLocked(); err != nil {
		return err
	}
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if it := q.st.Item(id); it == nil || it.Status != state.Dead || it.Queue != q.rt.id {
			return fmt.Errorf("%w: item %d in %s", ErrNotFound, id, q.rt.label())
		}
		if seen[id] {
			return fmt.Errorf("%w: item %d named twice", ErrInvalid, id)
		}
		seen[id] = true
	}
	return nil
}

// Close on the default queue's handle (what Open returned) closes the
// directory: blocked Gets of every queue return ErrClosed, background work
// stops, the log is synced and closed and the directory lock released.
// Calls after Close, on any handle, return ErrClosed (once their
// arguments pass their checks).
//
// Close on a named queue's handle closes only that handle: its calls, and
// its Gets blocked at the time, return ErrClosed; the queue and the
// directory stay open.
func (q *Queue) Close() error {
	if q.detached != nil {
		err := ErrClosed
		q.detachOnce.Do(func() {
			close(q.detached)
			err = nil
			// A WorkQueues pool idle on this handle's watch learns of the
			// close from its next TryGet. Close takes no lock (a caller may
			// close a handle from anywhere): the signals go out from a
			// goroutine of their own.
			go func() {
				q.mu.Lock()
				q.rt.signalWatchersLocked()
				q.mu.Unlock()
			}()
		})
		return err
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.closed = true
	close(q.done)
	q.signalAllWatchersLocked() // idle WorkQueues pools learn of it from TryGet
	q.mu.Unlock()
	q.wg.Wait()
	q.compactMu.Lock() // let a Compact call in flight finish
	err := q.closeLog()
	q.compactMu.Unlock()
	// Nothing reads an item any more; their memory goes now, not when the
	// collector finds the queue unreachable (a reopen in this process
	// would hold it twice meanwhile).
	q.mu.Lock()
	q.st.Release()
	q.mu.Unlock()
	if uerr := unlockDir(q.lock); err == nil {
		err = uerr
	}
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return err
}
