package walq

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/walq/walq/wal"
)

// Source is an Engine that WorkQueues can serve beside others from one pool
// of workers: it leases without blocking, and says when leasing may have
// become possible. *Queue is a Source.
type Source interface {
	Engine
	// TryGet leases the next ready item if there is one; it never blocks
	// for an item.
	TryGet() (Message, bool, error)
	// Watch returns a channel that receives a value after any change that
	// may let TryGet lease (a put, a redrive, a lease ended under a cap, a
	// resume, a delayed item or the end of a pause come due), and a
	// function that stops the watch. A signal may find nothing; none is
	// missed: a change after a TryGet that found nothing signals the
	// channel (which holds one signal).
	Watch() (<-chan struct{}, func())
}

// Watch implements Source: the channel receives a value after each change
// that may let TryGet lease. Stop the watch when done with it.
func (q *Queue) Watch() (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1)}
	return w.ch, q.watch(w)
}

// watchFunc is Watch with fn called instead of a signal sent, under the
// queue's lock, at the change itself: a WorkQueues pool over thousands of
// queues learns which one changed, in order with what the change's caller
// does next, without a channel per queue to look at. fn must not block
// or call the queue.
func (q *Queue) watchFunc(fn func()) func() {
	return q.watch(&watcher{fn: fn})
}

func (q *Queue) watch(w *watcher) func() {
	q.mu.Lock()
	rt := q.rt
	rt.watchers = append(rt.watchers, w)
	q.kickLocked(q.changedWakeLocked(rt.id)) // a watcher makes pause ends count
	q.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			for i, x := range rt.watchers {
				if x == w {
					rt.watchers = append(rt.watchers[:i], rt.watchers[i+1:]...)
					break
				}
			}
			q.mu.Unlock()
		})
	}
}

// WorkQueue is one queue that WorkQueues serves.
type WorkQueue struct {
	Queue Source
	// Reserved is how many workers serve only this queue [0]: whatever the
	// other queues hold, and however long their handlers run, an item put
	// here starts as soon as one of them is free.
	Reserved int
	// Weight is the queue's share of the shared workers [1]: over the
	// queues that have an item to lease (ready, not paused, under their
	// cap), shared workers go to each in proportion to its weight (stride
	// scheduling). Ignored under WorkOptions.StrictOrder.
	Weight int
}

// WorkQueues runs handler on the items of several queues (of one directory
// or of any Sources) from one pool: each queue's reserved workers, and
// shared workers that go to any queue. A shared worker that is free takes
// an item from a queue that has one, by weight, or under
// WorkOptions.StrictOrder from the first queue in the list that has one:
// no worker is idle while a queue it may serve has an item it can lease.
// Each item runs as under Work (timeout, heartbeat by its own queue's
// Visibility, ack, nack, dead letter, drain), with the options of opts.
//
// A queue that is deleted while WorkQueues serves it is dropped, and the
// others go on; WorkQueues returns an error wrapping ErrQueueDeleted once
// every queue is gone. Any other error of a queue (closed, failed) stops
// it as Work stops. It returns nil when ctx ends and the handlers have
// drained.
//
// Unlike Work it leases each item in its own step, after the previous
// item's ack, so that every free worker chooses its queue anew; the ack
// is appended before the next lease and shares its fsync, as under Work,
// and the leases of one dispatch round (the free workers given items at
// once) share theirs.
func WorkQueues(ctx context.Context, queues []WorkQueue, shared int, handler func(context.Context, Message) error, opts WorkOptions) error {
	if len(queues) == 0 {
		return fmt.Errorf("%w: WorkQueues with no queue", ErrInvalid)
	}
	if shared < 0 {
		return fmt.Errorf("%w: WorkQueues with %d shared workers", ErrInvalid, shared)
	}
	workers := shared
	for i, wq := range queues {
		switch {
		case wq.Queue == nil:
			return fmt.Errorf("%w: WorkQueues: queue %d is nil", ErrInvalid, i)
		case wq.Reserved < 0:
			return fmt.Errorf("%w: WorkQueues: queue %d has %d reserved workers", ErrInvalid, i, wq.Reserved)
		case wq.Weight < 0:
			return fmt.Errorf("%w: WorkQueues: queue %d has weight %d", ErrInvalid, i, wq.Weight)
		case wq.Reserved == 0 && shared == 0:
			return fmt.Errorf("%w: WorkQueues: queue %d has no reserved worker and there is no shared one", ErrInvalid, i)
		}
		for j := range i {
			if sameSource(queues[j].Queue, wq.Queue) {
				return fmt.Errorf("%w: WorkQueues: queue %d is also queue %d", ErrInvalid, i, j)
			}
		}
		workers += wq.Reserved
	}
	take, stopTaking := context.WithCancelCause(ctx)
	defer stopTaking(nil)
	p := &pool{
		take:   take,
		strict: opts.StrictOrder,
		shared: shared,
		done:   make(chan slotDone, workers),
	}
	for i, wq := range queues {
		o := opts
		if q, ok := wq.Queue.(*Queue); ok {
			// As Queue.Work: the queue's logger and its own counters.
			if o.Logger == nil {
				o.Logger = q.opts.Logger
			}
			if o.Counters == nil {
				o.Counters = &q.rt.work
			}
		}
		// Each queue's run has its own take under the pool's, so that a
		// queue deleted under a running handler stops that queue alone.
		qtake, qstop := context.WithCancelCause(take)
		defer qstop(nil)
		w, err := newWorkRun(ctx, qtake, qstop, wq.Queue, workers, handler, o)
		if err != nil {
			return fmt.Errorf("WorkQueues: queue %d: %w", i, err)
		}
		if i > 0 {
			// MaxAbandoned bounds the pool's abandoned handlers, whatever
			// their queues.
			w.abandoned = p.qs[0].run.abandoned
		}
		weight := wq.Weight
		if weight == 0 {
			weight = 1
		}
		pq := &poolQueue{idx: i, src: wq.Queue, run: w, reserved: wq.Reserved, stride: max(strideUnit/uint64(weight), 1), pos: -1}
		p.qs = append(p.qs, pq)
		if wq.Reserved > 0 {
			p.withRes = append(p.withRes, pq)
		}
	}
	return p.serve(p.qs[0].run.opts.DrainTimeout)
}

// sameSource says whether a and b are one queue: the same Source, or two
// handles of one walq queue (which would double its share).
func sameSource(a, b Source) bool {
	if a == b {
		return true
	}
	qa, ok := a.(*Queue)
	qb, ok2 := b.(*Queue)
	return ok && ok2 && qa.rt == qb.rt
}

// pool is one call of WorkQueues. Only serve's goroutine touches it, but
// for sig.
type pool struct {
	take    context.Context
	strict  bool
	shared  int // free shared workers
	qs      []*poolQueue
	withRes []*poolQueue // the queues with reserved workers
	done    chan slotDone
	running int
	gone    int   // queues deleted
	err     error // what stops the pool

	acks sync.WaitGroup // the waits of acks whose workers are free
	late lateErrors

	// sig collects the queues whose watch fired; ready holds the queues
	// a shared worker may try (not empty, not gone), in the order pick
	// takes them: by index under strict order, else by pass (stride
	// scheduling), so that a dispatch costs O(log n) of the queues, not a
	// look at each.
	sig   signals
	ready readyHeap
	vtime uint64 // the pass of the queue picked last: where a queue that comes back starts
}

type poolQueue struct {
	idx      int
	src      Source
	run      *workRun
	reserved int    // free reserved workers
	stride   uint64 // strideUnit / weight
	pass     uint64 // stride scheduling: picked when least; grows by stride per lease
	pos      int    // index in the ready heap, -1 when not in it
	empty    bool   // the last TryGet found nothing, and no watch fired since
	gone     bool   // deleted: no longer served
	stop     func() // ends the watch
}

// strideUnit is the pass a queue of weight 1 pays per lease: small
// enough that passes take 2^43 leases to reach rebaseAt, large enough
// that weights up to a million keep their proportions within a percent.
const strideUnit = 1 << 20

// rebaseAt is the pass past which every pass is taken down by the
// smallest, so that none overflows in a pool that runs for years.
const rebaseAt = 1 << 62

type slotDone struct {
	q        *poolQueue
	reserved bool
	err      error
}

// signals gathers which queues' watches fired since serve last looked.
type signals struct {
	mu      sync.Mutex
	pending []int
	marked  []bool
	wake    chan struct{} // holds one signal: something is pending
}

func (s *signals) mark(i int) {
	s.mu.Lock()
	if !s.marked[i] {
		s.marked[i] = true
		s.pending = append(s.pending, i)
	}
	s.mu.Unlock()
	s.poke()
}

// poke wakes serve without marking a queue.
func (s *signals) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// takeAll returns the queues marked since the last call, into buf.
func (s *signals) takeAll(buf []int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = append(buf[:0], s.pending...)
	for _, i := range s.pending {
		s.marked[i] = false
	}
	s.pending = s.pending[:0]
	return buf
}

func (p *pool) serve(drainTimeout time.Duration) error {
	// A walq Queue calls the pool back at each change, under its lock, so
	// a change made before a slot came free (a handler that puts into a
	// higher queue, then returns) is marked before the slot is; another
	// Source's watch channel is forwarded by a goroutine of its own.
	p.sig.marked = make([]bool, len(p.qs))
	p.sig.wake = make(chan struct{}, 1)
	quit := make(chan struct{})
	var forwarders sync.WaitGroup
	for _, q := range p.qs {
		i := q.idx
		if wq, ok := q.src.(*Queue); ok {
			q.stop = wq.watchFunc(func() { p.sig.mark(i) })
			continue
		}
		watch, stop := q.src.Watch()
		q.stop = stop
		forwarders.Go(func() {
			for {
				select {
				case <-watch:
					p.sig.mark(i)
				case <-quit:
					return
				}
			}
		})
	}
	defer func() {
		close(quit)
		forwarders.Wait()
		for _, q := range p.qs {
			q.stop()
		}
	}()
	for _, q := range p.qs {
		p.setReady(q)
	}
	var marked []int
	for p.take.Err() == nil && p.err == nil {
		p.takeLate()
		marked = p.sig.takeAll(marked)
		for _, i := range marked {
			q := p.qs[i]
			q.empty = false
			p.setReady(q)
		}
		p.dispatch()
		if p.err != nil || p.gone == len(p.qs) {
			break
		}
		select {
		case d := <-p.done:
			p.finished(d)
		case <-p.take.Done():
		case <-p.sig.wake:
		}
	}
	if p.err != nil {
		p.stopAll(p.err)
		for p.running > 0 {
			p.finished(<-p.done)
		}
		p.acks.Wait()
		return p.err
	}
	// No more leases: drain what runs, as Work does.
	if p.running > 0 {
		var expired <-chan time.Time
		if drainTimeout < 0 {
			p.stopAll(fmt.Errorf("walq: work stopped: %w", context.Cause(p.take)))
		} else {
			t := p.qs[0].run.clock.NewTimer(drainTimeout)
			defer t.Stop()
			expired = t.C()
		}
		for p.running > 0 {
			select {
			case d := <-p.done:
				p.finished(d)
			case <-expired:
				expired = nil
				p.stopAll(fmt.Errorf("walq: work stopped and its drain timeout (%v) passed: %w", drainTimeout, context.Cause(p.take)))
			}
		}
	}
	p.acks.Wait()
	p.takeLate()
	if p.err != nil {
		return p.err
	}
	if p.gone == len(p.qs) {
		return fmt.Errorf("%w: every queue WorkQueues served was deleted", ErrQueueDeleted)
	}
	return nil
}

// takeLate handles the failures of acks whose workers were free already.
func (p *pool) takeLate() {
	for _, d := range p.late.take() {
		p.failed(d.q, d.err)
	}
}

// setReady puts q in the ready heap if a shared worker may try it, and
// takes it out if not. A queue that comes back starts at the pass of the
// one picked last, so it does not take a run of items for its time away.
func (p *pool) setReady(q *poolQueue) {
	switch may := !q.empty && !q.gone; {
	case may && q.pos < 0:
		q.pass = max(q.pass, p.vtime)
		heap.Push(&p.ready, q)
	case !may && q.pos >= 0:
		heap.Remove(&p.ready, q.pos)
	}
}

func (p *pool) stopAll(cause error) {
	for _, q := range p.qs {
		q.run.stopAll(cause)
	}
}

// finished takes back the worker of a settled item.
func (p *pool) finished(d slotDone) {
	p.running--
	if d.reserved {
		d.q.reserved++
	} else {
		p.shared++
	}
	if d.err != nil {
		p.failed(d.q, d.err)
	}
}

// failed handles an error of queue q: a deleted queue is dropped, anything
// else stops the pool.
func (p *pool) failed(q *poolQueue, err error) {
	if errors.Is(err, ErrQueueDeleted) {
		if !q.gone {
			q.gone = true
			p.gone++
			p.setReady(q)
			q.run.log.Info("walq: work: queue deleted; no longer served", "err", err)
		}
		return
	}
	if p.err == nil {
		p.err = err
	}
}

// leasedItem is an item a dispatch round leased, whose lease may not be
// durable yet.
type leasedItem struct {
	q        *poolQueue
	l        leased
	commit   *wal.Commit
	reserved bool
}

// dispatch gives free workers items until none is free or no queue has
// one. The leases of one round share their fsyncs: each is taken without
// waiting, and the round waits once before any handler starts (a lease
// must be durable first, or a crash would not count its attempt).
func (p *pool) dispatch() {
	var round []leasedItem
	// Reserved workers first: they serve no one else, and a shared worker
	// that took their item would be missing elsewhere.
	for _, q := range p.withRes {
		for q.reserved > 0 && !q.empty && !q.gone && p.err == nil && p.take.Err() == nil {
			it, ok := p.lease(q, true)
			if !ok {
				break
			}
			round = append(round, it)
		}
	}
	for p.shared > 0 && p.err == nil && p.take.Err() == nil && p.ready.Len() > 0 {
		q := p.ready[0]
		if it, ok := p.lease(q, false); ok {
			round = append(round, it)
			if !p.strict {
				p.vtime = q.pass
				q.pass += q.stride
				heap.Fix(&p.ready, q.pos)
				if q.pass > rebaseAt {
					p.rebase()
				}
			}
		}
	}
	p.start(round)
}

// rebase takes every pass down by vtime (no pass in the heap is below it;
// one out of it keeps its place below, as 0), keeping their order.
func (p *pool) rebase() {
	for _, q := range p.qs {
		q.pass -= min(q.pass, p.vtime)
	}
	p.vtime = 0
}

// lease tries to lease an item of q; false when q had none (it leaves the
// ready heap until its watch fires) or failed.
func (p *pool) lease(q *poolQueue, reserved bool) (leasedItem, bool) {
	w := q.run
	called := w.clock.Monotonic()
	var m Message
	var ok bool
	var commit *wal.Commit
	var err error
	if wq, isQueue := q.src.(*Queue); isQueue {
		m, ok, commit, err = wq.tryLease()
	} else {
		m, ok, err = q.src.TryGet()
	}
	if err != nil {
		p.failed(q, err)
		if !q.gone {
			q.empty = true // a failure stops the pool; until then, not again
		}
		p.setReady(q)
		return leasedItem{}, false
	}
	if !ok {
		// Nothing to lease (a record that sent a bad body to the dead
		// letters may be pending: nothing here rests on it).
		q.empty = true
		p.setReady(q)
		return leasedItem{}, false
	}
	if reserved {
		q.reserved--
	} else {
		p.shared--
	}
	p.running++
	return leasedItem{q: q, l: w.leased(m, called), commit: commit, reserved: reserved}, true
}

// start runs each item of the round once its lease is durable, each in a
// goroutine of its own, so that serve goes on while the disk syncs. A
// lease whose wait fails gives its worker back; the failure stops the
// pool.
//
// A handler that returned frees its worker once its ack is appended (see
// settlePending): the lease serve gives the worker next is appended after
// the ack, and the two share an fsync, as Work's ack and next lease do.
// The ack's own wait runs on, counted in acks, and its failure reaches
// serve through late.
func (p *pool) start(round []leasedItem) {
	for _, it := range round {
		q, l, reserved, w := it.q, it.l, it.reserved, it.q.run
		go func() {
			if it.commit != nil {
				if err := q.src.(*Queue).wait(it.commit); err != nil {
					p.done <- slotDone{q: q, reserved: reserved, err: err}
					return
				}
			}
			res := w.run(l)
			var pending *wal.Commit
			var err error
			if !res.abandoned {
				pending, err = w.settlePending(l.m, res)
			}
			if pending == nil {
				p.done <- slotDone{q: q, reserved: reserved, err: err}
				return
			}
			p.acks.Add(1) // before the slot is free: serve waits for acks only once none runs
			p.done <- slotDone{q: q, reserved: reserved}
			if err := q.src.(*Queue).wait(pending); err != nil {
				p.late.add(q, err)
				p.sig.poke()
			}
			p.acks.Done()
		}()
	}
}

// settlePending is settleWith for WorkQueues: the ack of a walq Queue's
// item is appended and not waited for. The caller waits on pending (nil:
// nothing to wait for), after the pool has given the worker its next item,
// so that the ack shares the fsync of the leases appended after it.
func (w *workRun) settlePending(m Message, res result) (pending *wal.Commit, err error) {
	q, isQueue := w.e.(*Queue)
	if res.err != nil || res.leaseLost || !isQueue {
		_, _, err = w.settleWith(m, res, false)
		return nil, err
	}
	pending, err = q.ackPending(m.Receipt)
	return pending, w.lateAck(m, err)
}

// lateErrors are failures that came after their worker was free: an ack's
// wait that failed.
type lateErrors struct {
	mu   sync.Mutex
	errs []slotDone
}

func (l *lateErrors) add(q *poolQueue, err error) {
	l.mu.Lock()
	l.errs = append(l.errs, slotDone{q: q, err: err})
	l.mu.Unlock()
}

// take returns the failures added since the last call.
func (l *lateErrors) take() []slotDone {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := l.errs
	l.errs = nil
	return errs
}

// readyHeap orders the queues a shared worker may try: by index under
// strict order (the pool sets every pass to 0), else by pass, then index.
type readyHeap []*poolQueue

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return h[i].pass < h[j].pass
	}
	return h[i].idx < h[j].idx
}
func (h readyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *readyHeap) Push(x any) {
	q := x.(*poolQueue)
	q.pos = len(*h)
	*h = append(*h, q)
}
func (h *readyHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.pos = -1
	return q
}

var _ Source = (*Queue)(nil)
