package walq

import "fmt"

// waiterList is the FIFO of Gets waiting for an item; it lives under the
// sequencer's lock. A waiter's channel has room for one signal. A waiter
// leaves the list when it is signalled (wake removes it) and on every other
// way its Get returns (Get removes it); a waiter that was signalled but
// gives up passes the signal on, so no leasable item is left with a waiter
// asleep.
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
			l.list[i] = nil
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

// wakeLocked wakes rt's consumers for what its queue can lease now: as
// many blocked Gets as it has items to lease beyond those already signalled
// and not yet back, and every WorkQueues watch when it has any. It is the
// one place that wakes consumers. appendToLocked calls it for every queue
// a record changes (a put, an ended lease, a delete, a resume, new
// settings, a move), so whatever a record makes leasable wakes who waits
// for it, records added later included; tick calls it for the queues whose
// delayed items came due or whose pause ended; and a Get that gives up
// after it was signalled passes its signal on through it.
//
// The invariant it keeps, checked by tests: while a Get waits on a queue,
// the queue has no more items to lease than Gets signalled for them.
func (q *Queue) wakeLocked(rt *queueRT, now int64) {
	if rt == nil || rt.gone || (rt.waiters.len() == 0 && len(rt.watchers) == 0) {
		return
	}
	n := q.leasableLocked(rt, now)
	if n == 0 {
		return
	}
	if w := min(n-rt.woken, rt.waiters.len()); w > 0 {
		rt.waiters.wake(w)
		rt.woken += w
		q.metrics.wakes.Add(uint64(w))
	}
	rt.signalWatchersLocked()
}

// signalAllWatchersLocked signals the watches of every queue of the
// directory: it stopped serving (closed or failed).
func (d *directory) signalAllWatchersLocked() {
	for _, rt := range d.rts {
		rt.signalWatchersLocked()
	}
}

// signalWatchersLocked tells every WorkQueues watch of rt that its queue
// changed: it can lease, or it was deleted, or it stopped serving.
func (rt *queueRT) signalWatchersLocked() {
	for _, w := range rt.watchers {
		if w.fn != nil {
			w.fn()
			continue
		}
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// leasableLocked is how many items a Get on rt's queue could lease at now:
// its ready items, within its cap on leases in flight; none while it is
// paused. It moves nothing: a record promotes what it made due
// (appendToLocked), and the timer what came due since (tick), before they
// wake anyone.
func (q *Queue) leasableLocked(rt *queueRT, now int64) int {
	qs := q.st.Queue(rt.id)
	if qs == nil || qs.Paused(now) {
		return 0
	}
	n := qs.ReadyLen()
	if c := rt.set.maxInFlight; c > 0 {
		n = min(n, c-qs.Leased())
	}
	return max(n, 0)
}

// stuckLocked reports a queue of the directory on which a Get waits while
// the queue has more items to lease than Gets signalled for them: a
// consumer stalled with work ready, which wakeLocked exists to prevent.
// Tests call it after every step ("" means none).
func (q *Queue) stuckLocked(now int64) string {
	for _, rt := range q.rts {
		if rt.waiters.len() == 0 {
			continue
		}
		q.promoteLocked(rt.id, now) // what the timer would move next
		if n := q.leasableLocked(rt, now); n > rt.woken {
			return fmt.Sprintf("%s: %d Gets wait, %d items can be leased, %d Gets were signalled", rt.label(), rt.waiters.len(), n, rt.woken)
		}
	}
	return ""
}
