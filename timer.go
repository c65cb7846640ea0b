package walq

import (
	"container/heap"
	"math"
	"time"

	"github.com/walq/walq/state"
)

// keyPruneStep is the granularity of key pruning: the timer wakes for
// released keys at most once per step, and prunes every key whose window
// ended by then.
const keyPruneStep = int64(time.Second)

// timerLoop ends expired leases, discards items at their deadline, forgets
// keys whose window has ended, makes delayed items ready when they come due
// and wakes blocked Gets when they do or when a pause ends. It sleeps on
// one timer set to the earliest of those times; it never polls. It stops at
// Close and when the queue fails.
func (q *Queue) timerLoop() {
	defer q.wg.Done()
	timer := q.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.metrics.timerWakes.Add(1)
		q.mu.Lock()
		at := q.nextWakeLocked()
		q.timerAt = at
		q.mu.Unlock()
		timer.Stop()
		select {
		case <-timer.C():
		default:
		}
		if at != math.MaxInt64 {
			q.armTimer(timer, at)
		}
		select {
		case <-timer.C():
			q.tick()
		case <-q.kick:
		case <-q.done:
			return
		case <-q.failed:
			return
		case <-q.log.Failed():
			q.fail(q.log.Err())
			return
		}
	}
}

// armTimer sets timer to fire when queue time reaches at.
func (q *Queue) armTimer(timer Timer, at int64) {
	resetTimer(timer, func() time.Duration { return time.Duration(at - q.qt.now()) })
}

// nextWakeLocked is when the timer loop must next run tick. Every time it
// counts is one that tick acts on and moves past: a lease end (tick ends the
// lease), a deadline (tick discards the item), a queue's next due time or
// the end of its pause (queueWakeLocked), a key's window (tick forgets it);
// so no time it returns stays in the past, and the loop never spins.
func (q *Queue) nextWakeLocked() int64 {
	return min(q.dirWakeLocked(), q.wakes.min())
}

// changedWakeLocked is nextWakeLocked for what a change to one queue can
// bring closer: the directory's times and that queue's own, in O(1) of
// the queues. It places the queue in the timer's order (wakes) at its
// time; the others keep theirs. A record, a Get that starts to wait and a
// watch call it, so the order is never later than a queue's time. It can
// be earlier (a Get that stopped waiting, a pause that ended): tick looks
// at the queue then, and places it again.
func (q *Queue) changedWakeLocked(queue uint64) int64 {
	at := q.dirWakeLocked()
	if rt := q.rts[queue]; rt != nil {
		q.placeWakeLocked(rt, q.qt.now())
		at = min(at, rt.wakeAt)
	} else if qs := q.st.Queue(queue); qs != nil {
		// Its runtime is made right after its creation record applies;
		// a queue just made has no time of its own.
		at = min(at, q.queueWakeLocked(qs, nil, q.qt.now()))
	}
	return at
}

// placeWakeLocked sets rt's place in the timer's order at its time now
// (none once its queue is gone).
func (q *Queue) placeWakeLocked(rt *queueRT, now int64) {
	at := int64(math.MaxInt64)
	if qs := q.st.Queue(rt.id); qs != nil && !rt.gone {
		at = q.queueWakeLocked(qs, rt, now)
	}
	q.wakes.set(rt, at)
}

// promoteLocked makes the items of queue that are due at now ready.
func (q *Queue) promoteLocked(queue uint64, now int64) {
	if qs := q.st.Queue(queue); qs != nil {
		qs.Promote(now)
	}
}

// dirWakeLocked is when the timer must next run for the directory as a
// whole: a lease end, a deadline, a key whose window ends.
func (q *Queue) dirWakeLocked() int64 {
	at := int64(math.MaxInt64)
	if t, ok := q.st.NextLeaseEnd(); ok {
		at = min(at, t)
	}
	if t, ok := q.st.NextDeadline(); ok {
		at = min(at, t)
	}
	// Keys are forgotten at the state's own time (see pruneKeysLocked):
	// until a record's time reaches the end of the window there is
	// nothing to do, and that record's kick comes back here.
	if end, _, ok := q.st.NextKeyExpiry(); ok && end <= q.st.LastTime() {
		at = min(at, end+keyPruneStep-1-(end+keyPruneStep-1)%keyPruneStep)
	}
	return at
}

// queueWakeLocked is when the timer must next look at the queue qs (rt is
// its runtime, nil when it has none): when its earliest delayed item comes
// due, to make it ready whether or not anyone waits (Stats and a reopen see
// it ready then), and, for a queue someone waits on, when its pause ends.
// tick promotes every due item and looks at a pause only while it lasts, so
// neither time can be in the past once tick has run.
func (q *Queue) queueWakeLocked(qs *state.QueueState, rt *queueRT, now int64) int64 {
	at := int64(math.MaxInt64)
	if t, ok := qs.NextDue(); ok {
		at = t
	}
	if rt != nil && (rt.waiters.len() > 0 || len(rt.watchers) > 0) && qs.Paused(now) {
		at = min(at, qs.PausedUntil()) // math.MaxInt64 until Resume, whose record wakes
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
	now := q.qt.now()
	for {
		expired := q.st.ExpiredLeases(now, 1024)
		if len(expired) == 0 {
			break
		}
		for _, it := range expired {
			if _, _, err := q.appendEndLocked(q.rts[it.Queue], state.TypeExpire, it, now, "lease expired"); err != nil {
				return
			}
		}
	}
	if q.discardPassedLocked(now) != nil {
		return
	}
	// Keys past their window no longer hold (KeyHolder applies the window);
	// forgetting them only frees memory, so it needs no record.
	q.pruneKeysLocked(now)
	// Delayed items come due whether or not anyone waits, paused or not;
	// then whoever waits on a queue that can lease is woken (a pause that
	// ended has no record to wake it). Only the queues whose time came are
	// visited: each leaves with a time after now (queueWakeLocked), so the
	// loop ends.
	for len(q.wakes) > 0 && q.wakes[0].wakeAt <= now {
		rt := q.wakes[0]
		q.metrics.timerVisits.Add(1)
		q.promoteLocked(rt.id, now)
		q.wakeLocked(rt, now)
		q.placeWakeLocked(rt, now)
	}
}

// pruneKeysLocked forgets the keys whose queue's window has ended by the
// state's own time, the newest time of its records, rather than by now:
// a snapshot is of the state, and a reopen with the wall clock behind
// resumes queue time at the log's newest time, where a key forgotten at
// now could still be within its window. A key whose window has passed is
// not held whether forgotten or not (KeyHolder applies the window at now);
// forgetting it only frees its memory, at the queue's next record.
func (q *Queue) pruneKeysLocked(now int64) {
	q.st.PruneKeysBy(min(now, q.st.LastTime()), func(queue uint64) int64 {
		if rt := q.rts[queue]; rt != nil {
			return int64(rt.set.keyWindow)
		}
		return int64(q.opts.KeyWindow)
	})
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

// wakeHeap orders the queues that have a time for the timer (queueWakeLocked)
// by that time, so that the timer loop reads the earliest and tick visits
// the queues whose time came, in O(log n) of the queues each, instead of a
// pass over every queue.
type wakeHeap []*queueRT

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].wakeAt < h[j].wakeAt }
func (h wakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].wakePos, h[j].wakePos = i, j
}

func (h *wakeHeap) Push(x any) {
	rt := x.(*queueRT)
	rt.wakePos = len(*h)
	*h = append(*h, rt)
}

func (h *wakeHeap) Pop() any {
	old := *h
	rt := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	rt.wakePos = -1
	return rt
}

// set gives rt the time at (math.MaxInt64: none, out of the heap).
func (h *wakeHeap) set(rt *queueRT, at int64) {
	switch {
	case rt.wakePos < 0:
		if at != math.MaxInt64 {
			rt.wakeAt = at
			heap.Push(h, rt)
		}
	case at == math.MaxInt64:
		heap.Remove(h, rt.wakePos)
		rt.wakeAt = at
	case at != rt.wakeAt:
		rt.wakeAt = at
		heap.Fix(h, rt.wakePos)
	}
}

// min is the earliest time of the heap (math.MaxInt64 when empty).
func (h wakeHeap) min() int64 {
	if len(h) == 0 {
		return math.MaxInt64
	}
	return h[0].wakeAt
}
