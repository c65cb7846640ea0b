package walq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// idlePool runs WorkQueues over qs, all empty, and returns once the pool
// is idle (every queue watched, nothing leased), with the channel that
// yields what WorkQueues returned.
func idlePool(t *testing.T, qs ...*Queue) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var wqs []WorkQueue
	for _, q := range qs {
		wqs = append(wqs, WorkQueue{Queue: q})
	}
	done := make(chan error, 1)
	go func() {
		done <- WorkQueues(ctx, wqs, 1, func(context.Context, Message) error { return nil }, WorkOptions{})
	}()
	// Idle: each queue has its watcher.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, q := range qs {
			q.mu.Lock()
			n += len(q.rt.watchers)
			q.mu.Unlock()
		}
		if n == len(qs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("WorkQueues never watched its queues")
		}
		time.Sleep(time.Millisecond)
	}
	// The pool's first dispatch (a TryGet on each queue, which finds
	// nothing) follows the watches; nothing tells when it is done, so let
	// it happen: the pool then waits in its select.
	time.Sleep(100 * time.Millisecond)
	return done
}

// TestWorkQueuesIdleStopsOnClose: an idle WorkQueues (every queue
// empty, the pool waiting on the queues' watches) must stop when its
// queues stop serving, as Work does (workers.md: "If the queue stops
// serving (Close, a failed write), Work cancels its handlers and returns
// that error"; WorkQueues: "Any other error of a queue (closed, failed)
// stops it as Work stops"). Close and fail signal no watch, and the pool
// selects on nothing else: it waits until its context ends.
func TestWorkQueuesIdleStopsOnDirClose(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	a := mustOpenQueue(t, q, "a", QueueOptions{})
	done := idlePool(t, a)
	must(t, q.Close())
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("WorkQueues = %v, want ErrClosed", err)
		}
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("WorkQueues still waits 1.5s after its directory was closed")
	}
}

// TestWorkQueuesIdleStopsOnHandleClose: the same with its queue's
// handle closed (Get on a closed handle returns ErrClosed at once).
func TestWorkQueuesIdleStopsOnHandleClose(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	a := mustOpenQueue(t, q, "a", QueueOptions{})
	done := idlePool(t, a)
	must(t, a.Close())
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("WorkQueues = %v, want ErrClosed", err)
		}
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("WorkQueues still waits 1.5s after its only handle was closed")
	}
}

// TestWorkQueuesIdleStopsOnFailure: the same with the directory
// failed by a failed write (blocked Gets and Work return ErrFailed at once).
func TestWorkQueuesIdleStopsOnFailure(t *testing.T) {
	q, _, ffs := gatedQueue(t, Options{Sync: SyncAlways})
	a := mustOpenQueue(t, q, "a", QueueOptions{})
	done := idlePool(t, a)
	ffs.FailNext("write")
	if _, err := q.Put(context.Background(), []byte("x")); !errors.Is(err, ErrFailed) {
		t.Fatalf("put: %v, want ErrFailed", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("WorkQueues = %v, want ErrFailed", err)
		}
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("WorkQueues still waits 1.5s after the directory failed")
	}
}
