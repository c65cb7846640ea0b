package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/walq/walq"
)

// The consumer watch. walq wakes blocked consumers from one place and
// keeps an invariant that Stats shows from the outside: a Get waits on a
// queue only while the queue has no more items to lease (its ready ones,
// due ones included, within MaxInFlight; none while it is paused) than
// Gets were signalled for (Stats.Stalled). After time passes it may be
// broken for a moment, until the timer acts on a due time or the end of a
// pause, never for long. So the child reads the Stats of every queue it
// has open every consumerWatchEvery, and a queue whose reads all show a
// consumer stuck for consumerStallAfter or more, with nothing changed in
// between (ready, leased, signalled, delivered), is a stalled consumer:
// a V line naming the queue and its figures.
//
// A consumer is stuck when a Get waits while the queue can lease an item:
//
//   - Stats.Stalled: more items to lease than Gets signalled for them,
//     so no Get is on its way to some of them;
//   - or Gets were signalled for every one of them, but none comes back
//     for it (a signal given to a Get that is gone, which Stalled cannot
//     tell from one on its way): a signalled Get takes the queue's lock
//     and leases at once, and its coming back changes the figures.
//
// It cannot fire falsely:
//
//   - a queue paused is never stuck (it can lease nothing), and a pause,
//     resume, delete or re-creation of the queue, or a handle of it
//     closed, between two reads starts the count again (slot.changes): a
//     timed pause that began and ended between them may leave a moment
//     in which the timer has not yet acted on its end;
//   - the handle read is the slot's current one, and a new handle (the
//     queue created again) starts the count again; a handle whose queue
//     was deleted reports zero figures, no Get waiting;
//   - the directory closing ends every Get (none waits), and the watch
//     stops with the child's quit channel before a test closes it; a kill
//     ends the child between two lines of its report;
//   - a child that could not run is not a queue that stalled: the verdict
//     waits for the stall watchers to catch up (work.go), reads the queue
//     again, and reports an S line, counted apart as starved, when the
//     child's own stalls cover half the span or more.
//
// The watch writes a W line each round with what it has seen: the reads,
// those that showed Stats.Stalled and those that showed a consumer stuck
// (moments, all of them, so far), and the longest a queue stayed stuck
// with its figures unchanged.
//
// Quiet phases give the watch something to see: in a run with named
// queues, one queue at a time is left for a few hundred milliseconds to
// its Work consumers alone (the producers, plain consumers, sweeper and
// admin pick other queues), so that what wakes them is the timer (items
// coming due, leases ending, backoffs), the records of their own calls,
// and a few puts the phase makes, each once the consumers wait with
// nothing to lease. A quiet phase of a named queue most often starts with
// a handle of the queue closed under one or two blocked Gets, which must
// leave nothing behind that swallows a wake-up meant for the Work
// consumers (walq's did before its wake-ups came from one place: the
// closed handle's waiter stayed on the list, took the next signal and
// never came back for it, and the Work consumer after it slept with an
// item ready).
const (
	consumerWatchEvery = 50 * time.Millisecond
	consumerStallAfter = 200 * time.Millisecond
	// quietMin and quietSpread bound a quiet phase.
	quietMin    = 250 * time.Millisecond
	quietSpread = 250 * time.Millisecond
)

// consumerFigures are the figures of a queue's Stats that change whenever
// its consumers make progress.
type consumerFigures struct {
	Ready, Leased, Woken int
	Delivered            uint64
}

func figuresOf(st walq.Stats) consumerFigures {
	return consumerFigures{Ready: st.Ready, Leased: st.Leased, Woken: st.Wakeups.Woken, Delivered: st.Delivered}
}

// leasable is how many items a Get on the queue could lease as st stands:
// its ready items within MaxInFlight, none while it is paused.
func leasable(st walq.Stats) int {
	if st.Paused {
		return 0
	}
	n := st.Ready
	if st.MaxInFlight > 0 {
		n = min(n, st.MaxInFlight-st.Leased)
	}
	return max(n, 0)
}

// stuckHow says whether st shows a consumer stuck, and how: "" when none.
func stuckHow(st walq.Stats) string {
	switch {
	case st.Stalled():
		return "Stats.Stalled"
	case st.Wakeups.Waiting > 0 && leasable(st) > 0:
		return "signalled Gets not back"
	}
	return ""
}

// stuckRun is a run of reads of one queue that all showed a consumer
// stuck, with the same figures and no admin call on the queue.
type stuckRun struct {
	h       *walq.Queue
	qid     uint64
	changes uint64 // the slot's admin calls at the first read
	fig     consumerFigures
	how     string
	since   time.Time // the first read
	judged  bool      // reported or found starved: not again until the run ends
}

// consumerWatch is the state of the watch: the current run of each queue,
// and what it has seen.
type consumerWatch struct {
	runs []*stuckRun // by slot; nil when the last read showed none

	reads, stalled, stuck int
	longest               time.Duration // the longest run seen
}

// observe takes a read st of the queue of slot i through handle h on
// incarnation qid, made at with changes admin calls started or ended on
// the queue; it returns the run when it has lasted consumerStallAfter
// and was not judged yet.
func (w *consumerWatch) observe(i int, h *walq.Queue, qid, changes uint64, st walq.Stats, at time.Time) *stuckRun {
	for len(w.runs) <= i {
		w.runs = append(w.runs, nil)
	}
	w.reads++
	if st.Stalled() {
		w.stalled++
	}
	how := stuckHow(st)
	if how == "" {
		w.runs[i] = nil
		return nil
	}
	w.stuck++
	r := w.runs[i]
	fig := figuresOf(st)
	if r == nil || r.h != h || r.qid != qid || r.changes != changes || changes%2 == 1 || r.fig != fig {
		w.runs[i] = &stuckRun{h: h, qid: qid, changes: changes, fig: fig, how: how, since: at}
		return nil
	}
	if how != r.how {
		r.how = "Stats.Stalled" // stalled on some reads: the stronger finding
	}
	d := at.Sub(r.since)
	w.longest = max(w.longest, d)
	if d < consumerStallAfter || r.judged {
		return nil
	}
	return r
}

// watchConsumers runs the watch until quit is closed (never, in a child
// the parent kills).
func (c *child) watchConsumers(quit <-chan struct{}) {
	var w consumerWatch
	t := time.NewTicker(consumerWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-quit:
			return
		}
		for i, s := range c.slots {
			changes := s.changes.Load()
			h, qid := s.get()
			if r := w.observe(i, h, qid, changes, c.statsOf(h), time.Now()); r != nil {
				c.judgeStuck(s, r)
			}
		}
		c.rep.line("W %d %d %d %d", w.reads, w.stalled, w.stuck, int64(w.longest))
	}
}

func (c *child) statsOf(h *walq.Queue) walq.Stats {
	if c.queueStats != nil {
		return c.queueStats(h)
	}
	return h.Stats()
}

// judgeStuck reports a run of stuck reads of the queue of s: once the
// stall watchers have caught up, the queue read again must show the same
// figures; then it is a violation, or an S line when the child itself
// was starved for half the span or more.
func (c *child) judgeStuck(s *slot, r *stuckRun) {
	now := time.Now()
	c.stalls.settle(now)
	h, qid := s.get()
	st := c.statsOf(h)
	if h != r.h || qid != r.qid || s.changes.Load() != r.changes || stuckHow(st) == "" || figuresOf(st) != r.fig {
		return // it moved after all: the next reads start again
	}
	r.judged = true
	end := time.Now()
	union, longest := c.stalls.covered(r.since, end)
	name := s.name
	if name == "" {
		name = "(default)"
	}
	msg := fmt.Sprintf("consumer stalled on queue %s (incarnation %d): %s on every read for %v with nothing changed: "+
		"ready %d, delayed %d, leased %d (max in flight %d), Gets waiting %d, signalled and not back %d, delivered %d, paused %v",
		name, qid, r.how, end.Sub(r.since).Round(time.Millisecond), st.Ready, st.Delayed, st.Leased, st.MaxInFlight,
		st.Wakeups.Waiting, st.Wakeups.Woken, st.Delivered, st.Paused)
	seen := fmt.Sprintf("stalls covered %v of it, the longest %v", union.Round(time.Millisecond), longest.Round(time.Millisecond))
	if union >= end.Sub(r.since)/2 {
		c.rep.line("S %s (the child was starved: %s)", msg, seen)
		return
	}
	c.rep.line("V %s (%s)", msg, seen)
}

// quietPhase leaves one queue to its Work consumers for a while: a named
// one most often after closing a handle of it under blocked Gets; then
// puts a few items into it, each once its consumers wait with nothing to
// lease, and leaves it alone until the phase ends.
func (c *child) quietPhase(rng *rand.Rand) {
	start := time.Now()
	s := c.slots[rng.IntN(len(c.slots))]
	c.quiet.Store(s)
	if s.name != "" && pct(rng, 80) {
		c.consumersIdle(s, 20*time.Millisecond)
		c.closeUnderGet(rng, s)
	}
	for i := range 1 + rng.IntN(3) {
		if i > 0 {
			// Time for the consumer that took the last put's item to come
			// back and wait again.
			time.Sleep(5*time.Millisecond + randDuration(rng, 20*time.Millisecond))
		}
		if !c.consumersIdle(s, 50*time.Millisecond) {
			break
		}
		c.put(rng, s)
	}
	time.Sleep(quietMin + randDuration(rng, quietSpread) - time.Since(start))
	c.quiet.Store(nil)
	time.Sleep(randDuration(rng, 50*time.Millisecond))
}

// consumersIdle waits up to d for a Get to wait on the queue of s with
// nothing to lease.
func (c *child) consumersIdle(s *slot, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		h, _ := s.get()
		if st := h.Stats(); st.Wakeups.Waiting > 0 && leasable(st) == 0 {
			return true
		}
	}
	return false
}

// closeUnderGet opens a second handle on the named queue of s, blocks
// one or two Gets on it and closes it: they return ErrClosed (or deliver,
// if an item was there to lease first). The admin's lock keeps the queue
// from being deleted meanwhile, so the handle opens the incarnation of s
// and creates nothing.
func (c *child) closeUnderGet(rng *rand.Rand, s *slot) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	defer s.change()()
	h, qid := s.get()
	other, err := c.q.OpenQueue(s.name, namedQueueOptions(s.index))
	if err != nil {
		c.fatal("open queue "+s.name, err)
	}
	n := 1 + rng.IntN(2)
	waiting := other.Stats().Wakeups.Waiting
	done := make(chan struct{}, n)
	for range n {
		grng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		go func() {
			defer func() { done <- struct{}{} }()
			call := c.intent("get @%d", qid)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m, err := other.Get(ctx)
			cancel()
			switch {
			case errors.Is(err, walq.ErrQueueDeleted):
				c.failed(call, "deleted")
			case errors.Is(err, walq.ErrClosed):
				c.failed(call, "closed")
			case errors.Is(err, context.DeadlineExceeded):
				c.rep.line("V a Get on a handle of queue %s (incarnation %d) closed under it did not return for 5s", s.name, qid)
				c.failed(call, "timeout")
			case err != nil:
				c.fatal("get", err)
			default:
				c.took(grng, s, h, qid, call, m)
			}
		}()
	}
	// Most often the Gets block (the queue has nothing to lease them), and
	// the handle is closed under them.
	for deadline := time.Now().Add(20 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if other.Stats().Wakeups.Waiting >= waiting+n {
			break
		}
	}
	time.Sleep(randDuration(rng, 5*time.Millisecond))
	if err := other.Close(); err != nil {
		c.fatal("close handle of "+s.name, err)
	}
	for range n {
		<-done
	}
}
