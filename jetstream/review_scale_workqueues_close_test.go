package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// emptyTries is a JetStream queue as a walq.Source that reports each
// TryGet that found nothing.
type emptyTries struct {
	*walqjs.Queue
	empty chan struct{}
}

func (e emptyTries) TryGet() (walq.Message, bool, error) {
	m, ok, err := e.Queue.TryGet()
	if !ok && err == nil {
		select {
		case e.empty <- struct{}{}:
		default:
		}
	}
	return m, ok, err
}

// TestReviewScaleWorkQueuesIdleJetStreamClose: an idle WorkQueues pool over
// the JetStream adapter learns that its queue stopped serving only from a
// TryGet, which it makes when the queue's Watch signals. The adapter's
// Watch goroutine returns when the queue is closed without a last signal,
// so the pool never tries again: it waits until its context ends, where
// Work (a Get blocked on the queue returns ErrClosed, TestCloseWakesGet)
// and WorkQueues over walq queues (TestWorkQueuesIdleStopsOnDirClose)
// return ErrClosed.
func TestReviewScaleWorkQueuesIdleJetStreamClose(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{PollInterval: 20 * time.Millisecond})
	src := emptyTries{Queue: q.Queue, empty: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- walq.WorkQueues(ctx, []walq.WorkQueue{{Queue: src}}, 1,
			func(context.Context, walq.Message) error { return nil }, walq.WorkOptions{})
	}()
	select {
	case <-src.empty: // idle: its TryGet found nothing
	case <-time.After(time.Second):
		t.Fatal("the pool never tried its queue")
	}
	if err := q.Queue.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, walq.ErrClosed) {
			t.Fatalf("WorkQueues returned %v after its queue closed, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		_, _, err := q.Queue.TryGet()
		t.Fatalf("WorkQueues over a closed JetStream queue still runs a second after Close (its Watch went quiet; "+
			"the pool waits for ctx), though one TryGet would tell it: %v", err)
	}
}
