package walq

import (
	"runtime"
	"testing"
	"time"

	"github.com/walq/walq/state"
)

// TestClosedHandlePassesItsSignalOn: a Get on one handle of a named queue
// is signalled for the only leasable item, and its handle is closed before
// that Get takes the lock again (a goroutine descheduled between the
// signal and the lock). The Get returns ErrClosed and must pass the signal
// on: before, it kept it, and a Get blocked on another, open handle of the
// queue slept beside a ready item (found by a hostile review).
func TestClosedHandlePassesItsSignalOn(t *testing.T) {
	d, _, _ := testQueue(t, Options{})
	h1 := mustOpenQueue(t, d, "shared", QueueOptions{})
	h2 := mustOpenQueue(t, d, "shared", QueueOptions{})
	must(t, h1.Pause(time.Time{}))
	mustPut(t, h1, "x")

	g1 := getAsync(t, h1) // oldest waiter: the one a signal goes to first
	g2 := getAsync(t, h2)

	// What Resume does under the sequencer's lock, with the lock then kept
	// until the first Get has taken its signal off its channel and is
	// parked on the lock.
	d.mu.Lock()
	rt := h1.rt
	w1 := rt.waiters.list[0]
	if _, _, err := d.appendToLocked(rt.id, &state.PauseQueue{Time: d.qt.now()}); err != nil {
		d.mu.Unlock()
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(w1.ch) != 0 {
		if time.Now().After(deadline) {
			d.mu.Unlock()
			t.Fatal("the first Get never took its signal")
		}
		runtime.Gosched()
	}
	must(t, h1.Close()) // the operator closes the first handle now
	d.mu.Unlock()

	if r := awaitGet(t, g1); r.err == nil {
		t.Fatalf("Get on the closed handle returned an item: %+v", r.m)
	}
	st := h2.Stats()
	t.Logf("after the close: ready %d, waiting %d, woken %d, stalled %v", st.Ready, st.Wakeups.Waiting, st.Wakeups.Woken, st.Stalled())
	r := awaitGet(t, g2) // fails: the open handle's Get never wakes
	if r.err != nil || string(r.m.Body) != "x" {
		t.Fatalf("Get on the open handle: %q, %v", r.m.Body, r.err)
	}
}
