package walq

import (
	"sync"
	"time"
)

// Clock is the queue's source of time. The zero Options use the system
// clock; tests pass a ManualClock so that leases, delays and deadlines run
// without sleeping.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped-or-running timer that sends on C when d has
	// passed, as time.NewTimer does.
	NewTimer(d time.Duration) Timer
}

// Timer is what Clock.NewTimer returns.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// ManualClock is a Clock that moves only when told to. Timers fire during
// the Advance call that reaches them. It is safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]struct{}
}

// NewManualClock returns a clock stopped at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, timers: make(map[*manualTimer]struct{})}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires the timers it passes
// (in no particular order).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	// Fire under the lock (the sends never block), so a timer stopped
	// after Advance returns cannot fire late.
	for t := range c.timers {
		if !t.at.After(c.now) {
			delete(c.timers, t)
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

// NewTimer returns a timer that fires once the clock reaches now+d.
func (c *ManualClock) NewTimer(d time.Duration) Timer {
	t := &manualTimer{clock: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Timers reports how many timers are waiting; tests use it to know that a
// goroutine has armed its timer before they advance the clock.
func (c *ManualClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type manualTimer struct {
	clock *ManualClock
	at    time.Time
	ch    chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, armed := t.clock.timers[t]
	delete(t.clock.timers, t)
	return armed
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	_, armed := t.clock.timers[t]
	t.at = t.clock.now.Add(d)
	fire := d <= 0
	if fire {
		delete(t.clock.timers, t)
	} else {
		t.clock.timers[t] = struct{}{}
	}
	if fire {
		select {
		case t.ch <- t.clock.now:
		default:
		}
	}
	t.clock.mu.Unlock()
	return armed
}
