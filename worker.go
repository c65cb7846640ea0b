package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// WorkOptions configure Work. The zero value is a sane default; each
// field's default is given in brackets. All times run on the engine's
// clock (for a Queue, Options.Clock).
type WorkOptions struct {
	// Timeout is how long one handler call may run: its context is then
	// cancelled (Err is context.DeadlineExceeded), the heartbeat stops and
	// the item is nacked with the handler's error [5m]. Negative: no
	// timeout — a handler that hangs then keeps its item, through the
	// heartbeat, until Work stops.
	Timeout time.Duration
	// HeartbeatEvery is how often a running handler's lease is extended by
	// the engine's Visibility, counted from the start of the lease; it must
	// be shorter than the Visibility, and at least 1ms [Visibility/3]. Each
	// beat reads the Visibility in force: once a queue's settings make it
	// no longer than HeartbeatEvery, beats come every third of it.
	HeartbeatEvery time.Duration
	// Grace is how long a handler whose context Work cancelled (timeout,
	// lost lease, drain timeout) may take to return before Work abandons
	// it: its worker goes on with the next item while the handler runs on
	// in its goroutine, and its item stays leased, by the heartbeat, until
	// the handler returns; its result then settles the item as usual [the
	// smaller of HeartbeatEvery and 5s].
	Grace time.Duration
	// MaxAbandoned bounds the abandoned handlers of this Work call (of a
	// WorkQueues call, over all its queues) that have not returned yet. Past it, a worker whose handler ignores its
	// cancellation waits for it instead of starting another goroutine:
	// handlers hung on a dependency shrink the pool rather than pile up
	// [n, the number of workers]. Negative: never abandon.
	MaxAbandoned int
	// DrainTimeout is how long running handlers may go on after Work's
	// context ends; their contexts are cancelled then [10s]. Work returns
	// within DrainTimeout+Grace of its context ending. Negative: cancel them
	// at once.
	DrainTimeout time.Duration
	// Logger receives Work's reports: handler errors and panics, lost
	// leases, abandoned handlers [Queue.Work: the queue's Options.Logger;
	// Work: discarded].
	Logger *slog.Logger
	// StrictOrder makes WorkQueues give a free shared worker to the first
	// of its queues, in the order given, that has an item to lease, instead
	// of sharing the workers by weight. Work ignores it.
	StrictOrder bool
	// Counters counts what the handlers did; several Work calls may share
	// one [Queue.Work: the queue's own, shown in Stats().Work and by
	// NewCollector; Work: none].
	Counters *WorkCounters
}

const (
	defaultWorkTimeout  = 5 * time.Minute
	defaultDrainTimeout = 10 * time.Second
	maxDefaultGrace     = 5 * time.Second
	maxPanicStack       = 4 << 10
	// minHeartbeat is the shortest heartbeat interval Work accepts.
	minHeartbeat = time.Millisecond
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
	if o.HeartbeatEvery < minHeartbeat {
		// Each beat is a record in the log: a heartbeat every few
		// nanoseconds would spin and fill the disk.
		return bad("HeartbeatEvery", o.HeartbeatEvery, fmt.Sprintf("under %v (a visibility of %v is too short to run handlers under)", minHeartbeat, visibility))
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Counters == nil {
		o.Counters = new(WorkCounters)
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

// WorkCounters count what Work's handlers did (see WorkStats). The zero
// value is ready; it is safe for concurrent use, and every Work call given
// it adds to it. A Queue keeps one for its own Work calls.
type WorkCounters struct {
	handlerErrors    atomic.Uint64 // handler calls that returned an error (panics apart)
	panics           atomic.Uint64
	timeouts         atomic.Uint64 // handler contexts cancelled at WorkOptions.Timeout
	abandoned        atomic.Uint64
	abandonedRunning atomic.Int64  // abandoned handlers that have not returned yet
	leaseLost        atomic.Uint64 // heartbeats that found the lease gone
}

// Stats returns the counts so far.
func (c *WorkCounters) Stats() WorkStats {
	return WorkStats{
		HandlerErrors:    c.handlerErrors.Load(),
		Panics:           c.panics.Load(),
		Timeouts:         c.timeouts.Load(),
		Abandoned:        c.abandoned.Load(),
		AbandonedRunning: c.abandonedRunning.Load(),
		LeasesLost:       c.leaseLost.Load(),
	}
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
//
// Queue.Work is Work on the queue, logging to its Options.Logger and
// counting in its Stats().Work unless opts say otherwise.
func (q *Queue) Work(ctx context.Context, n int, handler func(context.Context, Message) error, opts WorkOptions) error {
	if opts.Logger == nil {
		opts.Logger = q.opts.Logger
	}
	if opts.Counters == nil {
		opts.Counters = &q.rt.work
	}
	return Work(ctx, q, n, handler, opts)
}

// Work runs handler on the items of any Engine with n workers until ctx
// ends, as Queue.Work does on a Queue. It uses only the Engine's methods;
// on a walq Queue it also finds its fast path (an ack and the next lease
// sharing one fsync wait, heartbeats that do not wait for the disk, and
// handlers cancelled at once when the queue fails). On another engine a
// worker acks, then calls Get, and a failure of the engine ends Work at
// the next call that returns it. A handler's lease is counted from the
// Message's LeaseEnd, and never from before Get was called nor after it
// returned, so the first heartbeat is never late.
func Work(ctx context.Context, e Engine, n int, handler func(context.Context, Message) error, opts WorkOptions) error {
	if n < 1 {
		return fmt.Errorf("%w: Work with %d workers", ErrInvalid, n)
	}
	take, stopTaking := context.WithCancelCause(ctx)
	defer stopTaking(nil)
	w, err := newWorkRun(ctx, take, stopTaking, e, n, handler, opts)
	if err != nil {
		return err
	}
	o := w.opts
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
	drain := w.clock.NewTimer(o.DrainTimeout)
	defer drain.Stop()
	select {
	case <-workersDone:
	case <-drain.C():
		w.stopAll(fmt.Errorf("walq: work stopped and its drain timeout (%v) passed: %w", o.DrainTimeout, context.Cause(take)))
		<-workersDone
	}
	return w.failure()
}

// newWorkRun checks the arguments of a Work call on e with n workers and
// makes its run; take is the context that ends when the run takes no more
// items, and stopTaking ends it.
func newWorkRun(ctx, take context.Context, stopTaking context.CancelCauseFunc, e Engine, n int, handler func(context.Context, Message) error, opts WorkOptions) (*workRun, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: Work on a nil Engine", ErrInvalid)
	}
	if handler == nil {
		return nil, fmt.Errorf("%w: Work with a nil handler", ErrInvalid)
	}
	vis := e.Visibility()
	if vis <= 0 {
		return nil, fmt.Errorf("%w: Work on an engine whose Visibility is %v", ErrInvalid, vis)
	}
	o, err := opts.withDefaults(vis, n)
	if err != nil {
		return nil, err
	}
	w := &workRun{
		e:          e,
		clock:      e.Clock(),
		vis:        vis,
		every:      opts.HeartbeatEvery,
		log:        o.Logger,
		cnt:        o.Counters,
		handler:    handler,
		opts:       o,
		base:       context.WithoutCancel(ctx),
		take:       take,
		stopTaking: stopTaking,
		stop:       make(chan struct{}),
		abandoned:  new(atomic.Int64),
	}
	if w.clock == nil {
		return nil, fmt.Errorf("%w: Work on an engine with a nil Clock", ErrInvalid)
	}
	if f, ok := e.(fastEngine); ok {
		w.fast = f
		w.failed, w.closed, w.deleted = f.stopped()
	}
	return w, nil
}

// workRun is one call of Work.
type workRun struct {
	e     Engine
	fast  fastEngine // e's fast path, when e is a walq Queue; nil otherwise
	clock Clock
	vis   time.Duration // the engine's Visibility when Work began
	// every is WorkOptions.HeartbeatEvery as given (0: a third of the
	// visibility in force at each beat).
	every time.Duration
	log   *slog.Logger
	cnt   *WorkCounters
	// failed and closed are closed when the engine fails or is closed, for
	// engines that say so (nil otherwise: never ready).
	failed, closed <-chan struct{}
	// deleted is closed when the engine's queue is deleted (a walq named
	// queue; nil otherwise): its leases are gone, its handlers cancelled.
	deleted <-chan struct{}

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

	abandoned *atomic.Int64 // abandoned handlers of this call still running (WorkQueues: of the pool); at most opts.MaxAbandoned
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
	var l leased
	have := false
	for {
		if !have {
			called := w.clock.Monotonic()
			m, err := w.e.Get(w.take)
			if err != nil {
				if w.take.Err() == nil {
					w.fail(err)
				}
				return
			}
			l = w.leased(m, called)
		}
		next, ok, err := w.settle(l.m, w.run(l))
		if err != nil {
			w.fail(err)
			return
		}
		l, have = next, ok
		if !have && w.take.Err() != nil {
			return
		}
	}
}

// leased is a Message with the start of its lease on the clock's monotonic
// scale: what the heartbeat counts from.
type leased struct {
	m     Message
	start time.Duration
	vis   time.Duration // what the lease was granted for, when the engine says (0: not known)
}

// beatPlan returns the visibility in force now and the heartbeat interval
// under it: the queue's settings may change while Work runs (SetSettings),
// and a shorter Visibility must not outrun the heartbeat of a lease taken
// under it. The interval is HeartbeatEvery when given and shorter than the
// visibility, otherwise a third of the visibility.
func (w *workRun) beatPlan() (vis, every time.Duration) {
	vis = w.e.Visibility()
	if vis <= 0 {
		vis = w.vis
	}
	return vis, w.interval(vis)
}

// interval is the heartbeat interval for a lease or extension of vis.
func (w *workRun) interval(vis time.Duration) time.Duration {
	every := w.every
	if every <= 0 || every >= vis {
		every = vis / 3
	}
	return max(every, minHeartbeat)
}

// leased dates m's lease on the clock's monotonic scale, kept within
// [called, now], the span of the call that leased it. On walq's own Queue
// (the fast path, on the queue's clock) the lease's end is known on that
// scale. On another engine it is LeaseEnd less the visibility, read against
// the wall clock now; a start after now can only be a wall clock set back
// in that span, and the lease is then dated from the call, the earliest it
// can be, so that the first heartbeat is never late. An engine that cannot
// tell (a zero LeaseEnd) is dated from the call too.
func (w *workRun) leased(m Message, called time.Duration) leased {
	now := w.clock.Monotonic()
	start := called
	switch vis, _ := w.beatPlan(); {
	case w.fast != nil && m.leaseEndMono != 0 && m.leaseVis > 0:
		start = m.leaseEndMono - m.leaseVis
	case !m.LeaseEnd.IsZero():
		if s := now - w.clock.Now().Sub(m.LeaseEnd.Add(-vis)); s <= now {
			start = s
		}
	}
	return leased{m: m, start: min(max(start, called), now), vis: m.leaseVis}
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
	lastStart time.Duration // monotonic reading at which the lease was last started or extended
	every     time.Duration // the interval for the lease or extension granted last (beatPlan)
}

func (w *workRun) newBeater(l leased) *beater {
	b := &beater{w: w, m: l.m, lastStart: l.start}
	// The first beat is planned from what the lease was granted: the
	// settings may have changed while the lease waited for its fsync, and
	// a raised visibility read now would plan it past the lease's end.
	if l.vis > 0 {
		b.every = w.interval(l.vis)
	} else {
		_, b.every = w.beatPlan()
	}
	b.timer = w.clock.NewTimer(time.Hour)
	resetTimer(b.timer, b.wait)
	return b
}

// wait is how long until the next beat is due.
func (b *beater) wait() time.Duration {
	return b.every - (b.w.clock.Monotonic() - b.lastStart)
}

// beat extends the lease and arms the next beat. It returns ErrLeaseLost
// (wrapped) when the lease has ended, and an engine error when the engine
// failed or closed.
func (b *beater) beat() error {
	w := b.w
	start := w.clock.Monotonic()
	// Extend by the visibility in force now, and come back within the
	// interval for that extension: the next beat is planned from what
	// this one granted, not from a visibility read later (a raised one
	// would plan the next beat past the end of this extension).
	vis, every := w.beatPlan()
	var err error
	if w.fast != nil {
		err = w.fast.heartbeat(b.m.Receipt, vis)
	} else {
		err = w.e.Extend(b.m.Receipt, vis)
	}
	if err != nil {
		return err
	}
	b.lastStart = start
	b.every = every
	resetTimer(b.timer, b.wait)
	return nil
}

// run calls the handler on m in its own goroutine and watches it: the
// heartbeat, the timeout, Work's stop, the queue's failure and the grace
// period. All its timers are stopped when it returns, unless it hands the
// handler to a keeper; the handler goroutine ends when the handler does.
func (w *workRun) run(l leased) result {
	m := l.m
	inner, cancel := context.WithCancelCause(w.base)
	ctx := &itemContext{Context: inner}

	var timeout <-chan time.Time
	if w.opts.Timeout > 0 {
		ctx.deadline = w.clock.Now().Add(w.opts.Timeout)
		t := w.clock.NewTimer(w.opts.Timeout)
		defer t.Stop()
		timeout = t.C()
	}
	b := w.newBeater(l)
	heartbeat := b.timer.C()
	stop := w.stop
	failed := w.failed
	deleted := w.deleted
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
		graceTimer = w.clock.NewTimer(w.opts.Grace)
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
			w.cnt.leaseLost.Add(1)
			w.log.Warn("walq: work: the lease ended while it waited for the disk; the handler is not called",
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
				w.cnt.leaseLost.Add(1)
				w.log.Warn("walq: work: heartbeat found the lease lost; cancelling the handler",
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
			w.cnt.timeouts.Add(1)
			interrupt(&timeoutError{after: w.opts.Timeout})
		case <-stop:
			interrupt(w.stopCause)
		case <-failed:
			heartbeat, failed = nil, nil
			err := w.fast.failure()
			w.fail(err)
			interrupt(err)
		case <-deleted:
			heartbeat, deleted = nil, nil
			err := fmt.Errorf("%w: the handler's item went with its queue", ErrQueueDeleted)
			res.leaseLost = true // nothing to settle: the item is gone
			w.fail(err)
			interrupt(err)
		case <-grace:
			grace = nil
			if !w.mayAbandon() {
				w.log.Warn("walq: work: handler ignores its cancelled context; WorkOptions.MaxAbandoned reached, its worker waits for it",
					"id", m.ID, "attempt", m.Attempt, "cancelled", res.cancelled, "max_abandoned", w.opts.MaxAbandoned)
				continue
			}
			w.cnt.abandoned.Add(1)
			w.cnt.abandonedRunning.Add(1)
			res.abandoned = true
			if res.leaseLost || w.engineFailed() {
				// Nothing to keep: the item is not this worker's any more.
				go w.drop(m, done)
				return res
			}
			w.log.Warn("walq: work: handler ignores its cancelled context; abandoned, its worker goes on and its item stays leased until it returns",
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
	w.cnt.abandonedRunning.Add(-1)
}

// engineFailed reports whether the engine has said it failed (only a walq
// Queue says so; other engines' failures show in the calls that return
// them).
func (w *workRun) engineFailed() bool {
	return w.fast != nil && w.fast.failure() != nil
}

// keep watches an abandoned handler: it goes on extending the item's lease
// until the handler returns, then settles the item with its result, so the
// item is never delivered again while the handler lives (short of a lease
// the heartbeat cannot keep, see docs/workers.md). It stops at Close or when the
// queue fails.
func (w *workRun) keep(m Message, res result, b *beater, cancel context.CancelCauseFunc, done <-chan error) {
	start := w.clock.Monotonic()
	defer func() {
		b.timer.Stop()
		cancel(nil)
	}()
	heartbeat := b.timer.C()
	for {
		select {
		case res.err = <-done:
			w.log.Info("walq: work: abandoned handler returned", "id", m.ID, "attempt", m.Attempt,
				"err", res.err, "ran_after_abandon", w.clock.Monotonic()-start)
			w.returned()
			// No next lease: a keeper has no worker to hand one to.
			if _, _, err := w.settleWith(m, res, false); err != nil {
				w.log.Warn("walq: work: could not settle an abandoned handler's item", "id", m.ID, "err", err)
			}
			return
		case <-heartbeat:
			if err := b.beat(); err != nil {
				if errors.Is(err, ErrLeaseLost) {
					w.cnt.leaseLost.Add(1)
				}
				w.log.Warn("walq: work: an abandoned handler's lease could not be kept", "id", m.ID, "err", err)
				go w.drop(m, done)
				return
			}
		case <-w.closed:
			go w.drop(m, done)
			return
		case <-w.deleted:
			go w.drop(m, done)
			return
		case <-w.failed:
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
	w.log.Info("walq: work: abandoned handler returned; its result is dropped",
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
func (w *workRun) settle(m Message, res result) (next leased, ok bool, err error) {
	if res.abandoned {
		return leased{}, false, nil
	}
	return w.settleWith(m, res, w.take.Err() == nil)
}

func (w *workRun) settleWith(m Message, res result, leaseNext bool) (next leased, ok bool, err error) {
	log := w.log
	var panicked *panicError
	switch {
	case res.err == nil:
	case errors.As(res.err, &panicked):
		w.cnt.panics.Add(1)
		log.Error("walq: work: handler panicked", "id", m.ID, "attempt", m.Attempt, "panic", fmt.Sprint(panicked.value))
	default:
		w.cnt.handlerErrors.Add(1)
		log.Info("walq: work: handler failed", "id", m.ID, "attempt", m.Attempt, "err", res.err)
	}
	if res.leaseLost {
		log.Info("walq: work: result dropped: the lease was lost", "id", m.ID, "attempt", m.Attempt, "err", res.err)
		return leased{}, false, nil
	}
	cause := res.err
	if res.cancelled != nil && cause != nil {
		cause = fmt.Errorf("%w: %w", res.cancelled, cause)
	}
	var endErr error
	switch {
	case res.err == nil && leaseNext && w.fast != nil:
		called := w.clock.Monotonic()
		var nm Message
		nm, ok, endErr, err = w.fast.ackAndLease(m.Receipt)
		if err != nil {
			return leased{}, false, err
		}
		if ok {
			next = w.leased(nm, called)
		}
	case res.err == nil:
		endErr = w.e.Ack(m.Receipt)
	case IsPermanent(res.err):
		endErr = w.e.DeadLetter(m.Receipt, cause)
	default:
		endErr = w.e.Nack(m.Receipt, cause)
	}
	return next, ok, w.lateAck(m, endErr)
}

// lateAck logs an ending refused for a lost lease, which is no failure of
// Work: the item was handed on, or its end came first.
func (w *workRun) lateAck(m Message, endErr error) error {
	if errors.Is(endErr, ErrLeaseLost) {
		w.log.Warn("walq: work: late ack: the lease ended before the handler did; the item may have run twice",
			"id", m.ID, "attempt", m.Attempt, "err", endErr)
		return nil
	}
	return endErr
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
