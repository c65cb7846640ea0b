package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/walq/walq"
)

// ColdGetResult is what the coldget workload measured: Get latency with
// every body read from a disk whose page cache was dropped (no body cache),
// beside the latency of 4 KiB reads at random offsets of the same files,
// also cold: the disk's own figure for one read.
type ColdGetResult struct {
	Items     int64   `json:"items"`
	BodyBytes int     `json:"body_bytes"`
	DiskBytes int64   `json:"disk_bytes"`
	Gets      int     `json:"gets"`
	GetP50Us  float64 `json:"get_p50_us"`
	GetP99Us  float64 `json:"get_p99_us"`
	ReadP50Us float64 `json:"read_4k_p50_us"`
	ReadP99Us float64 `json:"read_4k_p99_us"`
	Ratio     float64 `json:"p99_ratio"` // Get p99 over the 4 KiB read p99
	Misses    uint64  `json:"misses"`    // Gets whose body was read from disk
}

// runColdGet fills the queue (under the configured sync policy), closes
// it, drops its files from the page cache and reopens it without a body
// cache; then times Get (and Ack, not timed) of gets items taken from
// across the backlog, each a body read from the disk, and, with the cache
// dropped again, as many 4 KiB reads at random offsets of the segment
// files.
func runColdGet(cfg *config, qdir string) (*ColdGetResult, error) {
	opts := cfg.options()
	opts.DisableAutoCompact = true
	q, err := walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	if _, err := fill(q, cfg.n, cfg.body, cfg.producers, cfg.batch); err != nil {
		q.Close()
		return nil, err
	}
	if err := q.Close(); err != nil {
		return nil, err
	}
	disk, err := measureDisk(qdir)
	if err != nil {
		return nil, err
	}
	if err := dropCache(qdir); err != nil {
		return nil, err
	}
	opts.BodyCacheBytes = -1
	q, err = walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	gets := int(min(cfg.n, 2000))
	// Items from across the backlog: a priority order would need a
	// priority per item; instead take the head and skip ahead by acking
	// without timing (the skipped bodies are read too, but not timed).
	step := max(1, int(cfg.n)/gets)
	lat := make([]time.Duration, 0, gets)
	ctx := context.Background()
	// Only the sealed segments are dropped before each timed Get: the tail
	// segment is where the lease record goes, and a dropped tail would
	// make its write read a page back first, a cost no body read has.
	dropSealed := func() error {
		segs, _ := filepath.Glob(filepath.Join(qdir, "log", "*.seg"))
		slices.Sort(segs)
		kept, _ := filepath.Glob(filepath.Join(qdir, "bodies", "*.seg"))
		if len(segs) > 0 {
			segs = segs[:len(segs)-1]
		}
		for _, f := range append(segs, kept...) {
			if err := dropCacheFile(f); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; len(lat) < gets; i++ {
		if i%step == 0 {
			if err := dropSealed(); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		m, err := q.Get(ctx)
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		if i%step == 0 {
			lat = append(lat, d)
		}
		if err := q.Ack(m.Receipt); err != nil {
			return nil, err
		}
		if int64(i+1) >= cfg.n {
			break
		}
	}
	st := q.Stats()
	res := &ColdGetResult{Items: cfg.n, BodyBytes: cfg.body, DiskBytes: disk.total(), Gets: len(lat), Misses: st.Bodies.Misses}
	res.GetP50Us, res.GetP99Us = pct(lat, 0.50), pct(lat, 0.99)

	// The disk beside it: 4 KiB reads at random offsets of the segments,
	// cold.
	var files []string
	for _, sub := range []string{"log", "bodies"} {
		m, _ := filepath.Glob(filepath.Join(qdir, sub, "*.seg"))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no segment files in %s", qdir)
	}
	if err := dropCache(qdir); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	reads := make([]time.Duration, 0, len(lat))
	for range cap(reads) {
		f, err := os.Open(files[rand.IntN(len(files))])
		if err != nil {
			return nil, err
		}
		info, _ := f.Stat()
		off := int64(0)
		if info.Size() > 8192 {
			off = rand.Int64N(info.Size()-4096) &^ 4095
		}
		start := time.Now()
		_, err = f.ReadAt(buf, off)
		reads = append(reads, time.Since(start))
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	res.ReadP50Us, res.ReadP99Us = pct(reads, 0.50), pct(reads, 0.99)
	if res.ReadP99Us > 0 {
		res.Ratio = res.GetP99Us / res.ReadP99Us
	}
	return res, nil
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Nanoseconds()) / 1e3
}
