package walq

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestReviewScaleWorkQueuesMaxAbandonedPerQueue: WorkOptions.MaxAbandoned
// "bounds the abandoned handlers of this Work call ... handlers hung on a
// dependency shrink the pool rather than pile up". WorkQueues gives each
// queue a workRun of its own, each with its own count against
// MaxAbandoned (and its default, the pool's worker count), so a pool of
// one worker with MaxAbandoned 1 over three queues whose handlers hang
// (ignoring their context) abandons one per queue: three goroutines pile
// up where one may. With thousands of queues the bound is workers x
// queues.
func TestReviewScaleWorkQueuesMaxAbandonedPerQueue(t *testing.T) {
	d, clock, _ := testQueue(t, Options{})
	var qs []*Queue
	var wqs []WorkQueue
	for i := range 3 {
		h := mustOpenQueue(t, d, fmt.Sprintf("q%d", i), QueueOptions{})
		mustPut(t, h, fmt.Sprintf("job%d", i))
		qs = append(qs, h)
		wqs = append(wqs, WorkQueue{Queue: h})
	}
	started := make(chan Message, 8)
	cancelled := make(chan uint64, 8)
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WorkQueues(ctx, wqs, 1, func(hctx context.Context, m Message) error {
			go func() { <-hctx.Done(); cancelled <- m.ID }()
			started <- m
			<-release // hung on a dependency: ignores its context
			return nil
		}, WorkOptions{Timeout: time.Second, Grace: 100 * time.Millisecond, MaxAbandoned: 1, DrainTimeout: -1})
	}()
	defer func() {
		close(release)
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}()
	abandonedRunning := func() int64 {
		var n int64
		for _, h := range qs {
			n += h.Stats().Work.AbandonedRunning
		}
		return n
	}
	running := 0
	for range 3 {
		var m Message
		select {
		case m = <-started:
		case <-time.After(500 * time.Millisecond):
			// The pool held its one worker for a hung handler: the bound holds.
			if got := abandonedRunning(); got > 1 {
				t.Fatalf("%d abandoned handlers running, MaxAbandoned is 1", got)
			}
			return
		}
		running++
		clock.Advance(time.Second) // its Timeout
		if id := recv(t, "the handler's cancellation", cancelled); id != m.ID {
			t.Fatalf("cancelled %d, want %d", id, m.ID)
		}
		clock.Advance(100 * time.Millisecond) // its Grace: abandoned, or the worker waits
	}
	waitFor(t, "the third abandonment", func() bool { return abandonedRunning() == 3 })
	t.Fatalf("one worker, MaxAbandoned 1: %d handlers run at once and %d are abandoned (one per queue)", running, abandonedRunning())
}
