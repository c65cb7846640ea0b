package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/walq/walq"
)

// Work under load. The child runs Mix.Workers workers of one q.Work call
// with a heartbeat much shorter than the visibility; Mix.Slow% of the
// handlers take longer than the visibility, so that only the heartbeat
// keeps their lease, and clock steps come at any moment. Each handler
// enters its item into the child's running set on entry and leaves it on
// return: an item delivered again (to a worker or to a plain consumer)
// while its first handler is still in the set is a second run while the
// first is alive and heartbeating, which the child reports with a V line.
// A handler whose heartbeat found its lease gone is reported too: nothing
// but a late heartbeat ends a live handler's lease here.
//
// The one case the README allows is a process that cannot extend the lease
// in time: stopped or starved for longer than Visibility - HeartbeatEvery.
// On a loaded machine (two cores, other processes on them) a child can be
// starved that long, so it watches itself: a goroutine sleeps a millisecond
// at a time and records each wake that came late by starveWatch or more.
// A lost lease or a second run is reported as a violation (V) unless the
// child was stalled for at least starveLimit while the handler lived; then
// it is reported as an S line, counted apart (Summary.Starved), with the
// stall it saw.
const (
	workHeartbeat = 20 * time.Millisecond
	workTimeout   = 2 * time.Second
	starveWatch   = 20 * time.Millisecond
	// starveLimit is Visibility - HeartbeatEvery, less 10 ms of slack
	// between the watchdog's wake and the heartbeat's.
	starveLimit = visibility - workHeartbeat - 10*time.Millisecond
)

// stallWatch records the recent stretches in which the child's goroutines
// could not run (as far as one sleeping goroutine can tell).
type stallWatch struct {
	mu     sync.Mutex
	stalls []stall // the last few hundred, oldest first
}

type stall struct{ from, to time.Time }

func (w *stallWatch) run() {
	for {
		t := time.Now()
		time.Sleep(time.Millisecond)
		if late := time.Since(t) - time.Millisecond; late >= starveWatch {
			w.mu.Lock()
			if len(w.stalls) == 512 {
				w.stalls = append(w.stalls[:0], w.stalls[256:]...)
			}
			w.stalls = append(w.stalls, stall{t, t.Add(late)})
			w.mu.Unlock()
		}
	}
}

// longest returns the longest stall that overlaps [from, to].
func (w *stallWatch) longest(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		if s.to.After(from) && s.from.Before(to) {
			d = max(d, s.to.Sub(s.from))
		}
	}
	return d
}

// workViolation reports what the child saw of a handler that started at
// start: a violation, or an S line when the child was starved meanwhile.
func (c *child) workViolation(start time.Time, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if d := c.stalls.longest(start.Add(-workHeartbeat), time.Now()); d >= starveLimit {
		c.rep.line("S %s (the child was stalled for %v meanwhile)", msg, d.Round(time.Millisecond))
		return
	}
	c.rep.line("V %s", msg)
}

// runningSet is the set of items whose Work handler is running, with the
// receipt it runs under and when it started.
type runningSet struct {
	mu sync.Mutex
	m  map[string]running
}

type running struct {
	receipt walq.Receipt
	start   time.Time
}

// start enters tok, or reports the handler it already runs in.
func (s *runningSet) start(tok string, r walq.Receipt) (other running, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, running := s.m[tok]; running {
		return other, false
	}
	s.m[tok] = running{r, time.Now()}
	return running{}, true
}

// end removes tok, if it runs under receipt r.
func (s *runningSet) end(tok string, r walq.Receipt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[tok].receipt == r {
		delete(s.m, tok)
	}
}

func (s *runningSet) has(tok string) (running, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[tok]
	return r, ok
}

// work runs the Work consumers until the kill.
func (c *child) work(rng *rand.Rand) {
	var mu sync.Mutex // rng is not safe for concurrent use
	pick := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(n)
	}
	handler := func(ctx context.Context, m walq.Message) error { return c.handle(ctx, m, pick) }
	err := c.q.Work(context.Background(), c.mix.Workers, handler,
		walq.WorkOptions{HeartbeatEvery: workHeartbeat, Timeout: workTimeout})
	c.fatal("work", err)
}

func (c *child) handle(ctx context.Context, m walq.Message, pick func(int) int) error {
	call := c.intent("work")
	tok := c.delivered(call, m)
	if other, ok := c.running.start(tok, m.Receipt); !ok {
		c.workViolation(other.start, "item %s (id %d) started on a second worker as receipt %d while its handler of receipt %d runs and heartbeats",
			tok, m.ID, m.Receipt, other.receipt)
	} else {
		defer c.running.end(tok, m.Receipt)
	}
	start := time.Now()
	run := time.Duration(pick(3000)) * time.Microsecond
	if pick(100) < c.mix.Slow {
		run = visibility + time.Duration(pick(int(visibility/time.Millisecond)))*time.Millisecond
	}
	select {
	case <-time.After(run):
	case <-ctx.Done():
		if cause := context.Cause(ctx); errors.Is(cause, walq.ErrLeaseLost) {
			c.workViolation(start, "item %s (id %d): Work's heartbeat lost the lease of receipt %d under a live handler after %v: %s",
				tok, m.ID, m.Receipt, time.Since(start).Round(time.Millisecond), oneLine(cause))
		}
		return context.Cause(ctx)
	}
	switch r := pick(100); {
	case r < c.mix.Ack:
		// Work acks once the handler returns: the ack is started, and the
		// report cannot say whether it landed.
		c.intent("ack %s %d", tok, m.Receipt)
		return nil
	case r < c.mix.Ack+c.mix.Nack:
		c.intent("nack %s %d", tok, m.Receipt)
		return errors.New("nack")
	default:
		c.intent("dead %s %d", tok, m.Receipt)
		return walq.Permanent(errors.New("poison"))
	}
}

// stepClock steps the child's wall clock, back or forward, every few
// milliseconds, and reports the new offset.
func (c *child) stepClock(rng *rand.Rand) {
	time.Sleep(5*time.Millisecond + randDuration(rng, 60*time.Millisecond))
	offset := c.clock.step(randomStep(rng, time.Duration(c.clock.offset.Load())))
	c.rep.line("C %d", int64(offset))
}
