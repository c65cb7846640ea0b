package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/walq/walq"
)

// IdleResult is what the idle workload measured: the CPU an idle directory
// costs with consumers waiting on every queue, in the states that once
// kept its timer awake.
type IdleResult struct {
	Queues  int     `json:"queues"`
	Seconds float64 `json:"seconds"` // the measured window
	// CPUSeconds is the process's CPU time (user and system) in the
	// window, and CoreShare that over the window's length: 1 is a core
	// kept busy.
	CPUSeconds float64 `json:"cpu_seconds"`
	CoreShare  float64 `json:"core_share"`
	// TimerLoop and Committer are how often the directory's timer loop and
	// log committer woke in the window (Stats().Wakeups).
	TimerLoop uint64 `json:"timer_loop"`
	Committer uint64 `json:"committer"`
	Waiting   int    `json:"waiting"` // Gets blocked during the window
}

// idleSettle is how long the idle workload lets pass before it measures
// (at most half the window): time for the timed pauses to end and the
// short delays to come due.
const idleSettle = 1500 * time.Millisecond

// runIdle opens a directory of cfg.queues named queues, with a Get blocked
// on each, and measures the process's CPU over cfg.duration while nothing
// happens. The queues come in four kinds: empty; paused until resumed,
// holding an item that came due; paused until a time that passes before
// the window, holding nothing; holding an item delayed past the window.
func runIdle(cfg *config, qdir string) (*IdleResult, error) {
	settle := min(idleSettle, cfg.duration/2)
	opts := cfg.options()
	d, err := walq.Open(qdir, opts)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, cfg.queues)
	for i := range cfg.queues {
		q, err := d.OpenQueue(fmt.Sprintf("idle-%d", i), walq.QueueOptions{})
		if err != nil {
			return nil, err
		}
		switch i % 4 {
		case 1:
			if err := q.Pause(time.Time{}); err != nil {
				return nil, err
			}
			if _, err := q.Put(ctx, []byte("due"), walq.WithDelay(time.Millisecond)); err != nil {
				return nil, err
			}
		case 2:
			if err := q.Pause(time.Now().Add(settle / 2)); err != nil {
				return nil, err
			}
		case 3:
			if _, err := q.Put(ctx, []byte("later"), walq.WithDelay(time.Hour)); err != nil {
				return nil, err
			}
		}
		wg.Go(func() {
			_, err := q.Get(ctx)
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, walq.ErrClosed) {
				errs <- err
			}
		})
	}
	time.Sleep(settle)
	before := d.DirStats()
	p := startProbe()
	start := time.Now()
	time.Sleep(cfg.duration)
	use := p.end()
	window := time.Since(start)
	after := d.DirStats()
	select {
	case err := <-errs:
		return nil, fmt.Errorf("a blocked Get returned: %w", err)
	default:
	}
	return &IdleResult{
		Queues:     cfg.queues,
		Seconds:    window.Seconds(),
		CPUSeconds: use.CPU.Seconds(),
		CoreShare:  use.CPU.Seconds() / window.Seconds(),
		TimerLoop:  after.Wakeups.TimerLoop - before.Wakeups.TimerLoop,
		Committer:  after.Wakeups.Committer - before.Wakeups.Committer,
		Waiting:    after.Wakeups.Waiting,
	}, nil
}
