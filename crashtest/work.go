package crashtest

import (
	"context"
	"errors"
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
const (
	workHeartbeat = 20 * time.Millisecond
	workTimeout   = 2 * time.Second
)

// runningSet is the set of items whose Work handler is running, with the
// receipt it runs under.
type runningSet struct {
	mu sync.Mutex
	m  map[string]walq.Receipt
}

// start enters tok, or reports the receipt it already runs under.
func (s *runningSet) start(tok string, r walq.Receipt) (other walq.Receipt, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, running := s.m[tok]; running {
		return other, false
	}
	s.m[tok] = r
	return walq.Receipt{}, true
}

// end removes tok, if it runs under receipt r.
func (s *runningSet) end(tok string, r walq.Receipt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[tok] == r {
		delete(s.m, tok)
	}
}

func (s *runningSet) has(tok string) (walq.Receipt, bool) {
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
		c.rep.line("V item %s (id %d) started on a second worker as receipt %s while its handler of receipt %s runs and heartbeats",
			tok, m.ID, m.Receipt, other)
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
			c.rep.line("V item %s (id %d): Work's heartbeat lost the lease of receipt %s under a live handler after %v: %s",
				tok, m.ID, m.Receipt, time.Since(start).Round(time.Millisecond), oneLine(cause))
		}
		return context.Cause(ctx)
	}
	switch r := pick(100); {
	case r < c.mix.Ack:
		// Work acks once the handler returns: the ack is started, and the
		// report cannot say whether it landed.
		c.intent("ack %s %s", tok, m.Receipt)
		return nil
	case r < c.mix.Ack+c.mix.Nack:
		c.intent("nack %s %s", tok, m.Receipt)
		return errors.New("nack")
	default:
		c.intent("dead %s %s", tok, m.Receipt)
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
