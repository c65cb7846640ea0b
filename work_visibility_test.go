package walq

import (
	"context"
	"testing"
	"time"
)

// TestVisibilityChangeUnderWork: an operator shortens a queue's Visibility
// while Work runs on it. Work's heartbeat follows the visibility in force:
// it once kept the interval and extension of the Visibility it started
// with, so a lease taken under the shorter one ran out under a live
// handler and a second worker ran the item at the same time (found by a
// hostile review).
func TestVisibilityChangeUnderWork(t *testing.T) {
	d, clock, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "v", QueueOptions{Visibility: 30 * time.Second})
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
			<-hctx.Done() // a long job: runs until Work cancels it
			return hctx.Err()
		}, WorkOptions{DrainTimeout: -1})
	}()
	defer func() {
		cancel()
		<-workDone
	}()
	q.waitForWaiters(2) // both workers wait for an item

	// The operator shortens the visibility.
	must(t, q.SetSettings(QueueOptions{Visibility: 3 * time.Second}))
	mustPut(t, q, "job")
	var first run
	select {
	case first = <-started:
	case <-time.After(2 * time.Second):
		t.Fatal("no handler started")
	}
	// 5s pass, past the 3s lease, one second at a time: each second a
	// heartbeat (a third of the new visibility) extends the lease, and the
	// test waits for its record before the next second. Under the old
	// heartbeat (every 10s, of the visibility Work started with) none
	// comes, and the lease ends.
	for i := range 5 {
		before := d.Stats().LastLSN
		clock.Advance(time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for d.Stats().LastLSN == before {
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat %ds into a lease of 3s", i+1)
			}
			time.Sleep(time.Millisecond)
		}
		d.settle()
	}
	select {
	case second := <-started:
		select {
		case <-first.done:
			t.Logf("the first handler had returned before the second started")
		default:
			t.Fatalf("item %d runs twice at once: attempt %d started while attempt %d still runs (its lease of 3s ran out before Work's first heartbeat at 10s)",
				second.m.ID, second.m.Attempt, first.m.Attempt)
		}
	case <-time.After(300 * time.Millisecond):
	}
	if st := q.Stats(); st.Expired != 0 {
		t.Fatalf("a lease of a live handler expired: Stats().Expired = %d", st.Expired)
	}
}

// Work reads the visibility in force at every lease and heartbeat; the
// read takes no lock the queue's calls contend for. It once took the
// queue's mutex twice for each item Work leased, which halved a cycle
// under SyncNever (walq-bench cycle: 118,000 items/s on 997a6e0, 63,000
// after). With the mutex held, this read would wait forever.
func TestVisibilityReadsNoQueueLock(t *testing.T) {
	d, _, _ := testQueue(t, Options{Visibility: 7 * time.Second})
	q := mustOpenQueue(t, d, "v", QueueOptions{Visibility: 30 * time.Second})
	must(t, q.SetSettings(QueueOptions{Visibility: 11 * time.Second}))
	d.mu.Lock()
	defer d.mu.Unlock()
	if got := d.Visibility(); got != 7*time.Second {
		t.Errorf("default queue's Visibility = %v, want 7s", got)
	}
	if got := q.Visibility(); got != 11*time.Second {
		t.Errorf("Visibility after SetSettings = %v, want 11s", got)
	}
}
