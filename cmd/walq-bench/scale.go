package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/walq/walq"
)

// ScaleResult is what the scale workload measured: a backlog of n items
// put, recovered, half drained while compactions run, and drained, with
// the disk used and the peak RSS of the whole run.
type ScaleResult struct {
	Items        int64     `json:"items"`
	BodyBytes    int       `json:"body_bytes"`
	FillSeconds  float64   `json:"fill_seconds"`
	DiskFilled   diskUsage `json:"disk_filled"`
	CloseSeconds float64   `json:"close_seconds"`
	OpenSeconds  float64   `json:"open_seconds"` // recovery
	HalfSeconds  float64   `json:"half_seconds"` // half drained, compactions running
	Compactions  int       `json:"compactions"`
	DiskHalf     diskUsage `json:"disk_half"` // after the last compaction at half
	LiveHalf     int64     `json:"live_half"`
	DrainSeconds float64   `json:"drain_seconds"`
	DiskDrained  diskUsage `json:"disk_drained"` // after a compaction of the empty queue
	Relocated    int64     `json:"relocated_bytes"`
	WriteAmp     float64   `json:"write_amplification"`
	MaxRSS       uint64    `json:"max_rss"`
}

// runScale fills the queue with n items, closes it, opens it again (the
// recovery), drains half of it with Work while compactions run back to
// back, compacts, drains the rest and compacts once more.
func runScale(cfg *config, qdir string) (*ScaleResult, error) {
	opts := cfg.options()
	opts.DisableAutoCompact = true
	res := &ScaleResult{Items: cfg.n, BodyBytes: cfg.body}
	q, err := walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	filled, err := fill(q, cfg.n, cfg.body, cfg.producers, cfg.batch)
	if err != nil {
		q.Close()
		return nil, err
	}
	res.FillSeconds = filled.Seconds()
	putBytes := q.Stats().PutBytes
	written := q.Stats().WrittenBytes
	start := time.Now()
	if err := q.Close(); err != nil {
		return nil, err
	}
	res.CloseSeconds = time.Since(start).Seconds()
	if res.DiskFilled, err = measureDisk(qdir); err != nil {
		return nil, err
	}
	start = time.Now()
	q, err = walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res.OpenSeconds = time.Since(start).Seconds()

	drain := func(n int64) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		left := n
		err := q.Work(ctx, cfg.consumers, func(context.Context, walq.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if left--; left <= 0 {
				cancel()
			}
			return nil
		}, walq.WorkOptions{})
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cerr error
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if cerr = q.Compact(); cerr != nil {
				return
			}
			res.Compactions++
		}
	})
	start = time.Now()
	err = drain(cfg.n / 2)
	close(stop)
	wg.Wait()
	res.HalfSeconds = time.Since(start).Seconds()
	if err != nil || cerr != nil {
		return nil, errors.Join(err, cerr)
	}
	if err := q.Compact(); err != nil {
		return nil, err
	}
	res.Compactions++
	if res.DiskHalf, err = measureDisk(qdir); err != nil {
		return nil, err
	}
	res.LiveHalf = q.Stats().LiveBytes
	start = time.Now()
	if err := drain(int64(q.Stats().Items)); err != nil {
		return nil, err
	}
	res.DrainSeconds = time.Since(start).Seconds()
	if err := q.Compact(); err != nil {
		return nil, err
	}
	if res.DiskDrained, err = measureDisk(qdir); err != nil {
		return nil, err
	}
	st := q.Stats()
	if st.Items != 0 {
		return nil, fmt.Errorf("%d items left after the drain", st.Items)
	}
	res.Relocated = st.Bodies.RelocatedBytes
	// Written over the fill and after the reopen, per byte of body put.
	if putBytes > 0 {
		res.WriteAmp = float64(written+st.WrittenBytes) / float64(putBytes)
	}
	res.MaxRSS = maxRSS()
	return res, q.Close()
}
