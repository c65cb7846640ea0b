package main

import (
	"sync"
	"time"

	"github.com/walq/walq"
)

// The compact workload runs the same cycle twice on one queue holding
// -prefill delayed items (live data that no consumer takes, so that a
// snapshot has something to write): first with no compaction at all, then
// with compactions forced one after the other (or -compact-every apart).
// It compares the put latency of the two phases, and after each compaction
// the disk the queue takes against the live bytes Stats reports.

// CompactResult is what the compact workload measured.
type CompactResult struct {
	Prefill      int        `json:"prefill"`
	Without      *RunResult `json:"without"`
	With         *RunResult `json:"with"`
	Compactions  int        `json:"compactions"`
	CompactMeanS float64    `json:"compact_mean_seconds"`
	CompactMaxS  float64    `json:"compact_max_seconds"`
	// P99Ratio is the put p99 with compaction over the put p99 without.
	P99Ratio float64 `json:"p99_ratio"`
	// Disk after the last compaction (the load stopped) and at its worst
	// after a compaction under load; Limit is 2 × live bytes + 2 segments.
	DiskAfter      diskUsage `json:"disk_after"`
	LiveAfter      int64     `json:"live_after"`
	LimitAfter     int64     `json:"limit_after"`
	WorstDisk      int64     `json:"worst_disk"` // log + snapshots
	WorstLive      int64     `json:"worst_live"`
	WorstOverLimit float64   `json:"worst_over_limit"` // worst disk / its limit
	SegmentBytes   int64     `json:"segment_bytes"`
	// WriteAmp is the bytes the queue wrote (log and snapshots) per byte
	// of body put, over the phase with compaction; Relocated the bytes of
	// bodies compaction copied forward then, and Kept the bytes in
	// segments moved out of the log for the bodies they hold, at the end.
	WriteAmp  float64 `json:"write_amplification"`
	Relocated int64   `json:"relocated_bytes"`
	Kept      int64   `json:"kept_bytes"`
}

func runCompact(cfg *config, qdir string, prof *profiler) (*CompactResult, error) {
	opts := cfg.options()
	opts.DisableAutoCompact = true
	q, err := walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := &CompactResult{Prefill: cfg.prefill, SegmentBytes: cfg.segmentBytes()}
	if cfg.prefill > 0 {
		if _, err := fill(q, int64(cfg.prefill), cfg.body, cfg.producers, 1000, walq.WithDelay(24*time.Hour)); err != nil {
			return nil, err
		}
	}
	l := newLoad(q, cfg)
	if res.Without, _, err = measure(l, prof); err != nil {
		return nil, err
	}

	limit := func(live int64) int64 { return 2*live + 2*res.SegmentBytes }
	before := q.Stats()
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		durs     []time.Duration
		errMu    sync.Mutex
		firstErr error
	)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			err := q.Compact()
			if err == nil {
				durs = append(durs, time.Since(start))
				var disk diskUsage
				if disk, err = measureDisk(qdir); err == nil {
					live := q.Stats().LiveBytes
					if r := float64(disk.total()) / float64(limit(live)); r > res.WorstOverLimit {
						res.WorstOverLimit, res.WorstDisk, res.WorstLive = r, disk.total(), live
					}
				}
			}
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
				return
			}
			if cfg.compactEvery > 0 {
				select {
				case <-stop:
					return
				case <-time.After(cfg.compactEvery):
				}
			}
		}
	})
	res.With, _, err = measure(l, prof)
	close(stop)
	wg.Wait()
	after := q.Stats()
	if put := after.PutBytes - before.PutBytes; put > 0 {
		res.WriteAmp = float64(after.WrittenBytes-before.WrittenBytes) / float64(put)
	}
	res.Relocated = after.Bodies.RelocatedBytes - before.Bodies.RelocatedBytes
	if err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if err := prof.stop(); err != nil {
		return nil, err
	}
	if err := q.Compact(); err != nil {
		return nil, err
	}
	if res.DiskAfter, err = measureDisk(qdir); err != nil {
		return nil, err
	}
	res.LiveAfter = q.Stats().LiveBytes
	res.Kept = q.Stats().KeptBytes
	res.LimitAfter = limit(res.LiveAfter)
	res.Compactions = len(durs)
	for _, d := range durs {
		res.CompactMeanS += d.Seconds() / float64(len(durs))
		res.CompactMaxS = max(res.CompactMaxS, d.Seconds())
	}
	if p := res.Without.Latency["put"].P99Us; p > 0 {
		res.P99Ratio = res.With.Latency["put"].P99Us / p
	}
	return res, q.Close()
}
