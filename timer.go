package walq

import (
	"math"
	"time"

	"github.com/walq/walq/state"
)

// keyPruneStep is the granularity of key pruning: the timer wakes for
// released keys at most once per step, and prunes every key whose window
// ended by then.
const keyPruneStep = int64(time.Second)

// timerLoop ends expired leases, discards items at their deadline, forgets
// keys whose window has ended and wakes blocked Gets when delayed items come
// due. It sleeps on one timer set to the earliest of those times; it never
// polls. It stops at Close and when the queue fails.
func (q *Queue) timerLoop() {
	defer q.wg.Done()
	timer := q.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
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

// armTimer sets timer to fire when queue time reaches at. A Timer counts its
// duration from the clock's reading when it is armed, so the duration is
// measured right before arming, and measured again if the clock moved by a
// millisecond or more meanwhile: a ManualClock advanced by a test between
// the reading and the arming would otherwise leave the timer late by the
// jump. A real clock moves by microseconds, so it arms once.
func (q *Queue) armTimer(timer Timer, at int64) {
	for {
		read := q.qt.now()
		timer.Reset(time.Duration(at - read))
		if q.qt.now()-read < int64(time.Millisecond) {
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
	// Due times and pause ends matter only to a queue someone waits on.
	for _, rt := range q.rts {
		qs := q.st.Queue(rt.id)
		if qs == nil || (rt.waiters.len() == 0 && len(rt.watchers) == 0) {
			continue // deleted (the record is applied before the runtime goes), or no one waits
		}
		if t, ok := qs.NextDue(); ok {
			at = min(at, t)
		}
		if u := qs.PausedUntil(); u != 0 && u != math.MaxInt64 {
			at = min(at, u)
		}
	}
	if t, queue, ok := q.st.NextKeyRelease(); ok {
		window := q.opts.KeyWindow
		if rt := q.rts[queue]; rt != nil {
			window = rt.set.keyWindow
		}
		// Keys are forgotten at the state's own time (see pruneKeysLocked):
		// until a record's time reaches the end of the window there is
		// nothing to do, and that record's kick comes back here.
		if end := t + int64(window); end <= q.st.LastTime() {
			at = min(at, end+keyPruneStep-1-(end+keyPruneStep-1)%keyPruneStep)
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
	for _, rt := range q.rts {
		n := rt.waiters.len()
		if n == 0 && len(rt.watchers) == 0 {
			continue
		}
		qs := q.st.Queue(rt.id)
		if qs == nil || qs.Paused(now) {
			continue
		}
		qs.Promote(now)
		if ready := qs.Gauges().Ready; ready > 0 {
			rt.changedLocked(min(n, ready))
		}
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
