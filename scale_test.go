package walq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// createQueues makes n queues tenant-00000 on as OpenQueue would, with
// their records in one batch: the test is of what they cost once made.
func createQueues(t testing.TB, q *Queue, n int) {
	t.Helper()
	q.mu.Lock()
	var commit *wal.Commit
	for i := range n {
		name := fmt.Sprintf("tenant-%05d", i)
		set, err := q.opts.queueSettings(name, QueueOptions{})
		if err != nil {
			q.mu.Unlock()
			t.Fatal(err)
		}
		var lsn uint64
		lsn, commit, err = q.appendToLocked(state.DefaultQueue, &state.CreateQueue{Time: q.qt.now(), Name: name, Settings: set.record()})
		if err != nil {
			q.mu.Unlock()
			t.Fatal(err)
		}
		q.rts[lsn] = newRT(lsn, name, set)
	}
	q.mu.Unlock()
	if commit == nil {
		return // none made
	}
	if err := q.wait(commit); err != nil {
		t.Fatal(err)
	}
}

// TestTwentyThousandQueues runs a directory of 20,000 named queues: the
// timer visits only the queues whose time comes (a delayed item, the end
// of a pause with a Get waiting), never all of them; and operations on one
// queue visit none. (TestListTwentyThousandQueues, a long test, lists
// them.)
func TestTwentyThousandQueues(t *testing.T) {
	const n = 20000
	q, clock, _ := testQueue(t, Options{Sync: SyncNever})
	createQueues(t, q, n)
	hs := make([]*Queue, n)
	for _, i := range []int{0, n / 2, n - 1} {
		hs[i] = mustOpenQueue(t, q, fmt.Sprintf("tenant-%05d", i), QueueOptions{})
	}
	first, middle, last := hs[0], hs[n/2], hs[n-1]

	// A Get waits on a paused queue; two queues hold a delayed item each.
	if err := first.Pause(clock.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	mustPut(t, first, "after the pause")
	got := make(chan Message, 1)
	go func() {
		m, err := first.Get(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	waitFor(t, "the Get to wait", func() bool { return first.Stats().Wakeups.Waiting == 1 })
	mustPut(t, middle, "in 5s", WithDelay(5*time.Second))
	mustPut(t, last, "in 10s", WithDelay(10*time.Second))
	checkWakeups(t, q)

	visits := func() uint64 { return q.metrics.timerVisits.Load() }
	before := visits()
	advance(t, q, clock, 3*time.Second)
	if m := recv(t, "the Get on the queue whose pause ended", got); string(m.Body) != "after the pause" {
		t.Fatalf("got %q", m.Body)
	}
	advance(t, q, clock, 2*time.Second)
	if m := mustTryGet(t, middle); string(m.Body) != "in 5s" {
		t.Fatalf("got %q", m.Body)
	}
	expectEmpty(t, last)
	advance(t, q, clock, 5*time.Second)
	if m := mustTryGet(t, last); string(m.Body) != "in 10s" {
		t.Fatalf("got %q", m.Body)
	}
	// Three queues came due, once each.
	if v := visits() - before; v != 3 {
		t.Fatalf("the timer visited queues %d times for three that came due", v)
	}

	// Work on one queue visits no other.
	before = visits()
	for range 200 {
		mustPut(t, q, "x")
		m := mustTryGet(t, q)
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if v := visits() - before; v != 0 {
		t.Fatalf("puts, gets and acks on the default queue made the timer visit queues %d times", v)
	}
	checkWakeups(t, q)

}

// TestKeysCountAtNow: Stats.Keys counts the keys a Put would find held
// now, on a queue with no records since (it counted a key whose window had
// passed until the next record); and a queue with a long key window holds
// back the forgetting of no other queue's keys.
func TestKeysCountAtNow(t *testing.T) {
	q, clock, _ := testQueue(t, Options{KeyWindow: time.Minute})
	long := mustOpenQueue(t, q, "long", QueueOptions{KeyWindow: time.Hour})
	ack := func(h *Queue, key string) {
		t.Helper()
		mustPut(t, h, "x", WithKey(key))
		if err := h.Ack(mustTryGet(t, h).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	ack(long, "held for an hour")
	ack(q, "held for a minute")
	if st, ls := q.Stats(), long.Stats(); st.Keys != 1 || ls.Keys != 1 {
		t.Fatalf("Keys = %d and %d, want 1 and 1", st.Keys, ls.Keys)
	}
	advance(t, q, clock, time.Minute)
	if st, ls := q.Stats(), long.Stats(); st.Keys != 0 || ls.Keys != 1 {
		t.Fatalf("a minute on, with no record since: Keys = %d and %d, want 0 and 1", st.Keys, ls.Keys)
	}
	// A record moves the state's time on: the default queue's key is
	// forgotten, though the long queue's was released before it.
	mustPut(t, q, "later")
	advance(t, q, clock, 2*time.Second)
	q.mu.Lock()
	kept := q.st.KeysReleased()
	q.mu.Unlock()
	if kept != 1 {
		t.Fatalf("%d released keys kept, want 1 (the long queue's)", kept)
	}
	checkWakeups(t, q)
}
