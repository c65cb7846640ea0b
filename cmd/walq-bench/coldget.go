package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// it and reopens it without a body cache. It keeps gets items spread evenly
// across the backlog and deletes the rest (no body is read for that), drops
// the sealed segments from the page cache once, and times Get (and Ack,
// not timed) of every item left: each is a body read from the disk, and
// none is near the one before, so the kernel's readahead has nothing to
// bring in early. After each Get it times a 4 KiB read at a random offset
// of a random sealed segment: the disk's own figure for one read, taken in
// the same moments.
//
// An earlier version dropped the cache before each timed Get and acked
// the items between (reading their bodies): the drop's hundreds of
// system calls made the lease itself, an in-memory step, take tens of
// microseconds, so the figure measured the drop more than the read.
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
	opts.BodyCacheBytes = -1
	q, err = walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	gets := int(max(1, min(cfg.n/20, 5000)))
	if err := thin(q, cfg.n, gets); err != nil {
		return nil, err
	}
	// Only the sealed segments are dropped: the tail segment is where the
	// lease records go, and a dropped tail would make its write read a
	// page back first, a cost no body read has.
	segs, _ := filepath.Glob(filepath.Join(qdir, "log", "*.seg"))
	slices.Sort(segs)
	kept, _ := filepath.Glob(filepath.Join(qdir, "bodies", "*.seg"))
	if len(segs) > 0 {
		segs = segs[:len(segs)-1]
	}
	for _, f := range append(segs, kept...) {
		if err := dropCacheFile(f); err != nil {
			return nil, err
		}
	}
	files := append(segs, kept...)
	if len(files) == 0 {
		return nil, fmt.Errorf("no sealed segment files in %s", qdir)
	}
	// Each timed Get is followed by a timed 4 KiB read at a random offset
	// of a random sealed segment, so that the two figures come from the
	// same minutes of the disk's life: a virtual disk's latency drifts.
	// The random reads bring at most 1% of the backlog into the cache, so
	// a few Gets may find their body there.
	lat := make([]time.Duration, 0, gets)
	reads := make([]time.Duration, 0, gets)
	buf := make([]byte, 4096)
	ctx := context.Background()
	for range gets {
		start := time.Now()
		m, err := q.Get(ctx)
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		lat = append(lat, d)
		if err := q.Ack(m.Receipt); err != nil {
			return nil, err
		}
		r, err := randomRead(files[rand.IntN(len(files))], buf)
		if err != nil {
			return nil, err
		}
		reads = append(reads, r)
	}
	st := q.Stats()
	res := &ColdGetResult{Items: cfg.n, BodyBytes: cfg.body, DiskBytes: disk.total(), Gets: len(lat), Misses: st.Bodies.Misses}
	res.GetP50Us, res.GetP99Us = pct(lat, 0.50), pct(lat, 0.99)
	if left := st.Ready + st.Delayed + st.Leased; left != 0 {
		return nil, fmt.Errorf("coldget: %d items left after the timed Gets, want none", left)
	}

	res.ReadP50Us, res.ReadP99Us = pct(reads, 0.50), pct(reads, 0.99)
	if res.ReadP99Us > 0 {
		res.Ratio = res.GetP99Us / res.ReadP99Us
	}
	return res, nil
}

// randomRead times one 4 KiB read at a random 4 KiB-aligned offset of the
// file at path.
func randomRead(path string, buf []byte) (time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	off := int64(0)
	if info.Size() > 8192 {
		off = rand.Int64N(info.Size()-4096) &^ 4095
	}
	start := time.Now()
	_, err = f.ReadAt(buf, off)
	d := time.Since(start)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s at %d: %w", path, off, err)
	}
	return d, nil
}

// thin deletes all but keep of the queue's n items, keeping every
// (n/keep)th in ID order, so that the bodies left lie apart on disk.
func thin(q *walq.Queue, n int64, keep int) error {
	step := max(1, int(n)/keep)
	var doomed []uint64
	kept, seen := 0, 0
	for after := uint64(0); ; {
		page, err := q.ListItems(walq.ListOptions{After: after, Limit: walq.MaxListLimit})
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			if seen%step == 0 && kept < keep {
				kept++
			} else {
				doomed = append(doomed, it.ID)
			}
			seen++
		}
		for len(doomed) >= 1000 || (page.Next == 0 && len(doomed) > 0) {
			k := min(1000, len(doomed))
			if err := q.DeleteItems(doomed[:k]...); err != nil {
				return fmt.Errorf("coldget: thin the backlog: %w", err)
			}
			doomed = doomed[k:]
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	if int64(seen) != n || kept != keep {
		return fmt.Errorf("coldget: found %d items (want %d), kept %d (want %d)", seen, n, kept, keep)
	}
	return nil
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Nanoseconds()) / 1e3
}
