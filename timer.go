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
	if q.waiters.len() > 0 {
		if t, ok := q.st.NextDue(); ok {
			at = min(at, t)
		}
	}
	if t, ok := q.st.NextKeyRelease(); ok {
		end := t + int64(q.opts.KeyWindow)
		at = min(at, end+keyPruneStep-1-(end+keyPruneStep-1)%keyPruneStep)
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
			if _, _, err := q.appendLocked(q.endRecordLocked(state.TypeExpire, it, now, "lease expired")); err != nil {
				return
			}
		}
	}
	if q.discardPassedLocked(now) != nil {
		return
	}
	// Keys past their window no longer hold (KeyHolder applies the window);
	// forgetting them only frees memory, so it needs no record.
	q.st.PruneKeys(now, int64(q.opts.KeyWindow))
	if n := q.waiters.len(); n > 0 {
		q.st.Promote(now)
		q.waiters.wake(min(n, q.st.Gauges().Ready))
	}
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
