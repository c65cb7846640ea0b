package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walq/walq"
)

// A load is producers putting and consumers leasing and acking, until
// either n items are put and (with consumers) acked, or the duration ends.
//
// Bodies carry what the consumer side measures: the first 8 bytes are when
// the Put was called (nanoseconds since the load began, monotonic clock),
// so each delivery gives an end-to-end latency; the delay workload adds
// the item's delay in the next 8.
type load struct {
	q         *walq.Queue
	producers int
	consumers int // 0: put only
	consumer  string
	body      int
	n         int64         // > 0: put exactly n items, and ack them all
	duration  time.Duration // n == 0: run this long
	delayMax  time.Duration // > 0: each item gets a random delay up to it
	// maxReady > 0 bounds the items put and not yet delivered: producers
	// wait for a delivery before they put more. Unbounded producers take
	// log capacity for items that no consumer reaches within the run.
	maxReady int
	seed     uint64
}

const (
	stampBytes   = 8
	delayBodyMin = 16
)

// loadResult is what a load did. Acks are counted by the consumers for the
// plain path and taken from Stats for the work path, whose acks happen
// inside Work.
type loadResult struct {
	elapsed          time.Duration
	puts, gets, acks uint64
	put, get, ack    *hist
	e2e              *hist // Put called → delivered
	late             *hist // delivered − due (delay only)
	early            uint64
	minLateness      time.Duration
}

// observer is one consumer's view; the work path shares one under a lock
// because Work runs each handler on a goroutine of its own.
type observer struct {
	get, ack, e2e, late *hist
	early               uint64
	minLateness         time.Duration
	first               bool
}

func newObserver() *observer {
	return &observer{get: newHist(), ack: newHist(), e2e: newHist(), late: newHist(), first: true}
}

// deliver records the delivery of m, seen by the consumer at.
func (l *load) deliver(o *observer, base time.Time, m walq.Message, at time.Time) {
	if len(m.Body) >= stampBytes {
		putAt := time.Duration(binary.LittleEndian.Uint64(m.Body))
		o.e2e.record(at.Sub(base) - putAt)
	}
	if l.delayMax == 0 || len(m.Body) < delayBodyMin {
		return
	}
	// The put record's time (EnqueuedAt) plus the delay is exactly the due
	// time the queue computed. The lease record's time is LeaseEnd minus the
	// visibility: the moment the queue decided to deliver. Early is the
	// queue deciding before the due time, or the consumer seeing the item
	// before it.
	delay := int64(binary.LittleEndian.Uint64(m.Body[stampBytes:]))
	due := m.EnqueuedAt.UnixNano() + delay
	leasedAt := m.LeaseEnd.UnixNano() - int64(visibility)
	lateness := time.Duration(at.UnixNano() - due)
	if leasedAt < due || lateness < 0 {
		o.early++
	}
	if o.first || lateness < o.minLateness {
		o.minLateness, o.first = lateness, false
	}
	o.late.record(lateness)
}

func (l *load) run() (*loadResult, error) {
	base := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		stop     atomic.Bool // no more puts
		tickets  atomic.Int64
		puts     atomic.Uint64
		gets     atomic.Uint64
		acks     atomic.Uint64
		failOnce sync.Once
		failure  error
		mu       sync.Mutex // merges the per-goroutine histograms
		res      = &loadResult{put: newHist()}
		obs      = newObserver()
	)
	fail := func(err error) {
		failOnce.Do(func() { failure = err })
		stop.Store(true)
		cancel()
	}
	if l.n == 0 {
		t := time.AfterFunc(l.duration, func() {
			stop.Store(true)
			cancel()
		})
		defer t.Stop()
	}
	// slots holds one token per item that may be put and not yet
	// delivered (nil: unbounded).
	var slots chan struct{}
	if l.maxReady > 0 && l.consumers > 0 {
		slots = make(chan struct{}, l.maxReady)
	}
	delivered := func() {
		select {
		case <-slots: // a nil channel never receives
		default: // a delivery no producer waited for
		}
	}
	take := func() bool {
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return false
			}
		}
		if l.n > 0 {
			return !stop.Load() && tickets.Add(1) <= l.n
		}
		return !stop.Load()
	}
	// itemDone is called once per item acked (or put, without consumers);
	// it ends a counted run at the last one.
	itemDone := func(count uint64) {
		if l.n > 0 && count == uint64(l.n) {
			cancel()
		}
	}

	var wg sync.WaitGroup
	for p := range l.producers {
		wg.Go(func() {
			h := newHist()
			rng := rand.New(rand.NewPCG(l.seed, uint64(p)))
			body := make([]byte, l.body)
			var opts []walq.PutOption
			for take() {
				opts = opts[:0]
				if l.delayMax > 0 {
					d := time.Duration(rng.Int64N(int64(l.delayMax) + 1))
					binary.LittleEndian.PutUint64(body[stampBytes:], uint64(d))
					opts = append(opts, walq.WithDelay(d))
				}
				start := time.Now()
				if len(body) >= stampBytes {
					binary.LittleEndian.PutUint64(body, uint64(start.Sub(base)))
				}
				// A Put in flight when the run stops is let finish: its
				// latency is real.
				if _, err := l.q.Put(context.Background(), body, opts...); err != nil {
					fail(fmt.Errorf("put: %w", err))
					break
				}
				h.record(time.Since(start))
				n := puts.Add(1)
				if l.consumers == 0 {
					itemDone(n)
				}
			}
			mu.Lock()
			res.put.merge(h)
			mu.Unlock()
		})
	}

	switch {
	case l.consumers == 0:
	case l.consumer == "plain":
		for range l.consumers {
			wg.Go(func() {
				o := newObserver()
				defer func() {
					mu.Lock()
					obs.merge(o)
					mu.Unlock()
				}()
				// Get returns a ready item even when ctx has ended (it looks
				// at ctx only when it has to wait), so the loop checks it:
				// a timed run stops at its end, not when the backlog is
				// drained.
				for ctx.Err() == nil {
					start := time.Now()
					m, err := l.q.Get(ctx)
					if err != nil {
						if ctx.Err() == nil {
							fail(fmt.Errorf("get: %w", err))
						}
						return
					}
					at := time.Now()
					o.get.record(at.Sub(start))
					gets.Add(1)
					delivered()
					l.deliver(o, base, m, at)
					start = time.Now()
					if err := l.q.Ack(m.Receipt); err != nil {
						fail(fmt.Errorf("ack: %w", err))
						return
					}
					o.ack.record(time.Since(start))
					itemDone(acks.Add(1))
				}
			})
		}
	default:
		wg.Go(func() {
			var handled atomic.Uint64
			before := l.q.Stats().Acked
			err := l.q.Work(ctx, l.consumers, func(_ context.Context, m walq.Message) error {
				at := time.Now()
				mu.Lock()
				l.deliver(obs, base, m, at)
				mu.Unlock()
				gets.Add(1)
				delivered()
				// Work acks after the handler returns; the run ends once
				// Work has drained, so the last acks are counted too.
				if l.n > 0 && handled.Add(1) == uint64(l.n) {
					cancel()
				}
				return nil
			}, walq.WorkOptions{})
			if err != nil && !errors.Is(err, context.Canceled) {
				fail(fmt.Errorf("work: %w", err))
			}
			acks.Store(l.q.Stats().Acked - before)
		})
	}
	wg.Wait()
	res.elapsed = time.Since(base)
	if failure != nil {
		return nil, failure
	}
	res.puts, res.gets, res.acks = puts.Load(), gets.Load(), acks.Load()
	res.get, res.ack, res.e2e, res.late = obs.get, obs.ack, obs.e2e, obs.late
	res.early, res.minLateness = obs.early, obs.minLateness
	return res, nil
}

func (o *observer) merge(x *observer) {
	o.get.merge(x.get)
	o.ack.merge(x.ack)
	o.e2e.merge(x.e2e)
	o.late.merge(x.late)
	o.early += x.early
	if !x.first && (o.first || x.minLateness < o.minLateness) {
		o.minLateness, o.first = x.minLateness, false
	}
}

// RunResult is one measured load.
type RunResult struct {
	Seconds float64 `json:"seconds"`
	Puts    uint64  `json:"puts"`
	Gets    uint64  `json:"gets"` // deliveries
	Acks    uint64  `json:"acks"`
	// Items are what the workload completes: puts for put, acks otherwise.
	Items         uint64  `json:"items"`
	ItemsPerSec   float64 `json:"items_per_sec"`
	OpsPerSec     float64 `json:"ops_per_sec"` // puts + gets + acks
	Records       uint64  `json:"records"`     // log records appended
	RecordsPerSec float64 `json:"records_per_sec"`
	Backlog       int     `json:"backlog"` // items stored at the end

	Latency map[string]Latency `json:"latency"` // put, get, ack (plain path), e2e

	Fsyncs       uint64  `json:"fsyncs"`
	FsyncsPerSec float64 `json:"fsyncs_per_sec"`
	FsyncMeanUs  float64 `json:"fsync_mean_us"`
	Batches      uint64  `json:"batches"`
	AvgBatch     float64 `json:"avg_batch"` // records per group commit

	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUCores          float64 `json:"cpu_cores"` // CPU seconds per second
	CPUPerOpUs        float64 `json:"cpu_per_op_us"`
	CPUPerItemUs      float64 `json:"cpu_per_item_us"`
	AllocsPerItem     float64 `json:"allocs_per_item"`
	AllocBytesPerItem float64 `json:"alloc_bytes_per_item"`
	PeakHeapInuse     uint64  `json:"peak_heap_inuse"`
	MaxRSS            uint64  `json:"max_rss"`
}

// measure runs a load with the probe and the CPU profile around it and
// puts together its figures.
func measure(l *load, prof *profiler) (*RunResult, *loadResult, error) {
	return measureAll([]*load{l}, prof)
}

// measureAll runs loads, each on its own queue of one directory, at once,
// and puts together their figures: counts and histograms summed, the
// directory's records and fsyncs counted once.
func measureAll(ls []*load, prof *profiler) (*RunResult, *loadResult, error) {
	l := ls[0]
	before := l.q.DirStats()
	if err := prof.start(); err != nil {
		return nil, nil, err
	}
	p := startProbe()
	lr, err := runAll(ls)
	use := p.end()
	if err != nil {
		return nil, nil, err
	}
	after := l.q.DirStats()
	d := deltaStats(before, after)
	secs := lr.elapsed.Seconds()
	items := lr.acks
	if l.consumers == 0 {
		items = lr.puts
	}
	ops := lr.puts + lr.gets + lr.acks
	r := &RunResult{
		Seconds:       secs,
		Puts:          lr.puts,
		Gets:          lr.gets,
		Acks:          lr.acks,
		Items:         items,
		ItemsPerSec:   float64(items) / secs,
		OpsPerSec:     float64(ops) / secs,
		Records:       d.Records,
		RecordsPerSec: float64(d.Records) / secs,
		Backlog:       after.Items,
		Latency:       map[string]Latency{"put": lr.put.summary()},
		Fsyncs:        d.Fsyncs,
		FsyncsPerSec:  float64(d.Fsyncs) / secs,
		Batches:       d.Batches,
		CPUSeconds:    use.CPU.Seconds(),
		CPUCores:      use.CPU.Seconds() / secs,
		PeakHeapInuse: use.PeakHeapInuse,
		MaxRSS:        use.MaxRSS,
	}
	if d.Fsyncs > 0 {
		r.FsyncMeanUs = d.FsyncSum / float64(d.Fsyncs) * 1e6
	}
	if d.Batches > 0 {
		r.AvgBatch = float64(d.Records) / float64(d.Batches)
	}
	if ops > 0 {
		r.CPUPerOpUs = float64(use.CPU.Microseconds()) / float64(ops)
	}
	if items > 0 {
		r.CPUPerItemUs = float64(use.CPU.Microseconds()) / float64(items)
		r.AllocsPerItem = float64(use.AllocObjects) / float64(items)
		r.AllocBytesPerItem = float64(use.AllocBytes) / float64(items)
	}
	if l.consumers > 0 {
		if lr.get.n > 0 {
			r.Latency["get"] = lr.get.summary()
			r.Latency["ack"] = lr.ack.summary()
		}
		r.Latency["e2e"] = lr.e2e.summary()
	}
	return r, lr, nil
}

// DelayResult is what the delay workload saw.
type DelayResult struct {
	Items         uint64  `json:"items"`
	Delivered     uint64  `json:"delivered"`
	DelayMaxMs    float64 `json:"delay_max_ms"`
	Early         uint64  `json:"early"`
	Lateness      Latency `json:"lateness"` // delivered − due
	MinLatenessUs float64 `json:"min_lateness_us"`
}

// runAll runs the loads at once and merges what they did.
func runAll(ls []*load) (*loadResult, error) {
	if len(ls) == 1 {
		return ls[0].run()
	}
	results := make([]*loadResult, len(ls))
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() { results[i], errs[i] = l.run() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m := &loadResult{put: newHist(), get: newHist(), ack: newHist(), e2e: newHist(), late: newHist()}
	first := true
	for _, r := range results {
		m.elapsed = max(m.elapsed, r.elapsed)
		m.puts, m.gets, m.acks, m.early = m.puts+r.puts, m.gets+r.gets, m.acks+r.acks, m.early+r.early
		for _, h := range []struct{ to, from *hist }{{m.put, r.put}, {m.get, r.get}, {m.ack, r.ack}, {m.e2e, r.e2e}, {m.late, r.late}} {
			if h.from != nil {
				h.to.merge(h.from)
			}
		}
		if r.late != nil && r.late.n > 0 && (first || r.minLateness < m.minLateness) {
			m.minLateness, first = r.minLateness, false
		}
	}
	return m, nil
}

// newLoads are the loads cfg describes: one on q alone, or one on each of
// cfg.queues named queues of q's directory, each with cfg's producers and
// consumers, and cfg.n split among them.
func newLoads(q *walq.Queue, cfg *config) ([]*walq.Queue, []*load, error) {
	if cfg.queues == 1 {
		return []*walq.Queue{q}, []*load{newLoad(q, cfg)}, nil
	}
	var qs []*walq.Queue
	var ls []*load
	for i := range cfg.queues {
		h, err := q.OpenQueue(fmt.Sprintf("q%d", i), walq.QueueOptions{})
		if err != nil {
			return nil, nil, err
		}
		l := newLoad(h, cfg)
		l.seed += uint64(i)
		if cfg.n > 0 {
			l.n = cfg.n / int64(cfg.queues)
			if int64(i) < cfg.n%int64(cfg.queues) {
				l.n++
			}
		}
		qs, ls = append(qs, h), append(ls, l)
	}
	return qs, ls, nil
}

// newLoad is the load that cfg describes, on q.
func newLoad(q *walq.Queue, cfg *config) *load {
	return &load{
		q:         q,
		producers: cfg.producers,
		consumers: cfg.consumers,
		consumer:  cfg.consumer,
		body:      cfg.body,
		n:         cfg.n,
		duration:  cfg.duration,
		seed:      cfg.seed,
		maxReady:  cfg.maxReady,
	}
}

func runLoadWorkload(cfg *config, qdir string, prof *profiler, res *Result) error {
	q, err := walq.Open(qdir, cfg.options())
	if err != nil {
		return err
	}
	defer q.Close()
	_, ls, err := newLoads(q, cfg)
	if err != nil {
		return err
	}
	for _, l := range ls {
		switch cfg.workload {
		case "put":
			l.consumers = 0
		case "delay":
			l.delayMax = cfg.delayMax
		}
	}
	r, lr, err := measureAll(ls, prof)
	if err != nil {
		return err
	}
	res.Run = r
	if cfg.workload == "delay" {
		res.Delay = &DelayResult{
			Items:         lr.puts,
			Delivered:     lr.gets,
			DelayMaxMs:    float64(cfg.delayMax) / 1e6,
			Early:         lr.early,
			Lateness:      lr.late.summary(),
			MinLatenessUs: float64(lr.minLateness) / 1e3,
		}
	}
	return q.Close()
}
