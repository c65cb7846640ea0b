package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walq/walq"
)

// fill puts n items of body bytes with the given number of goroutines,
// batch items per call (1: one Put each, so one log record per item).
func fill(q *walq.Queue, n int64, body, workers, batch int, opts ...walq.PutOption) (time.Duration, error) {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			b := make([]byte, body)
			var one walq.Item
			for _, o := range opts {
				o(&one)
			}
			items := make([]walq.Item, batch)
			for {
				first := next.Add(int64(batch)) - int64(batch)
				if first >= n {
					return
				}
				k := int(min(int64(batch), n-first))
				var err error
				if k == 1 {
					_, err = q.Put(context.Background(), b, opts...)
				} else {
					for i := range k {
						items[i] = one
						items[i].Body = b
					}
					_, err = q.PutBatch(context.Background(), items[:k])
				}
				if err != nil {
					errs <- fmt.Errorf("fill: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// RecoverResult is what the recover workload measured.
type RecoverResult struct {
	Items          int64     `json:"items"`
	BodyBytes      int       `json:"body_bytes"`
	FillSeconds    float64   `json:"fill_seconds"`
	FromSnapshot   bool      `json:"from_snapshot"`
	CompactSeconds float64   `json:"compact_seconds,omitempty"`
	Cold           bool      `json:"cold"` // page cache dropped before the reopen
	Disk           diskUsage `json:"disk"`

	// Case is what the directory went through after the fill
	// (-recover-case); Touched how many items that touched.
	Case    string `json:"case"`
	Touched int64  `json:"touched,omitempty"`
	// ReadySeconds is from calling Open to the first Get returning an item:
	// the time a restarted service waits before it can work;
	// FirstGetSeconds the first Get's part of it.
	ReadySeconds    float64 `json:"ready_seconds"`
	FirstGetSeconds float64 `json:"first_get_seconds"`
	OpenSeconds     float64 `json:"open_seconds"`
	RecoverySeconds float64 `json:"recovery_seconds"` // Stats().Recovery.Duration
	Replayed        int     `json:"replayed"`         // log records replayed after the snapshot
	SnapshotLSN     uint64  `json:"snapshot_lsn"`
	Recovered       int     `json:"recovered"` // items in the queue after Open
	CPUSeconds      float64 `json:"cpu_seconds"`
	PeakHeapInuse   uint64  `json:"peak_heap_inuse"`
	MaxRSS          uint64  `json:"max_rss"`
}

func runRecover(cfg *config, qdir string, prof *profiler) (*RecoverResult, error) {
	opts := cfg.options()
	// Without a snapshot the log alone must be replayed; with one, the
	// snapshot is taken by the explicit Compact below, not at a moment of
	// the fill's choosing.
	opts.DisableAutoCompact = true
	q, err := walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	res := &RecoverResult{Items: cfg.n, BodyBytes: cfg.body, FromSnapshot: cfg.fromSnapshot, Cold: cfg.cold, Case: cfg.recoverCase}
	var filled time.Duration
	if cfg.recoverCase == "delayed" {
		// Two priorities, half each; then 1% of the items nacked into an
		// hour's backoff.
		for p := range 2 {
			d, err := fill(q, cfg.n/2+int64(p)*(cfg.n%2), cfg.body, cfg.producers, cfg.batch, walq.WithPriority(p))
			if err != nil {
				q.Close()
				return nil, err
			}
			filled += d
		}
		q.Close()
		o := opts
		o.Backoff = func(int) time.Duration { return time.Hour }
		if q, err = walq.Open(qdir, o); err != nil {
			return nil, err
		}
		if res.Touched, err = leaseSome(q, cfg.n/100, func(m walq.Message) error { return q.Nack(m.Receipt, errors.New("later")) }); err != nil {
			q.Close()
			return nil, err
		}
	} else {
		if filled, err = fill(q, cfg.n, cfg.body, cfg.producers, cfg.batch); err != nil {
			q.Close()
			return nil, err
		}
	}
	res.FillSeconds = filled.Seconds()
	if cfg.fromSnapshot {
		start := time.Now()
		if err := q.Compact(); err != nil {
			q.Close()
			return nil, err
		}
		res.CompactSeconds = time.Since(start).Seconds()
	}
	if err := q.Close(); err != nil {
		return nil, err
	}
	switch cfg.recoverCase {
	case "closed":
		// Some work after the snapshot, then a clean Close.
		if q, err = walq.Open(qdir, opts); err != nil {
			return nil, err
		}
		if res.Touched, err = leaseSome(q, cfg.n/100, func(m walq.Message) error { return q.Ack(m.Receipt) }); err != nil {
			q.Close()
			return nil, err
		}
		if err := q.Close(); err != nil {
			return nil, err
		}
	case "killed":
		// A process leases some items and dies with them leased.
		if res.Touched, err = leaseAndDie(qdir, cfg.n/100); err != nil {
			return nil, err
		}
	}
	if res.Disk, err = measureDisk(qdir); err != nil {
		return nil, err
	}
	q = nil
	// The filled queue is garbage now; collect it so that the reopen starts
	// from a heap as small as a restarted process's.
	runtime.GC()
	if cfg.cold {
		if err := dropCache(qdir); err != nil {
			return nil, err
		}
	}

	if err := prof.start(); err != nil {
		return nil, err
	}
	p := startProbe()
	start := time.Now()
	q, err = walq.Open(qdir, opts)
	if err != nil {
		p.end()
		return nil, err
	}
	defer q.Close()
	opened := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := q.Get(ctx); err != nil {
		p.end()
		return nil, fmt.Errorf("first get after recovery: %w", err)
	}
	ready := time.Since(start)
	res.FirstGetSeconds = (ready - opened).Seconds()
	use := p.end()
	if err := prof.stop(); err != nil {
		return nil, err
	}
	st := q.Stats()
	res.ReadySeconds = ready.Seconds()
	res.OpenSeconds = opened.Seconds()
	res.RecoverySeconds = st.Recovery.Duration.Seconds()
	res.Replayed = st.Recovery.Replayed
	res.SnapshotLSN = st.Recovery.SnapshotLSN
	res.Recovered = st.Items
	res.CPUSeconds = use.CPU.Seconds()
	res.PeakHeapInuse = use.PeakHeapInuse
	res.MaxRSS = use.MaxRSS
	want := cfg.n
	if cfg.recoverCase == "closed" {
		want -= res.Touched // acked
	}
	if int64(st.Items) != want {
		return nil, fmt.Errorf("recovered %d items, want %d", st.Items, want)
	}
	return res, q.Close()
}

// recoverCases are the values of -recover-case.
var recoverCases = []string{"pristine", "delayed", "closed", "killed"}

// leaseSome leases the next n items of q in delivery order and ends each
// lease with end; it returns how many it leased.
func leaseSome(q *walq.Queue, n int64, end func(walq.Message) error) (int64, error) {
	for i := int64(0); i < n; i++ {
		m, ok, err := q.TryGet()
		if err != nil {
			return i, err
		}
		if !ok {
			return i, nil
		}
		if err := end(m); err != nil {
			return i, err
		}
	}
	return n, nil
}

// leaseChildEnv makes walq-bench a process that leases items of a queue
// directory and waits to be killed: "DIR N".
const leaseChildEnv = "WALQ_BENCH_LEASE_CHILD"

// leaseAndDie starts walq-bench again as a process that opens dir, leases
// n items, says so and waits; then kills it with SIGKILL.
func leaseAndDie(dir string, n int64) (int64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", leaseChildEnv, dir, n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var leased int64
	_, scanErr := fmt.Fscanf(out, "leased %d\n", &leased)
	cmd.Process.Kill()
	cmd.Wait()
	if scanErr != nil {
		return 0, fmt.Errorf("the leasing process: %w", scanErr)
	}
	return leased, nil
}

// leaseChild is the process leaseAndDie starts: it reports false when this
// process is not one.
func leaseChild() bool {
	v := os.Getenv(leaseChildEnv)
	if v == "" {
		return false
	}
	var dir string
	var n int64
	if _, err := fmt.Sscanf(v, "%s %d", &dir, &n); err != nil {
		fmt.Fprintln(os.Stderr, "walq-bench lease child:", err)
		os.Exit(2)
	}
	q, err := walq.Open(dir, walq.Options{Visibility: visibility})
	if err != nil {
		fmt.Fprintln(os.Stderr, "walq-bench lease child:", err)
		os.Exit(1)
	}
	leased, err := leaseSome(q, n, func(walq.Message) error { return nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, "walq-bench lease child:", err)
		os.Exit(1)
	}
	fmt.Printf("leased %d\n", leased)
	select {} // until killed
}

// MemResult is what the mem workload measured: the heap that n queued
// items take beyond their bodies.
type MemResult struct {
	Items       int64   `json:"items"`
	BodyBytes   int     `json:"body_bytes"`
	FillSeconds float64 `json:"fill_seconds"`
	// Heap in use (bytes in in-use spans) after a GC, before Open and after
	// the fill.
	BaselineHeapInuse uint64 `json:"baseline_heap_inuse"`
	HeapInuse         uint64 `json:"heap_inuse"`
	// MappedBytes is the memory the items' entries take outside the heap
	// (Stats().IndexMappedBytes), which the heap figures leave out.
	MappedBytes int64 `json:"mapped_bytes"`
	// PerItem is (HeapInuse + mapped − baseline − bodies in memory) / items, the
	// figure of the target, the body cache excluded (bodies are on disk;
	// those in memory are the cache's and those not yet placed, from
	// Stats().Bodies); PerItemAlloc the same from live object bytes
	// (HeapAlloc), without the free space inside spans.
	PerItem      float64 `json:"per_item_bytes"`
	PerItemAlloc float64 `json:"per_item_alloc_bytes"`
	HeapObjects  uint64  `json:"heap_objects"`
	MaxRSS       uint64  `json:"max_rss"`
	// CachedBytes are the bodies held in memory at the measurement.
	CachedBytes int64 `json:"cached_bytes"`
}

func runMem(cfg *config, qdir string) (*MemResult, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	opts := cfg.options()
	opts.DisableAutoCompact = true // the figure is of the items at rest, not of a compaction's copies
	q, err := walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	filled, err := fill(q, cfg.n, cfg.body, cfg.producers, cfg.batch)
	if err != nil {
		return nil, err
	}
	q.Stats() // places the bodies of the last frames written, as the next call would
	runtime.GC()
	runtime.GC() // the second collects what the first's finalizers freed
	runtime.ReadMemStats(&after)
	st := q.Stats()
	if int64(st.Items) != cfg.n {
		return nil, fmt.Errorf("queue holds %d items, filled %d", st.Items, cfg.n)
	}
	cached := st.Bodies.CacheBytes + st.Bodies.UnplacedBytes
	bodies := float64(cached)
	mapped := float64(st.IndexMappedBytes) // in memory, outside the heap MemStats counts
	res := &MemResult{
		Items:             cfg.n,
		BodyBytes:         cfg.body,
		FillSeconds:       filled.Seconds(),
		BaselineHeapInuse: before.HeapInuse,
		HeapInuse:         after.HeapInuse,
		MappedBytes:       st.IndexMappedBytes,
		PerItem:           (float64(after.HeapInuse) - float64(before.HeapInuse) + mapped - bodies) / float64(cfg.n),
		PerItemAlloc:      (float64(after.HeapAlloc) - float64(before.HeapAlloc) + mapped - bodies) / float64(cfg.n),
		HeapObjects:       after.HeapObjects - before.HeapObjects,
		MaxRSS:            maxRSS(),
		CachedBytes:       cached,
	}
	if cfg.memProfile != "" {
		// Here, with the items still queued, the profile's in-use figures
		// show where their memory goes.
		if err := writeAllocProfile(cfg.memProfile); err != nil {
			return nil, err
		}
	}
	runtime.KeepAlive(q)
	return res, q.Close()
}
