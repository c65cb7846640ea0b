package walq

import (
	"context"
	"testing"
	"time"
)

// TestHostileBeatExtendsByVisibilityInForce: a queue's Visibility is
// lowered from 30s to 3s while a handler runs. The next beat must extend
// the lease by the visibility in force (3s), as WorkOptions.HeartbeatEvery's
// documentation says ("Each beat reads the Visibility in force"); it once
// extended it by the 30s read at the beat before.
func TestHostileBeatExtendsByVisibilityInForce(t *testing.T) {
	d, clock, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "v", QueueOptions{Visibility: 30 * time.Second})
	started := make(chan Message, 1)
	ctx, cancel := context.WithCancel(context.Background())
	workDone := make(chan error, 1)
	go func() {
		workDone <- q.Work(ctx, 1, func(hctx context.Context, m Message) error {
			started <- m
			<-hctx.Done()
			return hctx.Err()
		}, WorkOptions{DrainTimeout: -1})
	}()
	defer func() {
		cancel()
		<-workDone
	}()
	q.waitForWaiters(1)
	id := mustPut(t, q, "job")
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("no handler started")
	}
	must(t, q.SetSettings(QueueOptions{Visibility: 3 * time.Second}))
	before := d.Stats().LastLSN
	clock.Advance(10 * time.Second) // the beat armed under 30s (every 10s)
	deadline := time.Now().Add(5 * time.Second)
	for d.Stats().LastLSN == before {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat")
		}
		time.Sleep(time.Millisecond)
	}
	it, err := q.Item(id)
	must(t, err)
	if left := it.LeaseEnd.Sub(clock.Now()); left > 3*time.Second {
		t.Fatalf("the beat after Visibility became 3s extended the lease by %v", left)
	}
}

// TestHostileRaisedVisibilityLetsLeaseRunOut: an operator raises a queue's
// Visibility from 3s to 1h while a handler runs. A beat once extended the
// lease by the 3s read before, then planned the beat after by the new
// visibility (every 20m): the lease ran out 3s later under the live
// handler, and a second worker ran the item at the same time. A beat now
// plans the next from the extension it granted.
func TestHostileRaisedVisibilityLetsLeaseRunOut(t *testing.T) {
	d, clock, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "v", QueueOptions{Visibility: 3 * time.Second})
	type run struct {
		m    Message
		done chan struct{}
	}
	started := make(chan run, 4)
	ctx, cancel := context.WithCancel(context.Background())
	workDone := make(chan error, 1)
	go func() {
		workDone <- q.Work(ctx, 2, func(hctx context.Context, m Message) error {
			r := run{m: m, done: make(chan struct{})}
			started <- r
			defer close(r.done)
			<-hctx.Done() // a long job
			return hctx.Err()
		}, WorkOptions{DrainTimeout: -1, Timeout: -1})
	}()
	defer func() {
		cancel()
		<-workDone
	}()
	q.waitForWaiters(2)
	mustPut(t, q, "job")
	var first run
	select {
	case first = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("no handler started")
	}
	q.waitForWaiters(1) // the second worker waits
	must(t, q.SetSettings(QueueOptions{Visibility: time.Hour}))
	// The beat due 1s into the lease (a third of 3s): wait for its record.
	before := d.Stats().LastLSN
	clock.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for d.Stats().LastLSN == before {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat")
		}
		time.Sleep(time.Millisecond)
	}
	d.settle()
	for range 4 { // 4s more, a second at a time; a beat would come each second under 3s
		clock.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
		d.settle()
	}
	select {
	case second := <-started:
		select {
		case <-first.done:
		default:
			t.Fatalf("item %d runs twice at once: attempt %d started while attempt %d still runs (Visibility raised to 1h; expired leases: %d)",
				second.m.ID, second.m.Attempt, first.m.Attempt, q.Stats().Expired)
		}
	case <-time.After(500 * time.Millisecond):
	}
	if st := q.Stats(); st.Expired != 0 {
		t.Fatalf("the lease of a live handler expired after Visibility was raised: Stats().Expired = %d", st.Expired)
	}
}
