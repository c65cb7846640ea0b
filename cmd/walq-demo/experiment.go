package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walq/walq"
)

// job is the simulated work of one run of the experiment: which items hang
// (the same ones in every run), which runs are slow, and how many times the
// work of each item was completed.
type job struct {
	cfg       *config
	hangs     []bool
	mu        sync.Mutex
	rng       *rand.Rand // which runs are slow; under mu
	completed []atomic.Int32
	onDone    func(item int) // called after a run completes
}

// newJob makes the job of one run; stream separates the slow-run draws of
// runs that go on at the same time.
func newJob(cfg *config, stream uint64) *job {
	j := &job{
		cfg:       cfg,
		hangs:     make([]bool, cfg.items),
		rng:       rand.New(rand.NewPCG(cfg.seed, stream)),
		completed: make([]atomic.Int32, cfg.items),
	}
	pick := rand.New(rand.NewPCG(cfg.seed, 0))
	n := int(math.Round(cfg.hang * float64(cfg.items)))
	for _, i := range pick.Perm(cfg.items)[:n] {
		j.hangs[i] = true
	}
	return j
}

// run is one run of an item's work. A hanging item waits for its context;
// other runs take workTime, or slowTime for the share of them that is slow.
func (j *job) run(ctx context.Context, item int) error {
	if j.hangs[item] {
		<-ctx.Done()
		return ctx.Err()
	}
	j.mu.Lock()
	d := j.cfg.workTime
	if j.rng.Float64() < j.cfg.slow {
		d = j.cfg.slowTime
	}
	j.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	j.completed[item].Add(1)
	if j.onDone != nil {
		j.onDone(item)
	}
	return nil
}

func (j *job) count() (processed, twice int) {
	for i := range j.completed {
		switch n := j.completed[i].Load(); {
		case n >= 2:
			twice++
			processed++
		case n == 1:
			processed++
		}
	}
	return processed, twice
}

func (j *job) handler(ctx context.Context, m walq.Message) error {
	item, err := strconv.Atoi(string(m.Body))
	if err != nil {
		return walq.Permanent(fmt.Errorf("body %q: %w", m.Body, err))
	}
	return j.run(ctx, item)
}

// row is one line of the table: the article's figures or the measured ones.
// -1 prints as "-" (the figure does not exist for that queue).
type row struct {
	processed, lost, dead, twice, late int
	elapsed                            time.Duration
}

// mode is one of the three queues of part 1. Each walq queue has its own
// directory under the demo's, named like its metrics (queue="name").
type mode struct {
	name, articleName string
	queue             string
	article           row
	run               func(ctx context.Context, cfg *config, dir string, reg *prometheus.Registry, status *atomic.Value) (row, error)
}

var modes = []mode{
	{"plain Go channel", "(asyncio.Queue)", "", row{processed: 490, lost: 10, dead: -1, twice: 0, late: -1, elapsed: 10 * time.Second}, runChannel},
	{"walq, no heartbeat", "(AckQueue)", "no-heartbeat", row{processed: 490, lost: 0, dead: 10, twice: 54, late: 54, elapsed: 10 * time.Second}, runNoHeartbeat},
	{"walq, Work", "(+ heartbeat)", "work", row{processed: 490, lost: 0, dead: 4, twice: 0, late: 0, elapsed: 10 * time.Second}, runWork},
}

// articleCut marks the article's figure that its 10 s cut-off kept low.
const articleCut = "*"

func part1(cfg *config, base string, reg *prometheus.Registry) (bool, error) {
	fmt.Printf("part 1 — the article's experiment, three queues side by side (run at the same time)\n%s\n", cfg.describe())
	start := time.Now()
	status := make([]atomic.Value, len(modes))
	for i := range status {
		status[i].Store("starting")
	}
	results := make([]row, len(modes))
	errs := make([]error, len(modes))
	ctx, stopWatch := context.WithCancel(context.Background())
	go watch(ctx, func() string {
		parts := []string{fmt.Sprintf("%4.1fs", time.Since(start).Seconds())}
		for i, m := range modes {
			parts = append(parts, m.name+": "+status[i].Load().(string))
		}
		return strings.Join(parts, " · ")
	})
	var wg sync.WaitGroup
	for i, m := range modes {
		wg.Go(func() {
			results[i], errs[i] = m.run(context.Background(), cfg, filepath.Join(base, m.queue), reg, &status[i])
		})
	}
	wg.Wait()
	stopWatch()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}

	fmt.Println()
	const format = "%-19s %-8s  %9s  %13s  %13s  %15s  %9s  %6s\n"
	fmt.Printf(format, "queue", "", "processed", "lost silently", "dead-lettered", "processed twice", "late acks", "time")
	for i, m := range modes {
		a, r := m.article, results[i]
		dead := num(a.dead)
		if i == len(modes)-1 {
			dead += articleCut
		}
		fmt.Printf(format, m.name, "article", num(a.processed), num(a.lost), dead, num(a.twice), num(a.late), seconds(a.elapsed))
		fmt.Printf(format, m.articleName, "measured", num(r.processed), num(r.lost), num(r.dead), num(r.twice), num(r.late), seconds(r.elapsed))
	}
	fmt.Printf("%s the article stopped its runs at 10 s, with the other 6 hung items on their last attempt; the demo runs\n"+
		"  until every item is acked or dead-lettered (time: until then)\n", articleCut)
	if !cfg.isArticle() {
		fmt.Println("  the article's figures are for its own experiment: 500 items, 10 workers, 2% hang, 10% slow")
	}
	work := results[len(results)-1]
	ok := work.lost == 0 && results[1].lost == 0
	switch {
	case !ok:
		fmt.Println("walq LOST ITEMS: that is a bug")
	case work.twice > 0 || work.late > 0:
		fmt.Println("walq with Work ran items twice: a heartbeat came too late (an fsync or scheduling stall longer than\n" +
			"2/3 of the lease: too short a visibility for this machine's load)")
	default:
		fmt.Println("walq with Work: nothing lost, nothing run twice; the hung items are in the dead-letter list with their last error.")
	}
	return ok, nil
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func num(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// runChannel is the article's asyncio.Queue: a taken item exists only in
// its worker, and a run that times out drops it.
func runChannel(ctx context.Context, cfg *config, _ string, _ *prometheus.Registry, status *atomic.Value) (row, error) {
	start := time.Now()
	j := newJob(cfg, 1)
	items := make(chan int, cfg.items)
	for i := range cfg.items {
		items <- i
	}
	close(items)
	var taken atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
				p, _ := j.count()
				status.Store(fmt.Sprintf("%d/%d taken, %d processed", taken.Load(), cfg.items, p))
			}
		}
	}()
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for item := range items {
				taken.Add(1)
				runCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
				j.run(runCtx, item) // on a timeout the item is gone: nobody will retry it
				cancel()
			}
		})
	}
	wg.Wait()
	close(done)
	processed, twice := j.count()
	status.Store("done")
	return row{processed: processed, lost: cfg.items - processed, dead: -1, twice: twice, late: -1, elapsed: time.Since(start)}, nil
}

// runNoHeartbeat is the article's AckQueue on walq: Get, run with the
// per-item timeout, Ack on success and nothing on failure (the lease runs
// out and the queue takes the item back). Nothing extends the lease.
func runNoHeartbeat(ctx context.Context, cfg *config, dir string, reg *prometheus.Registry, status *atomic.Value) (row, error) {
	j := newJob(cfg, 2)
	return runQueue(ctx, cfg, dir, j, reg, status, func(ctx context.Context, q *walq.Queue) error {
		var wg sync.WaitGroup
		errs := make([]error, cfg.workers)
		for w := range cfg.workers {
			wg.Go(func() {
				for {
					m, err := q.Get(ctx)
					if err != nil {
						if ctx.Err() == nil {
							errs[w] = err
						}
						return
					}
					// Not ctx: a run in flight when the experiment ends is let
					// finish, so that its late ack is counted.
					runCtx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
					err = j.handler(runCtx, m)
					cancel()
					if err != nil {
						continue
					}
					if err := q.Ack(m.Receipt); err != nil && !errors.Is(err, walq.ErrLeaseLost) {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// runWork is the same queue driven by Work: heartbeat, per-item timeout,
// nack on failure.
func runWork(ctx context.Context, cfg *config, dir string, reg *prometheus.Registry, status *atomic.Value) (row, error) {
	j := newJob(cfg, 3)
	return runQueue(ctx, cfg, dir, j, reg, status, func(ctx context.Context, q *walq.Queue) error {
		return q.Work(ctx, cfg.workers, j.handler, walq.WorkOptions{Timeout: cfg.timeout})
	})
}

// runQueue puts the items in a new queue in dir, runs consume until every
// item is acked or dead-lettered, and counts.
func runQueue(ctx context.Context, cfg *config, dir string, j *job, reg *prometheus.Registry, status *atomic.Value,
	consume func(context.Context, *walq.Queue) error) (row, error) {
	q, err := walq.Open(dir, cfg.queueOptions())
	if err != nil {
		return row{}, err
	}
	defer q.Close()
	defer register(reg, q, filepath.Base(dir))()
	if _, err := q.PutBatch(ctx, bodies(cfg.items)); err != nil {
		return row{}, err
	}
	consumeCtx, stop := context.WithCancel(ctx)
	defer stop()
	consumed := make(chan error, 1)
	go func() { consumed <- consume(consumeCtx, q) }()
	elapsed, err := waitSettled(q, cfg.items, consumed, func(st walq.Stats) {
		status.Store(fmt.Sprintf("%d acked, %d dead", st.Acked, st.Dead))
	})
	if err != nil {
		return row{}, err
	}
	stop()
	if err := <-consumed; err != nil {
		return row{}, err
	}
	st := q.Stats()
	status.Store("done")
	processed, twice := j.count()
	dead := make(map[int]bool)
	eachDeadLetter(q, func(d walq.DeadLetter) {
		item, _ := strconv.Atoi(string(d.Body))
		dead[item] = true
	})
	lost := 0
	for i := range cfg.items {
		if j.completed[i].Load() == 0 && !dead[i] {
			lost++
		}
	}
	return row{processed: processed, lost: lost, dead: st.Dead, twice: twice, late: int(st.LateAcks), elapsed: elapsed}, nil
}

// waitSettled returns once the queue holds nothing but dead letters (every
// item is acked or dead-lettered), how long that took since the call, or
// the consumer's error if it stops first.
func waitSettled(q *walq.Queue, items int, consumed <-chan error, report func(walq.Stats)) (time.Duration, error) {
	start := time.Now()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-consumed:
			if err == nil {
				err = errors.New("the consumer stopped before the work was done")
			}
			return 0, err
		case <-t.C:
		}
		st := q.Stats()
		report(st)
		if st.Ready+st.Delayed+st.Leased == 0 && st.Acked+uint64(st.Dead) >= uint64(items) {
			return time.Since(start), nil
		}
	}
}

func bodies(n int) []walq.Item {
	items := make([]walq.Item, n)
	for i := range items {
		items[i].Body = []byte(strconv.Itoa(i))
	}
	return items
}
