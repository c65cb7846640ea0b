package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"sort"
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
// The one case docs/workers.md allows is a process that cannot extend the lease
// in time: stopped or starved for longer than Visibility - HeartbeatEvery.
// On a loaded machine (two cores, other processes on them, the race
// detector) a child is starved that long often enough: runs under -race
// with a load of 9 on two cores showed heartbeats whose timer fired 70 ms
// to 600 ms late and whose call then waited 130 ms for its turn, while the
// queue did nothing wrong. So the child watches how well it runs:
//
//   - watchers (two per P) wait on a channel timer Reset after each wake,
//     as the heartbeat does, then take the queue's lock (DeadLetters(1));
//     a round that ends starveWatch or more after its timer was due is a
//     stall from the due time to its end;
//   - a sampler reads the runtime's histogram of how long goroutines waited
//     to run once runnable (runtime/metrics /sched/latencies:seconds) every
//     watchEvery; a wait of starveWatch or more is a stall of that length
//     ending at the sample;
//   - a second sampler reads the queue's histogram of fsync latencies
//     every diskEvery; an fsync of starveWatch or more is a stall as long
//     as its bucket's lower bound, ending at the sample: under SyncAlways
//     Work starts a handler, and its heartbeat, once the lease is durable,
//     so a lease record that waited that long on the disk left the
//     handler that much less of the visibility (two soaks beside -race
//     test runs lost leases 21 ms and 39 ms into handlers that way).
//
// A lost lease or a second run is a violation (V) unless stalls cover at
// least starveLimit of the visibility before it was seen (their union:
// the child could run freely for less than the heartbeat needs); then it is
// an S line with what was seen, counted apart (Summary.Starved). A stall is
// known only once a watcher's round ends after it, and a child the kernel
// did not run for a while (its threads runnable, not running: the runtime's
// histogram does not see that) wakes its heartbeats and its watchers at
// once: the heartbeat may find its lease lost before any watcher has
// recorded the stall that just ended. So the judgement waits until every
// watcher has ended a round after the lease was found lost (settle), and
// counts a watcher still inside its round as stalled since it was due. A
// queue
// that held its lock across I/O could be taken for a starved one here; the
// library's own tests hold a stalled fsync against the heartbeat
// (TestWorkHeartbeatOutlastsAStalledFsync), and every run prints its
// starved count.
const (
	workHeartbeat = 20 * time.Millisecond
	workTimeout   = 2 * time.Second
	starveWatch   = 5 * time.Millisecond
	watchEvery    = 5 * time.Millisecond
	// starveLimit is Visibility - HeartbeatEvery, less 10 ms of slack.
	starveLimit = visibility - workHeartbeat - 10*time.Millisecond
)

// stallWatch records the recent stretches in which the child could not
// run freely, as far as its watchers can tell.
type stallWatch struct {
	probe func() // takes the queue's lock, as a heartbeat does
	// fsyncs reads the queue's histogram of fsync latencies (nil: not
	// watched): a lease whose record waits long for the disk before Work
	// starts its handler is as lost as one whose holder could not run.
	fsyncs func() walq.Histogram
	mu     sync.Mutex
	stalls []stall // the last few thousand, in the order seen
	// ended is when each watcher last ended a round (its start, before
	// the first); the watcher's next round is due watchEvery after it.
	ended []time.Time
	// diskEnded is when sampleDisk last read the histogram (zero: it does
	// not run); settle waits for it too, since an fsync is recorded only
	// when it ends, just as the lease it held up is found lost.
	diskEnded time.Time
	quit      chan struct{} // closed to stop the watchers and the sampler (tests; nil: never)
}

type stall struct{ from, to time.Time }

// start runs the watchers and the sampler.
func (w *stallWatch) start() {
	n := 2 * runtime.GOMAXPROCS(0)
	now := time.Now()
	w.mu.Lock()
	w.ended = make([]time.Time, n)
	for i := range w.ended {
		w.ended[i] = now
	}
	w.mu.Unlock()
	for i := range n {
		go w.watch(i)
	}
	go w.sample()
	if w.fsyncs != nil {
		w.mu.Lock()
		w.diskEnded = now
		w.mu.Unlock()
		go w.sampleDisk()
	}
}

// diskEvery is how often sampleDisk reads the fsync histogram.
const diskEvery = 25 * time.Millisecond

// sampleDisk records each fsync of starveWatch or more as a stall ending
// at the sample that saw it, as long as its bucket's lower bound: the
// process waited on the disk, and a lease record that took that long to
// become durable left its handler that much less of the visibility (Work
// starts the handler, and its heartbeat, once the lease is durable). The
// watchers and the scheduler's histogram see the CPU, not the disk.
func (w *stallWatch) sampleDisk() {
	var prev []uint64
	for {
		select {
		case <-time.After(diskEvery):
		case <-w.quit:
			return
		}
		h := w.fsyncs()
		now := time.Now()
		// Per bucket: Counts are cumulative up to each bound; the last
		// bucket is above every bound.
		n := len(h.Bounds)
		cur := make([]uint64, n+1)
		for i := range n {
			cur[i] = h.Counts[i]
			if i > 0 {
				cur[i] -= h.Counts[i-1]
			}
		}
		if n > 0 {
			cur[n] = h.Count - h.Counts[n-1]
		}
		if len(prev) == len(cur) {
			for i := n; i >= 1; i-- { // the slowest bucket that grew
				if cur[i] > prev[i] {
					if low := time.Duration(h.Bounds[i-1] * float64(time.Second)); low >= starveWatch {
						w.add(now.Add(-low), now)
					}
					break
				}
			}
		}
		prev = cur
		w.mu.Lock()
		w.diskEnded = now
		w.mu.Unlock()
	}
}

// settleTimeout bounds how long settle waits for the watchers.
const settleTimeout = time.Second

// settle waits until every watcher has ended a round after t (or
// settleTimeout has passed), so that a stall that ended by t is recorded.
func (w *stallWatch) settle(t time.Time) {
	for deadline := time.Now().Add(settleTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		w.mu.Lock()
		done := w.diskEnded.IsZero() || w.diskEnded.After(t)
		for _, e := range w.ended {
			done = done && e.After(t)
		}
		w.mu.Unlock()
		if done {
			return
		}
	}
}

func (w *stallWatch) add(from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.stalls) == 4096 {
		w.stalls = append(w.stalls[:0], w.stalls[2048:]...)
	}
	w.stalls = append(w.stalls, stall{from, to})
}

// watch waits on a timer the way Work's heartbeat does (a channel timer,
// Reset after each wake, received in a select), takes the queue's lock,
// and records each round that ended starveWatch or more after the timer
// was due.
func (w *stallWatch) watch(i int) {
	t := time.NewTimer(watchEvery)
	for {
		due := time.Now().Add(watchEvery)
		select { // the heartbeat's shape: a timer and a stop channel
		case <-t.C:
		case <-w.quit:
			return
		}
		if w.probe != nil {
			w.probe()
		}
		now := time.Now()
		if now.Sub(due) >= starveWatch {
			w.add(due, now)
		}
		w.mu.Lock()
		w.ended[i] = now
		w.mu.Unlock()
		t.Reset(watchEvery)
	}
}

// sample records, every watchEvery, the longest new wait of a runnable
// goroutine in the runtime's histogram if it is starveWatch or more.
func (w *stallWatch) sample() {
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	var prev []uint64
	for {
		select {
		case <-time.After(watchEvery):
		case <-w.quit:
			return
		}
		metrics.Read(m)
		if m[0].Value.Kind() != metrics.KindFloat64Histogram {
			return
		}
		h := m[0].Value.Float64Histogram()
		now := time.Now()
		for i := len(h.Counts) - 1; i >= 0 && prev != nil; i-- {
			if h.Counts[i] > prev[i] {
				low := time.Duration(h.Buckets[i] * float64(time.Second))
				if low >= starveWatch {
					w.add(now.Add(-low), now)
				}
				break
			}
		}
		prev = append(prev[:0], h.Counts...)
	}
}

// covered returns how much of [from, to] the stalls cover, and the longest.
// A watcher whose round due before to - starveWatch has not ended is in a
// stall from that due time on.
func (w *stallWatch) covered(from, to time.Time) (union, longest time.Duration) {
	w.mu.Lock()
	stalls := w.stalls
	for _, e := range w.ended {
		if due := e.Add(watchEvery); !e.After(to) && to.Sub(due) >= starveWatch {
			stalls = append(stalls[:len(stalls):len(stalls)], stall{due, to})
		}
	}
	var in []stall
	for _, s := range stalls {
		if s.to.After(from) && s.from.Before(to) {
			in = append(in, stall{maxTime(s.from, from), minTime(s.to, to)})
			longest = max(longest, s.to.Sub(s.from))
		}
	}
	w.mu.Unlock()
	sort.Slice(in, func(i, j int) bool { return in[i].from.Before(in[j].from) })
	var end time.Time
	for _, s := range in {
		if s.from.After(end) {
			union += s.to.Sub(s.from)
			end = s.to
		} else if s.to.After(end) {
			union += s.to.Sub(end)
			end = s.to
		}
	}
	return union, longest
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// workViolation reports what the child saw of a handler that the child
// entered at start: a violation, or an S line when the child was starved
// in the visibility before it saw it.
func (c *child) workViolation(start time.Time, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	now := time.Now()
	c.stalls.settle(now)
	union, longest := c.stalls.covered(minTime(start, now.Add(-visibility)), now)
	seen := fmt.Sprintf("stalls covered %v of the last %v, the longest %v", union.Round(time.Millisecond),
		now.Sub(minTime(start, now.Add(-visibility))).Round(time.Millisecond), longest.Round(time.Millisecond))
	if union >= starveLimit {
		c.rep.line("S %s (the child was starved: %s)", msg, seen)
		return
	}
	c.rep.line("V %s (%s)", msg, seen)
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
func (s *runningSet) start(tok string, r walq.Receipt, at time.Time) (other running, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, running := s.m[tok]; running {
		return other, false
	}
	s.m[tok] = running{r, at}
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

// workPool runs one WorkQueues pool over the named queues of slots, a
// shared worker per queue, until the kill. A queue deleted under it is
// dropped by the pool; once any delete settles (the queue created again),
// the pool stops, drains, and starts over the handles of the day.
func (c *child) workPool(slots []*slot, rng *rand.Rand) {
	pick := lockedPick(rng)
	for {
		type served struct {
			s   *slot
			qid uint64
		}
		byName := make(map[string]served, len(slots))
		settled := make([]uint64, len(slots))
		wqs := make([]walq.WorkQueue, len(slots))
		for i, s := range slots {
			h, qid := s.get()
			settled[i] = s.settled.Load()
			byName[s.name] = served{s, qid}
			wqs[i] = walq.WorkQueue{Queue: h}
		}
		ctx, cancel := context.WithCancel(context.Background())
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			for ctx.Err() == nil {
				if settledSince(slots, settled) {
					cancel()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		handler := func(ctx context.Context, m walq.Message) error {
			sv, ok := byName[m.Queue]
			if !ok {
				c.fatal("pool", fmt.Errorf("item %d of queue %q, which the pool does not serve", m.ID, m.Queue))
			}
			return c.handleAs("pool", ctx, sv.s, sv.qid, m, pick)
		}
		opts := walq.WorkOptions{HeartbeatEvery: workHeartbeat, Timeout: workTimeout}
		err := walq.WorkQueues(ctx, wqs, len(slots), handler, opts)
		cancel()
		<-watchDone
		if err != nil && !errors.Is(err, walq.ErrQueueDeleted) {
			c.fatal("pool", err)
		}
		if err != nil { // every queue deleted: wait for one to be created again
			for !settledSince(slots, settled) {
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// settledSince says whether a delete of any of slots settled since their
// settled counts were read.
func settledSince(slots []*slot, settled []uint64) bool {
	for i, s := range slots {
		if s.settled.Load() != settled[i] {
			return true
		}
	}
	return false
}

// lockedPick returns rng.IntN for handlers that run at once (rng is not
// safe for concurrent use).
func lockedPick(rng *rand.Rand) func(int) int {
	var mu sync.Mutex
	return func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(n)
	}
}

// work runs n Work consumers on the queue of s until the kill; when the
// queue is deleted, Work returns ErrQueueDeleted and starts again on the
// queue created under its name.
func (c *child) work(s *slot, n int, rng *rand.Rand) {
	pick := lockedPick(rng)
	for {
		h, qid := s.get()
		settled := s.settled.Load()
		handler := func(ctx context.Context, m walq.Message) error { return c.handle(ctx, s, qid, m, pick) }
		opts := walq.WorkOptions{HeartbeatEvery: workHeartbeat, Timeout: workTimeout}
		// A delete of the queue, forced or not, may come while its Work runs
		// and its handlers hold leases: Work then returns ErrQueueDeleted,
		// its handlers cancelled at once.
		err := h.Work(context.Background(), n, handler, opts)
		if s.name == "" || !errors.Is(err, walq.ErrQueueDeleted) {
			c.fatal("work", err)
		}
		for s.settled.Load() == settled {
			time.Sleep(time.Millisecond)
		}
	}
}

func (c *child) handle(ctx context.Context, s *slot, qid uint64, m walq.Message, pick func(int) int) error {
	return c.handleAs("work", ctx, s, qid, m, pick)
}

// handleAs is handle reporting its delivery as op: "work" for Work,
// "pool" for WorkQueues (the ledger holds both alike and counts each).
func (c *child) handleAs(op string, ctx context.Context, s *slot, qid uint64, m walq.Message, pick func(int) int) error {
	entered := time.Now() // the report lines below may wait for a busy disk
	deletes := s.deletes.Load()
	call := c.intent("%s @%d", op, qid)
	tok := c.delivered(call, s, m)
	if other, ok := c.running.start(tok, m.Receipt, entered); !ok {
		c.workViolation(other.start, "item %s (id %d) started on a second worker as receipt %s while its handler of receipt %s runs and heartbeats",
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
		// A forced delete of the queue ends its leases: not a lost lease.
		if cause := context.Cause(ctx); errors.Is(cause, walq.ErrLeaseLost) && s.deletes.Load() == deletes {
			c.workViolation(entered, "item %s (id %d): Work's heartbeat lost the lease of receipt %s under a live handler after %v (%v of its own run): %s",
				tok, m.ID, m.Receipt, time.Since(entered).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), oneLine(cause))
		}
		return context.Cause(ctx)
	}
	switch r := pick(100); {
	case r < c.mix.Ack:
		// Work acks once the handler returns: the ack is started, and the
		// report cannot say whether it landed.
		c.intent("ack @%d %s %s", qid, tok, m.Receipt)
		return nil
	case r < c.mix.Ack+c.mix.Nack:
		c.intent("nack @%d %s %s", qid, tok, m.Receipt)
		return errors.New("nack")
	default:
		c.intent("dead @%d %s %s", qid, tok, m.Receipt)
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
