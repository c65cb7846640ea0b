package walq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The wake-ups of blocked consumers and of the timer loop. Each test here
// failed before wake-ups came from one place (wakeLocked) and the timer's
// next wake and its tick shared one rule; each also checks the two
// invariants those keep (checkWakeups).

// getAsync starts a Get on q and returns once it is blocked waiting (the
// queue's waiters grew by one); its result comes on the channel.
func getAsync(t *testing.T, q *Queue) <-chan getResult {
	t.Helper()
	q.mu.Lock()
	before := q.rt.waiters.len()
	q.mu.Unlock()
	out := make(chan getResult, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		m, err := q.Get(ctx)
		out <- getResult{m, err}
	}()
	q.waitForWaiters(before + 1)
	return out
}

type getResult struct {
	m   Message
	err error
}

// awaitGet returns what a Get started by getAsync returned, failing the
// test if it is still blocked after a second (a consumer stalled).
func awaitGet(t *testing.T, c <-chan getResult) getResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(time.Second):
		t.Fatal("Get is still blocked with an item to lease: a consumer stalled")
		return getResult{}
	}
}

// A Get waits on a paused queue whose delayed item came due: the timer
// must not plan a wake-up in the past (it spun a core, as its next wake
// counted the due item while its tick skipped paused queues).
func TestTimerIdleOnPausedQueueWithDueItem(t *testing.T) {
	d, clock, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "paused", QueueOptions{})
	must(t, q.Pause(time.Time{}))
	if _, err := q.Put(context.Background(), []byte("x"), WithDelay(time.Second)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	get := getAsync(t, q)
	d.settle()
	checkWakeups(t, d)
	must(t, q.Resume())
	if r := awaitGet(t, get); r.err != nil || string(r.m.Body) != "x" {
		t.Fatalf("Get after Resume: %q, %v", r.m.Body, r.err)
	}
	checkWakeups(t, d)
}

// A timed pause ends with two Gets waiting and one item: one Get takes it
// when the pause ends, and the pause, ended but never resumed, must not
// keep the timer waking for the other.
func TestTimerIdleAfterTimedPauseEnds(t *testing.T) {
	d, clock, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "timed", QueueOptions{})
	must(t, q.Pause(clock.Now().Add(time.Second)))
	mustPut(t, q, "x")
	first, second := getAsync(t, q), getAsync(t, q)
	checkWakeups(t, d)
	advance(t, d, clock, 2*time.Second)
	select {
	case r := <-second:
		t.Fatalf("the second Get returned first: %v", r.err)
	default:
	}
	if r := awaitGet(t, first); r.err != nil || string(r.m.Body) != "x" {
		t.Fatalf("Get at the pause's end: %q, %v", r.m.Body, r.err)
	}
	checkWakeups(t, d)
	mustPut(t, q, "y")
	if r := awaitGet(t, second); r.err != nil || string(r.m.Body) != "y" {
		t.Fatalf("second Get: %q, %v", r.m.Body, r.err)
	}
}

// A handle closed while a Get waits on it: that Get returns, and leaves no
// waiter behind to swallow the wake-up meant for a Get on another handle
// of the queue (here, the one an ack gives under MaxInFlight, when no due
// item makes the timer look again).
func TestClosedHandleLeavesNoWaiter(t *testing.T) {
	d, _, _ := testQueue(t, Options{})
	h1 := mustOpenQueue(t, d, "shared", QueueOptions{MaxInFlight: 1})
	h2 := mustOpenQueue(t, d, "shared", QueueOptions{MaxInFlight: 1})
	mustPut(t, h2, "a")
	mustPut(t, h2, "b")
	m := mustTryGet(t, h2) // at the cap; b is ready
	gone := getAsync(t, h1)
	must(t, h1.Close())
	if r := awaitGet(t, gone); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Get on the closed handle: %v, want ErrClosed", r.err)
	}
	get := getAsync(t, h2)
	checkWakeups(t, d)
	must(t, h2.Ack(m.Receipt))
	checkWakeups(t, d)
	if r := awaitGet(t, get); r.err != nil || string(r.m.Body) != "b" {
		t.Fatalf("Get on the open handle: %q, %v", r.m.Body, r.err)
	}
}

// A Get blocked at MaxInFlight: deleting the leased item frees the cap, and
// the Get takes the next item.
func TestDeleteLeasedItemWakesGetAtCap(t *testing.T) {
	d, _, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "capped", QueueOptions{MaxInFlight: 1})
	mustPut(t, q, "a")
	mustPut(t, q, "b")
	m := mustTryGet(t, q)
	get := getAsync(t, q)
	checkWakeups(t, d)
	must(t, q.DeleteItems(m.ID))
	checkWakeups(t, d)
	if r := awaitGet(t, get); r.err != nil || string(r.m.Body) != "b" {
		t.Fatalf("Get after the delete: %q, %v", r.m.Body, r.err)
	}
}

// A Get that gives up after it was signalled passes the signal on: the item
// goes to the other Get.
func TestGiveUpPassesTheSignalOn(t *testing.T) {
	d, _, _ := testQueue(t, Options{})
	other := getAsync(t, d)
	d.mu.Lock()
	w := d.rt.waiters.add() // a Get about to give up, oldest but for other
	d.rt.waiters.list[0], d.rt.waiters.list[1] = w, d.rt.waiters.list[0]
	d.mu.Unlock()
	mustPut(t, d, "x") // signals w
	d.mu.Lock()
	select {
	case <-w.ch:
	default:
		d.mu.Unlock()
		t.Fatal("the oldest waiter was not signalled")
	}
	d.rt.woken-- // what Get does when it gives up with a signal
	d.wakeLocked(d.rt, d.qt.now())
	d.mu.Unlock()
	if r := awaitGet(t, other); r.err != nil || string(r.m.Body) != "x" {
		t.Fatalf("the other Get: %q, %v", r.m.Body, r.err)
	}
	checkWakeups(t, d)
}

// Stats counts an item ready once its due time has come, with no consumer
// to look, in this process and after a reopen; the collector's oldest
// ready age grows (it stayed 0, with the items counted delayed, until a
// consumer looked: the alert for consumers that are down never fired).
func TestStatsCountDueItemsReadyWithoutConsumers(t *testing.T) {
	q, clock, dir := testQueue(t, Options{})
	for range 3 {
		if _, err := q.Put(context.Background(), []byte("x"), WithDelay(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Put(context.Background(), []byte("later"), WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second) // the timer has not run: Stats must not need it
	check := func(when string, q *Queue) {
		t.Helper()
		st := q.Stats()
		if st.Ready != 3 || st.Delayed != 1 || st.OldestReady != 2*time.Second {
			t.Fatalf("%s: ready %d, delayed %d, oldest ready %v; want 3, 1, 2s", when, st.Ready, st.Delayed, st.OldestReady)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewCollector(q, "jobs"))
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if age := gaugeValue(families, "walq_oldest_ready_age_seconds"); age != 2 {
			t.Fatalf("%s: walq_oldest_ready_age_seconds %v, want 2", when, age)
		}
	}
	check("in the process", q)
	must(t, q.Close())
	q2, err := Open(dir, Options{Clock: clock, Visibility: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	check("after a reopen", q2)
}

func gaugeValue(families []*dto.MetricFamily, name string) float64 {
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// After an open, the items due are ready at once (the first Get pays no
// pass over the backlog), even when some of the backlog is not due: one
// item delayed made the first Get move every other item one at a time.
func TestOpenMakesDueItemsReady(t *testing.T) {
	q, clock, dir := testQueue(t, Options{Sync: SyncNever})
	items := make([]Item, 2000)
	for i := range items {
		items[i] = Item{Body: []byte("x"), Priority: i % 2}
	}
	if _, err := q.PutBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(context.Background(), []byte("later"), WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	must(t, q.Close())
	q2, err := Open(dir, Options{Clock: clock, Sync: SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	q2.mu.Lock()
	g := q2.st.Default().Gauges() // the heaps as they are, before any Get
	q2.mu.Unlock()
	if g.Ready != 2000 || g.Delayed != 1 {
		t.Fatalf("after Open the heaps hold %d ready and %d delayed, want 2000 and 1", g.Ready, g.Delayed)
	}
}

// Stats.Stalled: a Get asleep while its queue can lease an item that no
// signalled Get is coming for; not while the queue is paused, at its cap,
// or for DirStats. (The figures are Stats'; the queue's own timer would
// wake a waiter left asleep, so the live checks are of Stats' figures.)
func TestStatsStalled(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Stats
		want bool
	}{
		{"no waiter", Stats{Ready: 3}, false},
		{"a waiter, nothing ready", Stats{Wakeups: WakeStats{Waiting: 1}}, false},
		{"a waiter asleep, an item ready", Stats{Ready: 1, Wakeups: WakeStats{Waiting: 1}}, true},
		{"a waiter signalled for the item", Stats{Ready: 1, Wakeups: WakeStats{Waiting: 1, Woken: 1}}, false},
		{"two items, one signalled", Stats{Ready: 2, Wakeups: WakeStats{Waiting: 1, Woken: 1}}, true},
		{"at the cap", Stats{Ready: 5, Leased: 2, MaxInFlight: 2, Wakeups: WakeStats{Waiting: 1}}, false},
		{"under the cap", Stats{Ready: 5, Leased: 1, MaxInFlight: 2, Wakeups: WakeStats{Waiting: 1}}, true},
		{"paused", Stats{Ready: 5, Paused: true, Wakeups: WakeStats{Waiting: 1}}, false},
		{"DirStats", Stats{Ready: 5, Wakeups: WakeStats{Waiting: 1}, dir: true}, false},
	} {
		if got := tc.st.Stalled(); got != tc.want {
			t.Errorf("%s: Stalled() = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A live queue: Stats reports its waiters, and no stall.
	d, _, _ := testQueue(t, Options{})
	q := mustOpenQueue(t, d, "s", QueueOptions{MaxInFlight: 1})
	get := getAsync(t, q)
	if st := q.Stats(); st.Stalled() || st.Wakeups.Waiting != 1 || st.Wakeups.Woken != 0 {
		t.Fatalf("a Get on an empty queue: stalled %v, wakeups %+v", st.Stalled(), st.Wakeups)
	}
	mustPut(t, q, "x")
	if r := awaitGet(t, get); r.err != nil {
		t.Fatal(r.err)
	}
	if st := q.Stats(); st.Stalled() || st.Wakeups.Waiting != 0 || st.Wakeups.Woken != 0 || st.Wakeups.Signalled == 0 {
		t.Fatalf("after the Get took the item: stalled %v, wakeups %+v", st.Stalled(), st.Wakeups)
	}
}

// A put of an item due now makes it ready at once: neither the put nor a
// thousand of them wake the timer loop (whose every round looks at every
// queue), whatever else the directory holds.
func TestPutsDoNotWakeTheTimer(t *testing.T) {
	d, _, _ := testQueue(t, Options{Sync: SyncNever})
	for i := range 50 {
		mustOpenQueue(t, d, fmt.Sprintf("idle-%d", i), QueueOptions{})
	}
	deadline := time.Now().Add(time.Second)
	for d.DirStats().Wakeups.TimerLoop == 0 { // the loop's first round
		if time.Now().After(deadline) {
			t.Fatal("the timer loop never ran")
		}
		runtime.Gosched()
	}
	before := d.DirStats().Wakeups.TimerLoop
	for range 1000 {
		mustPut(t, d, "x")
	}
	if st := d.DirStats(); st.Wakeups.TimerLoop != before || st.Ready != 1000 {
		t.Fatalf("1,000 puts woke the timer loop %d times; %d ready", st.Wakeups.TimerLoop-before, st.Ready)
	}
}
