package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walq/walq"
)

// childEnv carries the child's configuration, as JSON. Its presence is what
// makes a process the child.
const childEnv = "WALQ_CRASHTEST_CHILD"

// childConfig is what the parent tells one child.
type childConfig struct {
	Dir         string // the queue directory
	Report      string // the report file
	Seed        uint64
	Cycle       int
	Sync        string
	SegmentSize int64
	Mix         Mix
	// WallOffset is where the child's wall clock starts, from the true
	// time; StepClock makes the child step it while it runs.
	WallOffset time.Duration
	StepClock  bool
	Queues     int // named queues besides the default queue (Config.Queues)
	// Watermark, when positive, is the queue's Options.DiskWatermark, with
	// automatic compaction on (Config.LowDisk).
	Watermark int64
}

// IsChild reports whether this process was started by the harness as its
// child.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// ChildMain runs the child workload until the parent kills it, and returns
// an exit code only on failure. Call it first thing from main or TestMain
// when IsChild.
func ChildMain() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "crashtest child: bad %s: %v\n", childEnv, err)
		return 2
	}
	return runChild(cfg)
}

type child struct {
	cfg     childConfig
	mix     Mix
	q       *walq.Queue
	clock   *steppedClock
	rep     *reportWriter
	seq     atomic.Uint64 // call numbers
	toks    atomic.Uint64 // item numbers within the cycle
	running runningSet    // items whose Work handler is running
	stalls  stallWatch    // stretches in which the child could not run
	slots   []*slot       // the queues: the default queue, then the named ones (queues.go)
	// quiet is the queue left to its Work consumers for now (consumers.go):
	// producers, plain consumers, sweepers and the admin pick others.
	quiet atomic.Pointer[slot]
	// adminMu is held by whoever deletes, creates or opens a queue: the
	// admin, and a quiet phase opening a second handle on a named queue.
	adminMu sync.Mutex
	// queueStats reads a queue's Stats for the consumer watch (nil:
	// Queue.Stats; tests give figures of their own).
	queueStats func(*walq.Queue) walq.Stats
}

func runChild(cfg childConfig) int {
	rep, err := openReport(cfg.Report)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crashtest child: %v\n", err)
		return 2
	}
	sync, _, err := parseSync(cfg.Sync)
	if err != nil {
		rep.line("X %v", err)
		return 2
	}
	clock := newSteppedClock(cfg.WallOffset)
	opts := queueOptions(sync, cfg.SegmentSize)
	opts.Clock = clock
	if cfg.Watermark > 0 {
		opts.DiskWatermark = cfg.Watermark
		opts.DisableAutoCompact = false
		opts.CompactMinBytes = cfg.Watermark / 4
		opts.CompactRatio = 2
	}
	// Queue time starts at or after the wall clock read at Open: wall is a
	// floor for the time of every record this child writes.
	wall := clock.Now().UnixNano()
	q, err := walq.Open(cfg.Dir, opts)
	if err != nil {
		rep.line("X open: %s", oneLine(err))
		return 3
	}
	c := &child{cfg: cfg, mix: cfg.Mix, q: q, clock: clock, rep: rep, running: runningSet{m: make(map[string]running)}}
	c.stalls.probe = func() { q.DeadLetters(1) }
	c.stalls.fsyncs = func() walq.Histogram { return q.Stats().Fsync }
	c.stalls.start()
	rep.line("R %d %d %d", time.Now().UnixNano(), q.Stats().DurableLSN, wall)
	c.slots = []*slot{{h: q}}
	for i := range cfg.Queues {
		s := &slot{name: queueName(i), index: i}
		c.openSlot(s)
		c.slots = append(c.slots, s)
	}
	fmt.Println("ready") // the parent times some kills from here

	worker := func(i uint64, fn func(*rand.Rand)) {
		rng := rand.New(rand.NewPCG(cfg.Seed, i))
		for {
			fn(rng)
		}
	}
	for i := range c.mix.Producers {
		go worker(uint64(100+i), c.produce)
	}
	for i := range c.mix.Consumers {
		go worker(uint64(200+i), c.consume)
	}
	if c.mix.Compact > 0 {
		go worker(300, c.compact)
	}
	if c.mix.Redrive > 0 {
		go worker(400, c.sweepDead)
	}
	if c.mix.Workers > 0 {
		go c.work(c.slots[0], c.mix.Workers, rand.New(rand.NewPCG(cfg.Seed, 500)))
		// The named queues get a Work call each, or in half the children
		// one WorkQueues pool over them all.
		if named := c.slots[1:]; len(named) > 1 && rand.New(rand.NewPCG(cfg.Seed, 505)).IntN(2) == 0 {
			go c.workPool(named, rand.New(rand.NewPCG(cfg.Seed, 506)))
		} else {
			for i, s := range named {
				go c.work(s, 1, rand.New(rand.NewPCG(cfg.Seed, uint64(510+i))))
			}
		}
	}
	if len(c.slots) > 1 {
		go worker(700, c.admin)
		go worker(800, c.quietPhase)
	}
	go c.watchConsumers(nil)
	if cfg.StepClock {
		go worker(600, c.stepClock)
	}
	select {} // until SIGKILL
}

// fatal reports an error the workload never expects and ends the child:
// the parent counts it as a violation.
func (c *child) fatal(what string, err error) {
	c.rep.line("X %s: %s", what, oneLine(err))
	os.Exit(3)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " | ") }

func (c *child) intent(format string, args ...any) uint64 {
	n := c.seq.Add(1)
	c.rep.line("I %d "+format, append([]any{n}, args...)...)
	return n
}

// done reports call n as returned; dlsn is read after the call returned.
func (c *child) done(n uint64, result string) {
	c.rep.line("D %d %d %d %s", n, time.Now().UnixNano(), c.q.Stats().DurableLSN, result)
}

func (c *child) failed(n uint64, reason string) { c.rep.line("E %d %s", n, reason) }

// failedAt is failed with the durable LSN read after the call returned, for
// an answer the ledger checks against what recovery finds.
func (c *child) failedAt(n uint64, reason string) {
	c.rep.line("E %d %s %d", n, reason, c.q.Stats().DurableLSN)
}

func pct(rng *rand.Rand, p int) bool { return rng.IntN(100) < p }

func (c *child) produce(rng *rand.Rand) {
	s := c.pick(rng)
	h, _ := s.get()
	if len(c.slots) == 1 {
		if st := c.q.Stats(); st.Items > 400 {
			time.Sleep(5 * time.Millisecond) // consumers are behind: let them catch up
			return
		}
	} else if h.Stats().Items > 150 || c.q.DirStats().Items > 500 {
		time.Sleep(2 * time.Millisecond) // a queue paused, or consumers behind
		return
	}
	c.put(rng, s)
}

// put puts one item, or a batch of 2-4, into the queue of s and reports it.
func (c *child) put(rng *rand.Rand, s *slot) {
	h, qid := s.get()
	n := 1
	if pct(rng, c.mix.Batch) {
		n = 2 + rng.IntN(3)
	}
	// The deadline is a wall-clock time on the child's (stepped) clock; the
	// queue takes it as the span from now. steps tells whether a clock step
	// fell inside the call, start its true duration.
	steps := c.clock.steps.Load()
	start := time.Now()
	now := c.clock.Now()
	items := make([]walq.Item, n)
	descs := make([]string, n)
	for i := range items {
		tok, body := c.body(rng)
		it := walq.Item{Body: body, Priority: rng.IntN(4)}
		if pct(rng, c.mix.Delay) {
			it.Delay = time.Duration(1+rng.Int64N(int64(maxDelay/time.Millisecond))) * time.Millisecond
		}
		span := time.Duration(0)
		if pct(rng, c.mix.Deadline) {
			span = it.Delay + 300*time.Millisecond + randDuration(rng, 1200*time.Millisecond)
			it.Deadline = now.Add(span)
		}
		key := "-"
		if k, _ := tokenKind(tok); k == bodyEmpty {
			it.Key, key = tok, tok // the body cannot name the item: its key does
		} else if pct(rng, c.mix.Key) {
			it.Key = "k" + strconv.Itoa(rng.IntN(40))
			key = it.Key
		}
		items[i] = it
		descs[i] = fmt.Sprintf("%s/%d/%d/%s", tok, span, it.Priority, key)
	}
	ctx := context.Background()
	var ids []uint64
	var err error
	var call uint64
	if n == 1 {
		call = c.intent("put @%d %s", qid, descs[0])
		var id uint64
		id, err = h.Put(ctx, items[0].Body, walq.WithDelay(items[0].Delay), walq.WithDeadline(items[0].Deadline),
			walq.WithPriority(items[0].Priority), walq.WithKey(items[0].Key))
		ids = []uint64{id}
		if errors.Is(err, walq.ErrDuplicate) {
			c.done(call, "d"+strconv.FormatUint(id, 10)+" "+c.putWindow(steps, start))
			return
		}
	} else {
		call = c.intent("putb @%d %s", qid, strings.Join(descs, ","))
		ids, err = h.PutBatch(ctx, items)
	}
	if errors.Is(err, walq.ErrQueueDeleted) {
		c.failed(call, "deleted") // checked under q.mu before anything is appended
		return
	}
	if errors.Is(err, walq.ErrDiskFull) {
		c.failed(call, "diskfull") // refused before anything is appended
		return
	}
	if errors.Is(err, walq.ErrInvalidDeadline) && c.clock.steps.Load() != steps {
		// A wall clock stepped forward between the child's reading and the
		// queue's put the deadline before the due time: refused, nothing
		// stored, as it should be.
		c.failed(call, "deadline-stepped")
		return
	}
	var be *walq.BatchError
	if err != nil && !errors.As(err, &be) {
		c.fatal("put", err)
	}
	results := make([]string, len(ids))
	for i, id := range ids {
		results[i] = strconv.FormatUint(id, 10)
		if be != nil && be.Errors[i] != nil {
			if !errors.Is(be.Errors[i], walq.ErrDuplicate) {
				c.fatal("putbatch item", be.Errors[i])
			}
			results[i] = "d" + results[i]
		}
	}
	c.done(call, strings.Join(results, ",")+" "+c.putWindow(steps, start))
}

// body makes the next item's token and body: Mix.Empty% of them empty,
// Mix.Large% large (1 KiB to 256 KiB), Mix.Hostile% random bytes,
// lookalike records, or copies of real frames read from the queue's own
// segments just now (bodies.go).
func (c *child) body(rng *rand.Rand) (string, []byte) {
	base := fmt.Sprintf("c%d.%d", c.cfg.Cycle, c.toks.Add(1))
	switch r := rng.IntN(100); {
	case r < c.mix.Empty:
		return base + bodyEmpty, []byte{}
	case r < c.mix.Empty+c.mix.Large:
		tok := largeToken(base, largeSize(rng), c.q.Stats().LastLSN+1)
		return tok, bodyOf(tok)
	}
	if !pct(rng, c.mix.Hostile) {
		return base, bodyOf(base)
	}
	switch rng.IntN(4) {
	case 0:
		tok := hostileToken(base, bodyRandom, 0)
		return tok, bodyOf(tok)
	case 1, 2:
		kind := bodyMirror
		if rng.IntN(2) == 0 {
			kind = bodyStart
		}
		if tok, body := mirrorBody(base, kind, readFrames(c.cfg.Dir, rng), rng); tok != "" {
			return tok, body
		}
	}
	tok := hostileToken(base, bodyFramed, c.q.Stats().LastLSN+1)
	return tok, bodyOf(tok)
}

// putWindow is the put's report of how its deadlines can be checked:
// "w<ns>", the call's true duration, when no clock step fell inside it, or
// "w?" when one did (a step between the child's reading of the wall clock
// and the queue's moves the stored deadline by the step).
func (c *child) putWindow(steps uint64, start time.Time) string {
	d := time.Since(start)
	if after := c.clock.steps.Load(); after != steps || steps%2 == 1 {
		return "w?"
	}
	return "w" + strconv.FormatInt(int64(d), 10)
}

func (c *child) consume(rng *rand.Rand) {
	s := c.pick(rng)
	h, qid := s.get()
	call := c.intent("get @%d", qid)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	m, err := h.Get(ctx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		c.failed(call, "timeout")
		return
	}
	if errors.Is(err, walq.ErrQueueDeleted) {
		c.failed(call, "deleted")
		return
	}
	if err != nil {
		c.fatal("get", err)
	}
	c.took(rng, s, h, qid, call, m)
}

// took checks and reports the delivery of m by call on the queue of s (h
// is a handle on its incarnation qid), works on it for a moment and ends
// its lease, or abandons it to expire.
func (c *child) took(rng *rand.Rand, s *slot, h *walq.Queue, qid, call uint64, m walq.Message) {
	tok := c.delivered(call, s, m)
	if other, running := c.running.has(tok); running {
		c.workViolation(other.start, "item %s (id %d) delivered to a consumer as receipt %s while its Work handler of receipt %s runs and heartbeats",
			tok, m.ID, m.Receipt, other.receipt)
	}
	time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // the work
	if len(c.slots) > 1 && pct(rng, 5) {
		c.foreignReceipt(rng, s, tok, m)
	}
	if pct(rng, c.mix.Extend) {
		c.leaseCall("extend", qid, tok, m.Receipt, func() error { return h.Extend(m.Receipt, visibility) })
	}
	switch r := rng.IntN(100); {
	case r < c.mix.Ack:
		c.leaseCall("ack", qid, tok, m.Receipt, func() error { return h.Ack(m.Receipt) })
	case r < c.mix.Ack+c.mix.Nack:
		c.leaseCall("nack", qid, tok, m.Receipt, func() error { return h.Nack(m.Receipt, errors.New("nack")) })
	case r < c.mix.Ack+c.mix.Nack+c.mix.DeadLetter:
		c.leaseCall("dead", qid, tok, m.Receipt, func() error { return h.DeadLetter(m.Receipt, errors.New("poison")) })
	default:
		// abandoned: the lease expires and the item comes back
	}
}

// delivered reports a delivery and checks its body byte for byte, and
// that it came from the queue of the handle.
func (c *child) delivered(call uint64, s *slot, m walq.Message) string {
	tok := itemToken(m.Body, m.Key)
	c.done(call, fmt.Sprintf("%s %s %d %d", tok, m.Receipt, m.Attempt, m.Deliveries))
	if tok == "" || !checkBody(tok, m.Body) {
		c.fatal("get", fmt.Errorf("item %d has a body the workload never put: %q", m.ID, truncate(m.Body, 80)))
	}
	if m.Queue != s.name {
		c.rep.line("V item %s (id %d) delivered by a handle on queue %q says it is of queue %q", tok, m.ID, s.name, m.Queue)
	}
	return tok
}

func (c *child) leaseCall(op string, qid uint64, tok string, r walq.Receipt, fn func() error) {
	call := c.intent("%s @%d %s %s", op, qid, tok, r)
	switch err := fn(); {
	case err == nil:
		c.done(call, "")
	case errors.Is(err, walq.ErrLeaseLost):
		c.failed(call, "leaselost")
	case errors.Is(err, walq.ErrQueueDeleted):
		c.failed(call, "deleted")
	default:
		c.fatal(op, err)
	}
}

func (c *child) compact(rng *rand.Rand) {
	time.Sleep(randDuration(rng, c.mix.Compact))
	call := c.intent("compact")
	if err := c.q.Compact(); err != nil {
		c.fatal("compact", err)
	}
	c.done(call, "")
}

func (c *child) sweepDead(rng *rand.Rand) {
	time.Sleep(randDuration(rng, c.mix.Redrive))
	s := c.pick(rng)
	h, qid := s.get()
	dead := h.DeadLetters(10)
	if len(dead) == 0 {
		return
	}
	dead = dead[:1+rng.IntN(len(dead))]
	ids := make([]uint64, len(dead))
	toks := make([]string, len(dead))
	deliveries := make([]string, len(dead))
	for i, d := range dead {
		ids[i], toks[i] = d.ID, itemToken(d.Body, d.Key)
		deliveries[i] = strconv.Itoa(d.Deliveries)
	}
	listed := strings.Join(toks, ",") + " " + strings.Join(deliveries, ",")
	sweep := func(purge bool) {
		op, fn := "redrive", h.Redrive
		if purge {
			op, fn = "purge", h.PurgeDeadLetters
		}
		call := c.intent("%s @%d %s", op, qid, listed)
		switch err := fn(ids...); {
		case err == nil:
			c.done(call, "")
		case errors.Is(err, walq.ErrNotFound):
			// The other sweep took one of them first. With the durable
			// point read after the answer: the ledger holds the answer to
			// what recovery finds (ledger.checkNotFound).
			c.failedAt(call, "notfound")
		case errors.Is(err, walq.ErrQueueDeleted):
			c.failed(call, "deleted")
		default:
			c.fatal(op, err)
		}
	}
	if !pct(rng, 25) {
		sweep(pct(rng, c.mix.Purge))
		return
	}
	// Two sweeps of the same dead letters at once: one of them finds the
	// other took them, and must not say so before that is durable.
	var wg sync.WaitGroup
	for _, purge := range []bool{pct(rng, c.mix.Purge), pct(rng, c.mix.Purge)} {
		wg.Go(func() { sweep(purge) })
	}
	wg.Wait()
}
