package crashtest

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/walq/walq"
)

// steppedClock is the child's walq.Clock: the system clock whose wall
// reading is moved by an offset the child steps, back and forward, while
// the queue runs, as an administrator or NTP would. The monotonic reading
// and the timers stay true: a step moves the wall clock only.
//
// Now strips Go's monotonic reading from the times it returns, so that
// code comparing two Now readings sees the step, as code comparing two
// wall readings on a stepped machine would. The queue must not care: it
// reads the wall clock once, at Open, and to translate absolute times.
type steppedClock struct {
	offset atomic.Int64 // added to the wall clock, in nanoseconds
	// steps is odd while a step is under way and grows by two with each
	// one, as a seqlock's counter: a call that read the same even value
	// before and after itself saw no step.
	steps atomic.Uint64
}

var _ walq.Clock = (*steppedClock)(nil)

// monoStart is the origin of steppedClock's monotonic readings.
var monoStart = time.Now()

func newSteppedClock(offset time.Duration) *steppedClock {
	c := &steppedClock{}
	c.offset.Store(int64(offset))
	return c
}

func (c *steppedClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.offset.Load()))
}

func (c *steppedClock) Monotonic() time.Duration { return time.Since(monoStart) }

func (c *steppedClock) NewTimer(d time.Duration) walq.Timer { return sysTimer{time.NewTimer(d)} }

// step moves the wall clock by d and returns the new offset.
func (c *steppedClock) step(d time.Duration) time.Duration {
	c.steps.Add(1)
	defer c.steps.Add(1)
	return time.Duration(c.offset.Add(int64(d)))
}

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// Clock steps are between minStep and maxStep, either way; the offset
// stays within maxOffset of the true time so that runs of thousands of
// cycles do not wander off to years away.
const (
	minStep   = time.Second
	maxStep   = time.Hour
	maxOffset = 6 * time.Hour
)

// randomStep returns a step of minStep to maxStep, back or forward, that
// keeps offset+step within maxOffset; the magnitude is log-uniform, so
// small and large steps are about as common.
func randomStep(rng *rand.Rand, offset time.Duration) time.Duration {
	ratio := float64(maxStep) / float64(minStep)
	size := time.Duration(float64(minStep) * math.Pow(ratio, rng.Float64()))
	back := rng.IntN(2) == 0
	switch {
	case offset-size < -maxOffset:
		back = false
	case offset+size > maxOffset:
		back = true
	}
	if back {
		return -size
	}
	return size
}
