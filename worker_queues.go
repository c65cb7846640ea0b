package walq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
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
	q.mu.Lock()
	rt := q.rt
	rt.watchers = append(rt.watchers, w)
	q.kickLocked(q.changedWakeLocked(rt.id)) // a watcher makes pause ends count
	q.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
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
	// cap), shared workers go to each in proportion to its weight (smooth
	// weighted round-robin). Ignored under WorkOptions.StrictOrder.
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
// item's ack, so that every free worker chooses its queue anew: the ack and
// the next lease do not share an fsync.
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
			if queues[j].Queue == wq.Queue {
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
		weight := wq.Weight
		if weight == 0 {
			weight = 1
		}
		p.qs = append(p.qs, &poolQueue{src: wq.Queue, run: w, reserved: wq.Reserved, weight: weight})
	}
	return p.serve(p.qs[0].run.opts.DrainTimeout)
}

// pool is one call of WorkQueues. Only serve's goroutine touches it.
type pool struct {
	take    context.Context
	strict  bool
	shared  int // free shared workers
	qs      []*poolQueue
	done    chan slotDone
	running int
	err     error // what stops the pool
}

type poolQueue struct {
	src       Source
	run       *workRun
	reserved  int  // free reserved workers
	weight    int  // share of the shared workers
	current   int  // smooth weighted round-robin's running credit
	lastTotal int  // the total weight of the round that last picked it
	empty     bool // the last TryGet found nothing, and no watch fired since
	gone      bool // deleted: no longer served
	watch     <-chan struct{}
	stop      func() // ends the watch
}

type slotDone struct {
	q        *poolQueue
	reserved bool
	err      error
}

func (p *pool) serve(drainTimeout time.Duration) error {
	// The loop waits on the slots, the context and every queue's watch at
	// once; before each dispatch it takes the watches' signals without
	// waiting, so a change made before a slot came free (a handler that
	// puts into a higher queue, then returns) is seen by that dispatch.
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.done)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.take.Done())},
	}
	for _, q := range p.qs {
		q.watch, q.stop = q.src.Watch()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.watch)})
	}
	defer func() {
		for _, q := range p.qs {
			q.stop()
		}
	}()
	for p.take.Err() == nil && p.err == nil {
		for _, q := range p.qs {
			select {
			case <-q.watch:
				q.empty = false
			default:
			}
		}
		p.dispatch()
		if p.err != nil || p.allGone() {
			break
		}
		i, v, _ := reflect.Select(cases)
		switch {
		case i == 0:
			p.finished(v.Interface().(slotDone))
		case i >= 2:
			p.qs[i-2].empty = false
		}
	}
	if p.err != nil {
		p.stopAll(p.err)
		for p.running > 0 {
			p.finished(<-p.done)
		}
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
	if p.err != nil {
		return p.err
	}
	if p.allGone() {
		return fmt.Errorf("%w: every queue WorkQueues served was deleted", ErrQueueDeleted)
	}
	return nil
}

func (p *pool) allGone() bool {
	for _, q := range p.qs {
		if !q.gone {
			return false
		}
	}
	return true
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
			q.run.log.Info("walq: work: queue deleted; no longer served", "err", err)
		}
		return
	}
	if p.err == nil {
		p.err = err
	}
}

// dispatch gives free workers items until none is free or no queue has one.
func (p *pool) dispatch() {
	// Reserved workers first: they serve no one else, and a shared worker
	// that took their item would be missing elsewhere.
	for _, q := range p.qs {
		for q.reserved > 0 && p.eligible(q) && p.err == nil {
			if !p.lease(q, true) {
				break
			}
		}
	}
	for p.shared > 0 && p.err == nil && p.take.Err() == nil {
		q := p.pick()
		if q == nil {
			return
		}
		p.lease(q, false)
	}
}

func (p *pool) eligible(q *poolQueue) bool { return !q.empty && !q.gone && p.take.Err() == nil }

// pick chooses the queue the next shared worker tries: the first eligible
// one under strict order, else smooth weighted round-robin over the
// eligible ones (each gains its weight, the richest is chosen and pays the
// total). A choice whose TryGet finds nothing is undone by lease.
func (p *pool) pick() *poolQueue {
	var best *poolQueue
	total := 0
	for _, q := range p.qs {
		if !p.eligible(q) {
			continue
		}
		if p.strict {
			return q
		}
		q.current += q.weight
		total += q.weight
		if best == nil || q.current > best.current {
			best = q
		}
	}
	if best != nil {
		best.current -= total
		best.lastTotal = total
	}
	return best
}

// lease tries to lease an item of q and start it; false when q had none.
func (p *pool) lease(q *poolQueue, reserved bool) bool {
	w := q.run
	called := w.clock.Monotonic()
	m, ok, err := q.src.TryGet()
	if err != nil {
		p.unpick(q, reserved)
		p.failed(q, err)
		return false
	}
	if !ok {
		p.unpick(q, reserved)
		q.empty = true
		return false
	}
	l := w.leased(m, called)
	if reserved {
		q.reserved--
	} else {
		p.shared--
	}
	p.running++
	go func() {
		res := w.run(l)
		var err error
		if !res.abandoned {
			_, _, err = w.settleWith(l.m, res, false)
		}
		p.done <- slotDone{q: q, reserved: reserved, err: err}
	}()
	return true
}

// unpick undoes pick's round for a queue that had nothing, so that an
// empty queue does not pile up credit over the ones that deliver.
func (p *pool) unpick(q *poolQueue, reserved bool) {
	if reserved || p.strict {
		return
	}
	q.current += q.lastTotal
	for _, o := range p.qs {
		if p.eligible(o) {
			o.current -= o.weight
		}
	}
}

var _ Source = (*Queue)(nil)
