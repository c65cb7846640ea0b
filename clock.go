package walq

import (
	"sync"
	"time"
)

// Clock is where the queue reads time. It has two readings, as a computer
// does: the wall clock, which an administrator or NTP may step at any
// moment, and a monotonic clock, which only moves forward at a steady pace.
// The queue reads the wall clock once, at Open, and only the monotonic clock
// after that (see queueTime); the wall clock is read again only to translate
// absolute times at the API (WithDeadline, Message.LeaseEnd, EnqueuedAt).
//
// The zero Options use the system clock; tests pass a ManualClock, which can
// step the wall clock apart from the monotonic one.
type Clock interface {
	// Now returns the wall-clock time.
	Now() time.Time
	// Monotonic returns the monotonic clock's reading: only differences
	// between readings mean anything, and it never goes back.
	Monotonic() time.Duration
	// NewTimer returns a running timer that sends on C once d has passed on
	// the monotonic clock, as time.NewTimer does.
	NewTimer(d time.Duration) Timer
}

// Timer is what Clock.NewTimer returns.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// resetTimer arms timer to fire once left, which reads the clock, says
// nothing is left. A Timer counts its duration from the clock's reading
// when it is armed, so left is read right before arming, and read again if
// the clock moved by a millisecond or more meanwhile: a ManualClock advanced
// by a test between the reading and the arming would otherwise leave the
// timer late by the whole jump. A real clock moves by microseconds, so it
// arms once.
func resetTimer(timer Timer, left func() time.Duration) {
	for {
		d := left()
		timer.Reset(d)
		if d-left() < time.Millisecond {
			return
		}
	}
}

type systemClock struct{}

// monoOrigin is the origin of the system clock's monotonic readings; Go's
// time.Since measures with the monotonic reading time.Now carries.
var monoOrigin = time.Now()

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) Monotonic() time.Duration       { return time.Since(monoOrigin) }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// ManualClock is a Clock that moves only when told to: Advance moves both
// readings (time passes), StepWall moves the wall clock alone (an
// administrator or NTP stepped it). Timers run on the monotonic reading and
// fire during the Advance call that reaches them. It is safe for concurrent
// use.
type ManualClock struct {
	mu     sync.Mutex
	wall   time.Time
	mono   time.Duration
	timers map[*manualTimer]struct{}
}

// NewManualClock returns a clock stopped at wall time start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{wall: start, timers: make(map[*manualTimer]struct{})}
}

// Now returns the clock's wall time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Monotonic returns how far the clock has advanced since it was made.
func (c *ManualClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass (d >= 0): both readings move, and the timers it
// reaches fire (in no particular order).
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("walq: ManualClock.Advance with a negative duration; use StepWall to set the wall clock back")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.mono += d
	// Fire under the lock (the sends never block), so a timer stopped
	// after Advance returns cannot fire late.
	for t := range c.timers {
		if t.at <= c.mono {
			delete(c.timers, t)
			select {
			case t.ch <- c.wall:
			default:
			}
		}
	}
}

// StepWall sets the wall clock forward (d > 0) or back (d < 0) without any
// time passing: no timer fires and the monotonic reading stays.
func (c *ManualClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// NewTimer returns a timer that fires once d has passed.
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
	at    time.Duration // monotonic reading at which it fires
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
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	_, armed := c.timers[t]
	t.at = c.mono + d
	if d <= 0 {
		delete(c.timers, t)
		select {
		case t.ch <- c.wall:
		default:
		}
	} else {
		c.timers[t] = struct{}{}
	}
	return armed
}
