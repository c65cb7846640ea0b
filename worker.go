package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// WorkOptions configure Work. The zero value is a sane default; each
// field's default is given in brackets. All times run on Options.Clock.
type WorkOptions struct {
	// Timeout is how long one handler call may run: its context is then
	// cancelled (Err is context.DeadlineExceeded), the heartbeat stops and
	// the item is nacked with the handler's error [5m]. Negative: no
	// timeout — a handler that hangs then keeps its item, through the
	// heartbeat, until Work stops.
	Timeout time.Duration
	// HeartbeatEvery is how often a running handler's lease is extended by
	// Options.Visibility, counted from the start of the lease; it must be
	// shorter than Options.Visibility [Options.Visibility/3].
	HeartbeatEvery time.Duration
	// Grace is how long a handler whose context Work cancelled (timeout,
	// lost lease, drain timeout) may take to return before Work abandons
	// it: its worker goes on with the next item while the handler runs on
	// in its goroutine, and its item stays leased, by the heartbeat, until
	// the handler returns; its result then settles the item as usual [the
	// smaller of HeartbeatEvery and 5s].
	Grace time.Duration
	// MaxAbandoned bounds the abandoned handlers of this Work call that
	// have not returned yet. Past it, a worker whose handler ignores its
	// cancellation waits for it instead of starting another goroutine:
	// handlers hung on a dependency shrink the pool rather than pile up
	// [n, the number of workers]. Negative: never abandon.
	MaxAbandoned int
	// DrainTimeout is how long running handlers may go on after Work's
	// context ends; their contexts are cancelled then [10s]. Work returns
	// within DrainTimeout+Grace of its context ending. Negative: cancel them
	// at once.
	DrainTimeout time.Duration
}

const (
	defaultWorkTimeout  = 5 * time.Minute
	defaultDrainTimeout = 10 * time.Second
	maxDefaultGrace     = 5 * time.Second
	maxPanicStack       = 4 << 10
)

func (o WorkOptions) withDefaults(visibility time.Duration, workers int) (WorkOptions, error) {
	bad := func(field string, v any, why string) (WorkOptions, error) {
		return o, fmt.Errorf("%w: WorkOptions.%s = %v: %s", ErrInvalid, field, v, why)
	}
	switch {
	case o.HeartbeatEvery < 0:
		return bad("HeartbeatEvery", o.HeartbeatEvery, "negative")
	case o.HeartbeatEvery >= visibility:
		return bad("HeartbeatEvery", o.HeartbeatEvery, fmt.Sprintf("not shorter than Options.Visibility %v", visibility))
	case o.Grace < 0:
		return bad("Grace", o.Grace, "negative")
	}
	if o.Timeout == 0 {
		o.Timeout = defaultWorkTimeout
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = visibility / 3
	}
	if o.Grace == 0 {
		o.Grace = min(o.HeartbeatEvery, maxDefaultGrace)
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = defaultDrainTimeout
	}
	if o.MaxAbandoned == 0 {
		o.MaxAbandoned = workers
	}
	return o, nil
}

// PermanentError marks a handler error that retrying cannot fix: Work
// dead-letters the item at once instead of nacking it. Make one with
// Permanent.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that Work dead-letters the item at once, with err
// as its last error. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, came from
// Permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// workStats are Work's counters, kept on the Queue (all Work calls on it
// add to them) and exported by the collector.
type workStats struct {
	handlerErrors    atomic.Uint64 // handler calls that returned an error (panics apart)
	panics           atomic.Uint64
	timeouts         atomic.Uint64 // handler contexts cancelled at WorkOptions.Timeout
	abandoned        atomic.Uint64
	abandonedRunning atomic.Int64  // abandoned handlers that have not returned yet
	leaseLost        atomic.Uint64 // heartbeats that found the lease gone
}

// Work leases items and runs handler on them with n workers until ctx ends.
// For each item it:
//
//   - calls handler with a context that carries ctx's values, is cancelled
//     at WorkOptions.Timeout (and sooner if the lease is lost), and whose
//     context.Cause says why it was cancelled;
//   - extends the lease every WorkOptions.HeartbeatEvery while the handler
//     runs, so slow work is never handed to a second worker; a heartbeat
//     does not wait for its record's fsync (a lease open at a crash ends
//     at recovery whatever its end), so a slow disk cannot make it late. A
//     heartbeat that finds the lease lost (the item was redelivered or
//     dead-lettered) cancels the handler at once and its result is dropped;
//   - acks on a nil error, dead-letters on an error made with Permanent, and
//     nacks on any other error and on a panic (the cause then holds the
//     panic value and the stack), so the item comes back after the backoff
//     or is dead-lettered when out of attempts;
//   - abandons a handler that ignores its cancelled context for
//     WorkOptions.Grace: the worker goes on with the next item, while the
//     item stays leased (the heartbeat goes on) until the handler returns
//     and its result settles the item, so an abandoned handler never runs
//     alongside a second delivery of its item. At most
//     WorkOptions.MaxAbandoned are abandoned at once; past that the worker
//     waits for its handler. (Go cannot stop a goroutine: an abandoned
//     handler runs on until it returns.)
//
// An ack and the worker's next lease share one fsync wait.
//
// When ctx ends, Work takes no new item, lets running handlers finish for
// WorkOptions.DrainTimeout, cancels the ones still running and returns nil
// once each has returned or been abandoned. Items it could not finish come
// back by nack or lease expiry: none is lost. If the queue stops serving
// (Close, or a failed write), Work cancels its handlers and returns that
// error. Delivery is at least once: handlers must tolerate running twice.
func (q *Queue) Work(ctx context.Context, n int, handler func(context.Context, Message) error, opts WorkOptions) error {
	if n < 1 {
		return fmt.Errorf("%w: Work with %d workers", ErrInvalid, n)
	}
	if handler == nil {
		return fmt.Errorf("%w: Work with a nil handler", ErrInvalid)
	}
	o, err := opts.withDefaults(q.opts.Visibility, n)
	if err != nil {
		return err
	}
	take, stopTaking := context.WithCancelCause(ctx)
	defer stopTaking(nil)
	w := &workRun{
		q:          q,
		handler:    handler,
		opts:       o,
		base:       context.WithoutCancel(ctx),
		take:       take,
		stopTaking: stopTaking,
		stop:       make(chan struct{}),
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(w.worker)
	}
	workersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(workersDone)
	}()

	select {
	case <-workersDone:
		return w.failure()
	case <-take.Done():
	}
	if o.DrainTimeout < 0 {
		w.stopAll(fmt.Errorf("walq: work stopped: %w", context.Cause(take)))
		<-workersDone
		return w.failure()
	}
	drain := q.clock.NewTimer(o.DrainTimeout)
	defer drain.Stop()
	select {
	case <-workersDone:
	case <-drain.C():
		w.stopAll(fmt.Errorf("walq: work stopped and its drain timeout (%v) passed: %w", o.DrainTimeout, context.Cause(take)))
		<-workersDone
	}
	return w.failure()
}

// workRun is one call of Work.
type workRun struct {
	q       *Queue
	handler func(context.Context, Message) error
	opts    WorkOptions
	base    context.Context // ctx's values without its cancellation: handlers outlive ctx by the drain

	take       context.Context // ends when ctx does or the queue fails: no new leases
	stopTaking context.CancelCauseFunc

	stopOnce  sync.Once
	stop      chan struct{} // closed to cancel every running handler
	stopCause error         // written before stop is closed

	mu  sync.Mutex
	err error // the queue error that ended Work

	abandoned atomic.Int64 // abandoned handlers of this call still running; at most opts.MaxAbandoned
}

// fail ends Work because the queue stopped serving.
func (w *workRun) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.stopTaking(err)
	w.stopAll(err)
}

func (w *workRun) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *workRun) stopAll(cause error) {
	w.stopOnce.Do(func() {
		w.stopCause = cause
		close(w.stop)
	})
}

// worker is one slot of the pool: it leases an item, runs it, reports the
// outcome, and goes on until Work stops taking items.
func (w *workRun) worker() {
	var m Message
	have := false
	for {
		if !have {
			var err error
			if m, err = w.q.Get(w.take); err != nil {
				if w.take.Err() == nil {
					w.fail(err)
				}
				return
			}
		}
		next, ok, err := w.settle(m, w.run(m))
		if err != nil {
			w.fail(err)
			return
		}
		m, have = next, ok
		if !have && w.take.Err() != nil {
			return
		}
	}
}

// result is how one handler call ended.
type result struct {
	err       error // what the handler returned (a *panicError for a panic)
	cancelled error // why Work cancelled the handler's context, or nil
	abandoned bool  // it ignored the cancellation for the grace period; a keeper settles it
	leaseLost bool  // a heartbeat found the lease gone
}

// beater extends one lease every WorkOptions.HeartbeatEvery, counted from
// the start of the lease or its last extension, in queue time: the first
// beat counts from the lease's start, not from now, since Get or the
// previous ack may have waited long for an fsync.
type beater struct {
	w         *workRun
	m         Message
	timer     Timer
	lastStart int64 // queue time at which the lease was last started or extended
}

func (w *workRun) newBeater(m Message) *beater {
	b := &beater{w: w, m: m, lastStart: m.leaseEnd - int64(w.q.opts.Visibility)}
	b.timer = w.q.clock.NewTimer(b.wait())
	return b
}

// wait is how long until the next beat is due.
func (b *beater) wait() time.Duration {
	return b.w.opts.HeartbeatEvery - time.Duration(b.w.q.qt.now()-b.lastStart)
}

// beat extends the lease and arms the next beat. It returns ErrLeaseLost
// (wrapped) when the lease has ended, and a queue error when the queue
// failed or closed.
func (b *beater) beat() error {
	q := b.w.q
	start := q.qt.now()
	if err := q.heartbeat(b.m.Receipt, q.opts.Visibility); err != nil {
		return err
	}
	b.lastStart = start
	b.timer.Reset(b.wait())
	return nil
}

// run calls the handler on m in its own goroutine and watches it: the
// heartbeat, the timeout, Work's stop, the queue's failure and the grace
// period. All its timers are stopped when it returns, unless it hands the
// handler to a keeper; the handler goroutine ends when the handler does.
func (w *workRun) run(m Message) result {
	q := w.q
	inner, cancel := context.WithCancelCause(w.base)
	ctx := &itemContext{Context: inner}

	var timeout <-chan time.Time
	if w.opts.Timeout > 0 {
		ctx.deadline = q.clock.Now().Add(w.opts.Timeout)
		t := q.clock.NewTimer(w.opts.Timeout)
		defer t.Stop()
		timeout = t.C()
	}
	b := w.newBeater(m)
	heartbeat := b.timer.C()
	stop := w.stop
	failed := q.failed
	var graceTimer Timer
	var grace <-chan time.Time
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	kept := false
	defer func() {
		if !kept {
			b.timer.Stop()
			cancel(nil)
		}
	}()

	var res result
	// interrupt cancels the handler, which has Grace to return. The grace
	// timer runs before the handler can see the cancellation. The heartbeat
	// goes on: the item stays this worker's until the handler returns.
	interrupt := func(cause error) {
		timeout, stop = nil, nil
		if res.cancelled != nil {
			return
		}
		graceTimer = q.clock.NewTimer(w.opts.Grace)
		grace = graceTimer.C()
		res.cancelled = cause
		cancel(cause)
	}

	// A first beat already due means Get (or the ack before it) waited long
	// for the disk. Beat before the handler starts: a lease that ended in
	// that wait went back to the queue and may be another worker's now, so
	// the handler must not run on it.
	if b.wait() <= 0 {
		if err := b.beat(); errors.Is(err, ErrLeaseLost) {
			q.work.leaseLost.Add(1)
			q.opts.Logger.Warn("walq: work: the lease ended while it waited for the disk; the handler is not called",
				"id", m.ID, "attempt", m.Attempt, "receipt", m.Receipt.String())
			return result{leaseLost: true}
		}
	}
	done := make(chan error, 1) // the handler goroutine never blocks
	go w.call(ctx, m, done)
	for {
		select {
		case res.err = <-done:
			return res
		case <-heartbeat:
			err := b.beat()
			switch {
			case err == nil:
			case errors.Is(err, ErrLeaseLost):
				q.work.leaseLost.Add(1)
				q.opts.Logger.Warn("walq: work: heartbeat found the lease lost; cancelling the handler",
					"id", m.ID, "attempt", m.Attempt, "receipt", m.Receipt)
				res.leaseLost = true
				heartbeat = nil
				interrupt(err)
			default:
				heartbeat = nil
				w.fail(err)
				interrupt(err)
			}
		case <-timeout:
			q.work.timeouts.Add(1)
			interrupt(&timeoutError{after: w.opts.Timeout})
		case <-stop:
			interrupt(w.stopCause)
		case <-failed:
			heartbeat, failed = nil, nil
			w.fail(q.failErr)
			interrupt(q.failErr)
		case <-grace:
			grace = nil
			if !w.mayAbandon() {
				q.opts.Logger.Warn("walq: work: handler ignores its cancelled context; WorkOptions.MaxAbandoned reached, its worker waits for it",
					"id", m.ID, "attempt", m.Attempt, "cancelled", res.cancelled, "max_abandoned", w.opts.MaxAbandoned)
				continue
			}
			q.work.abandoned.Add(1)
			q.work.abandonedRunning.Add(1)
			res.abandoned = true
			if res.leaseLost || q.failure() != nil {
				// Nothing to keep: the item is not this worker's any more.
				go w.drop(m, done)
				return res
			}
			q.opts.Logger.Warn("walq: work: handler ignores its cancelled context; abandoned, its worker goes on and its item stays leased until it returns",
				"id", m.ID, "attempt", m.Attempt, "cancelled", res.cancelled, "grace", w.opts.Grace)
			kept = true
			go w.keep(m, res, b, cancel, done)
			return res
		}
	}
}

// mayAbandon takes one of the MaxAbandoned places, if one is free.
func (w *workRun) mayAbandon() bool {
	if w.opts.MaxAbandoned < 0 {
		return false
	}
	if w.abandoned.Add(1) > int64(w.opts.MaxAbandoned) {
		w.abandoned.Add(-1)
		return false
	}
	return true
}

// returned gives back the place of an abandoned handler that returned.
func (w *workRun) returned() {
	w.abandoned.Add(-1)
	w.q.work.abandonedRunning.Add(-1)
}

// keep watches an abandoned handler: it goes on extending the item's lease
// until the handler returns, then settles the item with its result, so the
// item is never delivered again while the handler lives (short of a lease
// the heartbeat cannot keep, see the README). It stops at Close or when the
// queue fails.
func (w *workRun) keep(m Message, res result, b *beater, cancel context.CancelCauseFunc, done <-chan error) {
	q := w.q
	start := q.clock.Monotonic()
	defer func() {
		b.timer.Stop()
		cancel(nil)
	}()
	heartbeat := b.timer.C()
	for {
		select {
		case res.err = <-done:
			q.opts.Logger.Info("walq: work: abandoned handler returned", "id", m.ID, "attempt", m.Attempt,
				"err", res.err, "ran_after_abandon", q.clock.Monotonic()-start)
			w.returned()
			// No next lease: a keeper has no worker to hand one to.
			if _, _, err := w.settleWith(m, res, false); err != nil {
				q.opts.Logger.Warn("walq: work: could not settle an abandoned handler's item", "id", m.ID, "err", err)
			}
			return
		case <-heartbeat:
			if err := b.beat(); err != nil {
				if errors.Is(err, ErrLeaseLost) {
					q.work.leaseLost.Add(1)
				}
				q.opts.Logger.Warn("walq: work: an abandoned handler's lease could not be kept", "id", m.ID, "err", err)
				go w.drop(m, done)
				return
			}
		case <-q.done:
			go w.drop(m, done)
			return
		case <-q.failed:
			go w.drop(m, done)
			return
		}
	}
}

// drop waits for a handler whose item is no longer its worker's and logs
// what it returns.
func (w *workRun) drop(m Message, done <-chan error) {
	err := <-done
	w.returned()
	w.q.opts.Logger.Info("walq: work: abandoned handler returned; its result is dropped",
		"id", m.ID, "attempt", m.Attempt, "err", err)
}

// call runs the handler, turning a panic (or runtime.Goexit) into an error,
// and hands the result on done.
func (w *workRun) call(ctx context.Context, m Message, done chan<- error) {
	var err error
	returned := false
	defer func() {
		if !returned {
			if p := recover(); p != nil {
				err = &panicError{value: p, stack: trimStack(debug.Stack())}
			} else {
				err = errors.New("walq: handler called runtime.Goexit")
			}
		}
		done <- err
	}()
	err = w.handler(ctx, m)
	returned = true
}

// settle reports a handler's outcome to the queue. After an ack, while Work
// still takes items, it leases the worker's next item in the same step, so
// both share one fsync wait; ok reports whether it did. An abandoned
// handler's item is left to its keeper.
func (w *workRun) settle(m Message, res result) (next Message, ok bool, err error) {
	if res.abandoned {
		return Message{}, false, nil
	}
	return w.settleWith(m, res, w.take.Err() == nil)
}

func (w *workRun) settleWith(m Message, res result, leaseNext bool) (next Message, ok bool, err error) {
	q := w.q
	log := q.opts.Logger
	var panicked *panicError
	switch {
	case res.err == nil:
	case errors.As(res.err, &panicked):
		q.work.panics.Add(1)
		log.Error("walq: work: handler panicked", "id", m.ID, "attempt", m.Attempt, "panic", fmt.Sprint(panicked.value))
	default:
		q.work.handlerErrors.Add(1)
		log.Info("walq: work: handler failed", "id", m.ID, "attempt", m.Attempt, "err", res.err)
	}
	if res.leaseLost {
		log.Info("walq: work: result dropped: the lease was lost", "id", m.ID, "attempt", m.Attempt, "err", res.err)
		return Message{}, false, nil
	}
	cause := res.err
	if res.cancelled != nil && cause != nil {
		cause = fmt.Errorf("%w: %w", res.cancelled, cause)
	}
	var endErr error
	switch {
	case res.err == nil && leaseNext:
		next, ok, endErr, err = q.ackAndLease(m.Receipt)
		if err != nil {
			return Message{}, false, err
		}
	case res.err == nil:
		endErr = q.Ack(m.Receipt)
	case IsPermanent(res.err):
		endErr = q.DeadLetter(m.Receipt, cause)
	default:
		endErr = q.Nack(m.Receipt, cause)
	}
	if errors.Is(endErr, ErrLeaseLost) {
		log.Warn("walq: work: late ack: the lease ended before the handler did; the item may have run twice",
			"id", m.ID, "attempt", m.Attempt, "err", endErr)
		endErr = nil
	}
	return next, ok, endErr
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
		q.mu.Unlock()
		return Message{}, false, nil, ackErr
	}
	next, leaseCommit, err := q.leaseLocked()
	q.mu.Unlock()
	if err != nil {
		return Message{}, false, nil, err
	}
	if leaseCommit != nil {
		commit, ok = leaseCommit, true
	}
	if commit != nil {
		if err := q.wait(commit); err != nil {
			return Message{}, false, nil, err
		}
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

// itemContext is a handler's context: cancelled by Work with a cause, and
// carrying the deadline of WorkOptions.Timeout on the queue's clock (which
// context.WithDeadline cannot: it runs on the system clock).
type itemContext struct {
	context.Context // from context.WithCancelCause
	deadline        time.Time
}

func (c *itemContext) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

// Err is context.DeadlineExceeded once the timeout cancelled the context,
// as for a context with a deadline.
func (c *itemContext) Err() error {
	err := c.Context.Err()
	var te *timeoutError
	if err != nil && errors.As(context.Cause(c.Context), &te) {
		return context.DeadlineExceeded
	}
	return err
}

// timeoutError is the cause of a handler context cancelled at
// WorkOptions.Timeout.
type timeoutError struct {
	after time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("walq: handler timed out after %v", e.after)
}
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// panicError is a handler panic, with the stack from the panicking frame
// down, cut to maxPanicStack bytes.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack) }

// trimStack drops the frames of the recovery itself (everything up to the
// runtime's panic frame) and cuts the rest at a line end.
func trimStack(stack []byte) []byte {
	if i := bytes.Index(stack, []byte("\npanic(")); i >= 0 {
		rest := stack[i+1:]
		// Skip the panic frame: its function line and its file line.
		for range 2 {
			if j := bytes.IndexByte(rest, '\n'); j >= 0 {
				rest = rest[j+1:]
			}
		}
		stack = rest
	}
	if len(stack) > maxPanicStack {
		cut := stack[:maxPanicStack]
		if j := bytes.LastIndexByte(cut, '\n'); j > 0 {
			cut = cut[:j]
		}
		stack = append(cut[:len(cut):len(cut)], "\n…"...)
	}
	return bytes.TrimRight(stack, "\n")
}
