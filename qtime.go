package walq

import (
	"fmt"
	"math"
	"time"
)

// queueTime is the queue's one time, in nanoseconds since the Unix epoch:
// the wall time read at Open, raised to the newest time in the log when the
// wall clock is behind it, plus the monotonic time elapsed since. Leases,
// fencing, timers, delays, deadlines, key windows, Work's heartbeats and
// Stats all read it, and nothing else in the queue reads the clock.
//
// So a wall clock stepped back or forward while the queue runs changes
// nothing (a lease lasts its visibility, a delay its delay); one stepped
// back across a restart does not stretch delays or key windows (queue time
// goes on from the log's newest time); and every time written to the log is
// at or after the one before it.
//
// Absolute times at the API are wall-clock times, translated by the offset
// between queue time and the wall clock at the moment of the call: a
// deadline given as "wall time t" means the same span from now in queue
// time, and a lease end reported in wall time is the span it has left
// counted from the wall clock's now. A clock once set far ahead and then
// corrected leaves an offset, not wrong deadlines.
type queueTime struct {
	clock Clock
	start int64         // queue time at open
	mono0 time.Duration // the clock's monotonic reading at open
}

func newQueueTime(c Clock, logTime int64) queueTime {
	mono := c.Monotonic()
	start := max(c.Now().UnixNano(), logTime)
	return queueTime{clock: c, start: start, mono0: mono}
}

// now returns the current queue time.
func (t queueTime) now() int64 {
	return t.start + int64(t.clock.Monotonic()-t.mono0)
}

// monotonic is queue time t on the clock's monotonic scale: exact, since
// queue time is counted on it.
func (t queueTime) monotonic(at int64) time.Duration {
	return t.mono0 + time.Duration(at-t.start)
}

// maxOffset bounds a translated span so that queue time plus it cannot
// overflow: twice the longest duration the queue adds to a time.
const maxOffset = 2 * MaxDuration

// offset is the wall clock minus queue time at one moment, for translating
// the times of one call consistently: the times of one Message translated by
// one offset are as far apart in wall time as they are in queue time.
type offset time.Duration

// offset reads the two clocks together. The wall reading is bracketed by
// two monotonic readings and taken to be at their midpoint; a wide bracket
// (the goroutine was preempted between the reads) is read again, so the
// error is at most half the tightest bracket of a few tries.
func (t queueTime) offset() offset {
	var best offset
	width := time.Duration(-1)
	for range 3 {
		m1 := t.clock.Monotonic()
		wall := t.clock.Now().UnixNano()
		m2 := t.clock.Monotonic()
		if w := m2 - m1; width < 0 || w < width {
			width = w
			mid := m1 + w/2
			best = offset(wall - (t.start + int64(mid-t.mono0)))
		}
		if width < time.Microsecond {
			break
		}
	}
	return best
}

// toWall translates a queue time to wall-clock time.
func (o offset) toWall(at int64) time.Time {
	if o > 0 && at > math.MaxInt64-int64(o) {
		return time.Unix(0, math.MaxInt64)
	}
	return time.Unix(0, at+int64(o))
}

// fromWall translates a wall-clock time to queue time: the same span from
// now, bounded so that it cannot overflow (a wall time beyond what an int64
// of nanoseconds holds saturates: as good as never).
func (t queueTime) fromWall(w time.Time) int64 {
	o := t.offset()
	now := t.now()
	d := int64(min(max(w.Sub(time.Unix(0, now+int64(o))), -maxOffset), maxOffset))
	if d > 0 && now > math.MaxInt64-d {
		return math.MaxInt64
	}
	return now + d
}

// Queue time must leave room for the longest span the queue adds to it
// (MaxDuration), in an int64 of nanoseconds since 1970: Open refuses a wall
// clock outside [minClock, maxClock] (the latter is in the year 2162).
var (
	minClock = time.Unix(0, 0)
	maxClock = time.Unix(0, math.MaxInt64-int64(MaxDuration))
)

// checkClock refuses a wall clock the queue cannot keep its times by.
func checkClock(c Clock) error {
	if now := c.Now(); now.Before(minClock) || now.After(maxClock) {
		return fmt.Errorf("%w: the clock reads %v; walq keeps times between %v and %v", ErrInvalid,
			now.UTC().Format(time.RFC3339), minClock.UTC().Format(time.RFC3339), maxClock.UTC().Format(time.RFC3339))
	}
	return nil
}

// toWall translates one queue time to wall-clock time; use one offset for
// several times that belong together.
func (t queueTime) toWall(at int64) time.Time {
	return t.offset().toWall(at)
}
