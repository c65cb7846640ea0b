package walq

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestReviewScaleVisibilityRaisedBeforeFirstBeat: an operator raises a
// queue's Visibility (3s -> 60s) while a WorkQueues lease taken under the
// old one waits for its fsync. The lease was granted for 3s, but the first
// heartbeat is planned from the visibility read when the handler starts
// (newBeater: beatPlan, every = 60s/3 = 20s), not from what the lease was
// granted. The lease runs out at 3s under a live handler: the item goes
// back to the queue and a second worker runs it while the first still
// does. (beat() plans from what it granted; the first beat does not.)
// Work's own loop has the same first beat (Get waits for the lease's
// fsync the same way).
func TestReviewScaleVisibilityRaisedBeforeFirstBeat(t *testing.T) {
	g := newGatedFS()
	d, clock, _ := testQueue(t, Options{DisableAutoCompact: true, fs: g})
	v := mustOpenQueue(t, d, "v", QueueOptions{Visibility: 3 * time.Second})
	mustPut(t, v, "job")

	type run struct {
		m    Message
		done chan struct{}
	}
	started := make(chan run, 4)
	ctx, cancel := context.WithCancel(context.Background())
	workDone := make(chan error, 1)
	g.armed.Store(true) // the pool's first lease waits in its fsync
	go func() {
		workDone <- WorkQueues(ctx, []WorkQueue{{Queue: v}}, 2, func(hctx context.Context, m Message) error {
			r := run{m: m, done: make(chan struct{})}
			started <- r
			defer close(r.done)
			<-hctx.Done() // a long job: runs until cancelled
			return hctx.Err()
		}, WorkOptions{DrainTimeout: -1})
	}()
	var once sync.Once
	let := func() { once.Do(func() { close(g.release) }) }
	defer func() {
		let()
		cancel()
		<-workDone
	}()
	<-g.blocked // the lease (granted for 3s) is appended, its fsync held
	g.armed.Store(false)

	// The operator raises the visibility meanwhile.
	setDone := make(chan error, 1)
	go func() { setDone <- v.SetSettings(QueueOptions{Visibility: time.Minute}) }()
	waitFor(t, "the new visibility to apply", func() bool { return v.Settings().Visibility == time.Minute })
	let()
	if err := recv(t, "SetSettings", setDone); err != nil {
		t.Fatal(err)
	}
	first := recv(t, "the first handler", started)

	extended := advanceForBeat(d, clock, first.m.Receipt)
	// 1.5s more: past the end of the lease as granted.
	advance(t, d, clock, 1500*time.Millisecond)
	if st := v.Stats(); st.Expired != 0 {
		select {
		case <-first.done:
		default:
			t.Fatalf("the lease of a running handler expired (Stats().Expired = %d, heartbeat extended it: %v): "+
				"granted for 3s, its first heartbeat was planned from the raised visibility (every 20s)", st.Expired, extended)
		}
	}
	// And the consequence: after the backoff the second worker runs it.
	advance(t, d, clock, 1500*time.Millisecond)
	select {
	case second := <-started:
		select {
		case <-first.done:
		default:
			t.Fatalf("item %d runs twice at once (attempt %d beside attempt %d)", second.m.ID, second.m.Attempt, first.m.Attempt)
		}
	default:
	}
}

// TestReviewScaleVisibilityRaisedBeforeFirstBeatWork: the same under Queue.Work
// (its fast path): a Get's lease granted for 3s waits for its fsync while
// the Visibility is raised to a minute; the handler's first heartbeat is
// planned 20s on, and the lease runs out under it.
func TestReviewScaleVisibilityRaisedBeforeFirstBeatWork(t *testing.T) {
	g := newGatedFS()
	d, clock, _ := testQueue(t, Options{DisableAutoCompact: true, fs: g})
	v := mustOpenQueue(t, d, "v", QueueOptions{Visibility: 3 * time.Second})
	started := make(chan Message, 4)
	ctx, cancel := context.WithCancel(context.Background())
	workDone := make(chan error, 1)
	go func() {
		workDone <- v.Work(ctx, 1, func(hctx context.Context, m Message) error {
			started <- m
			<-hctx.Done()
			return hctx.Err()
		}, WorkOptions{DrainTimeout: -1})
	}()
	var once sync.Once
	let := func() { once.Do(func() { close(g.release) }) }
	defer func() {
		let()
		cancel()
		<-workDone
	}()
	v.waitForWaiters(1)
	g.armed.Store(true)
	putDone := make(chan error, 1)
	go func() { _, err := v.Put(context.Background(), []byte("job")); putDone <- err }()
	<-g.blocked // the put's fsync is held; the Get leases behind it
	waitFor(t, "the lease", func() bool { return v.Stats().Leased == 1 })
	g.armed.Store(false)
	setDone := make(chan error, 1)
	go func() { setDone <- v.SetSettings(QueueOptions{Visibility: time.Minute}) }()
	waitFor(t, "the new visibility to apply", func() bool { return v.Settings().Visibility == time.Minute })
	let()
	if err := recv(t, "the put", putDone); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, "SetSettings", setDone); err != nil {
		t.Fatal(err)
	}
	m := recv(t, "the handler", started)
	advanceForBeat(d, clock, m.Receipt)
	advance(t, d, clock, 1500*time.Millisecond)
	if st := v.Stats(); st.Expired != 0 {
		t.Fatalf("Work: the lease of a running handler expired (Stats().Expired = %d): granted for 3s, "+
			"its first heartbeat was planned from the raised visibility (every 20s)", st.Expired)
	}
}

// advanceForBeat moves the clock 2s into a lease granted for 3s, by when a
// heartbeat (every third of what was granted) must have extended it, and
// waits a while for the extension; it reports whether the lease's end moved.
func advanceForBeat(d *Queue, clock *ManualClock, r Receipt) bool {
	granted, _ := leaseEnd(d, r)
	clock.Advance(2 * time.Second)
	deadline := time.Now().Add(time.Second)
	for {
		if end, _ := leaseEnd(d, r); !end.Equal(granted) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}
