package main

import (
	"context"
	"fmt"
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

	// ReadySeconds is from calling Open to the first Get returning an item:
	// the time a restarted service waits before it can work.
	ReadySeconds    float64 `json:"ready_seconds"`
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
	res := &RecoverResult{Items: cfg.n, BodyBytes: cfg.body, FromSnapshot: cfg.fromSnapshot, Cold: cfg.cold}
	filled, err := fill(q, cfg.n, cfg.body, cfg.producers, cfg.batch)
	if err != nil {
		q.Close()
		return nil, err
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
	if int64(st.Items) != cfg.n {
		return nil, fmt.Errorf("recovered %d items, filled %d", st.Items, cfg.n)
	}
	return res, q.Close()
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
