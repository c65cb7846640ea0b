package crashtest

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq"
)

// stalledStats are the figures of a queue with a Get asleep and an item
// to lease: Stats.Stalled.
func stalledStats() walq.Stats {
	return walq.Stats{Ready: 1, Delivered: 7, Wakeups: walq.WakeStats{Waiting: 1}}
}

// The watch's runs: a queue stuck on every read with nothing changed is
// found once it has lasted consumerStallAfter, and only then; a change of
// figures, of handle or incarnation, an admin call, a pause or a cap
// reached starts the count again.
func TestConsumerWatchRuns(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, queueOptions(walq.SyncNever, 8<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	other, err := q.OpenQueue("q1", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	signalled := walq.Stats{Ready: 2, Leased: 1, Delivered: 3, Wakeups: walq.WakeStats{Waiting: 1, Woken: 2}}
	capped := walq.Stats{Ready: 3, Leased: 2, MaxInFlight: 2, Wakeups: walq.WakeStats{Waiting: 1}}
	paused := stalledStats()
	paused.Paused = true
	moved := stalledStats()
	moved.Delivered++

	type read struct {
		h       *walq.Queue
		qid     uint64
		changes uint64
		st      walq.Stats
		ms      int
		found   bool
	}
	for _, tc := range []struct {
		name  string
		reads []read
	}{
		{"stalled for 200ms", []read{{q, 0, 0, stalledStats(), 0, false}, {q, 0, 0, stalledStats(), 150, false}, {q, 0, 0, stalledStats(), 200, true}}},
		{"signalled Gets not back", []read{{q, 0, 0, signalled, 0, false}, {q, 0, 0, signalled, 250, true}}},
		{"found once", []read{{q, 0, 0, stalledStats(), 0, false}, {q, 0, 0, stalledStats(), 200, true}, {q, 0, 0, stalledStats(), 250, false}}},
		{"figures moved", []read{{q, 0, 0, stalledStats(), 0, false}, {q, 0, 0, moved, 200, false}, {q, 0, 0, moved, 350, false}, {q, 0, 0, moved, 400, true}}},
		{"an admin call between", []read{{q, 0, 0, stalledStats(), 0, false}, {q, 0, 2, stalledStats(), 200, false}, {q, 0, 2, stalledStats(), 400, true}}},
		{"an admin call under way", []read{{q, 0, 1, stalledStats(), 0, false}, {q, 0, 1, stalledStats(), 300, false}}},
		{"another handle", []read{{q, 0, 0, stalledStats(), 0, false}, {other, 0, 0, stalledStats(), 200, false}}},
		{"another incarnation", []read{{q, 0, 0, stalledStats(), 0, false}, {q, 9, 0, stalledStats(), 200, false}}},
		{"paused between", []read{{q, 0, 0, stalledStats(), 0, false}, {q, 0, 0, paused, 100, false}, {q, 0, 0, stalledStats(), 250, false}}},
		{"at its cap", []read{{q, 0, 0, capped, 0, false}, {q, 0, 0, capped, 300, false}}},
		{"nobody waits", []read{{q, 0, 0, walq.Stats{Ready: 5}, 0, false}, {q, 0, 0, walq.Stats{Ready: 5}, 300, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w consumerWatch
			for i, r := range tc.reads {
				run := w.observe(0, r.h, r.qid, r.changes, r.st, at(r.ms))
				if (run != nil) != r.found {
					t.Fatalf("read %d (at %d ms): found %v, want %v", i, r.ms, run != nil, r.found)
				}
				if run != nil {
					run.judged = true
				}
			}
		})
	}
}

// A queue whose reads show a consumer stalled, and stay the same, is
// reported with its figures; one whose figures move is not.
func TestConsumerWatchReportsStall(t *testing.T) {
	c := testChild(t, t.TempDir(), 0, DefaultMix)
	var reads atomic.Int64
	stuck := atomic.Bool{}
	stuck.Store(true)
	c.queueStats = func(*walq.Queue) walq.Stats {
		st := stalledStats()
		if !stuck.Load() {
			st.Delivered = uint64(reads.Add(1)) // a consumer takes an item each time
		}
		return st
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.watchConsumers(quit)
	}()
	time.Sleep(consumerStallAfter + 3*consumerWatchEvery)
	stuck.Store(false)
	v := c.reported(t, 'V')
	if len(v) != 1 || !strings.Contains(v[0], "consumer stalled on queue (default)") || !strings.Contains(v[0], "Stats.Stalled") ||
		!strings.Contains(v[0], "ready 1") || !strings.Contains(v[0], "Gets waiting 1") {
		t.Fatalf("violations reported: %q, want one for the default queue with its figures", v)
	}
	time.Sleep(consumerStallAfter + 2*consumerWatchEvery)
	close(quit)
	<-done
	if v := c.reported(t, 'V'); len(v) != 1 {
		t.Fatalf("violations reported once the figures moved: %q", v[1:])
	}
	if w := c.reported(t, 'W'); len(w) < 5 {
		t.Fatalf("W lines: %q, want one per round", w)
	}
}

// The workload's quiet phases and handles closed under blocked Gets, on a
// queue that wakes its consumers as it should: the watch finds nothing,
// the Gets on the closed handle return, and every Get the phase reported
// has its completion.
func TestQuietPhaseWithWatch(t *testing.T) {
	c := testChild(t, t.TempDir(), 0, DefaultMix)
	c.cfg.Queues = 1
	s := &slot{name: queueName(0), index: 0}
	c.openSlot(s)
	c.slots = append(c.slots, s)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, sl := range c.slots {
		h, qid := sl.get()
		rng := rand.New(rand.NewPCG(1, qid))
		var mu sync.Mutex
		pick := func(n int) int {
			mu.Lock()
			defer mu.Unlock()
			return rng.IntN(n)
		}
		wg.Go(func() {
			h.Work(ctx, 1, func(ctx context.Context, m walq.Message) error { return c.handle(ctx, sl, qid, m, pick) },
				walq.WorkOptions{HeartbeatEvery: workHeartbeat, Timeout: workTimeout})
		})
	}
	quit := make(chan struct{})
	wg.Go(func() { c.watchConsumers(quit) })
	rng := rand.New(rand.NewPCG(2, 2))
	for range 3 {
		c.put(rng, s)
	}
	c.quiet.Store(s)
	c.consumersIdle(s, 100*time.Millisecond)
	c.closeUnderGet(rng, s)
	for range 2 {
		if !c.consumersIdle(s, 100*time.Millisecond) {
			t.Fatal("the Work consumer of the quiet queue never waited with nothing to lease")
		}
		c.put(rng, s)
	}
	time.Sleep(consumerStallAfter + 2*consumerWatchEvery)
	close(quit)
	cancel()
	wg.Wait()
	if v := c.reported(t, 'V'); len(v) > 0 {
		t.Fatalf("violations: %q", v)
	}
	if h, _ := s.get(); h.Stats().Wakeups.Waiting != 0 {
		t.Fatalf("Gets still waiting after the handle closed and Work ended: %d", h.Stats().Wakeups.Waiting)
	}
	data := c.reported(t, 'E')
	closed := 0
	for _, e := range data {
		if strings.HasSuffix(e, "closed") {
			closed++
		}
	}
	if closed == 0 {
		t.Fatalf("no Get on the closed handle returned ErrClosed: %q", data)
	}
	if s.changes.Load() != 2 {
		t.Fatalf("admin calls counted %d, want 2 (the handle opened and closed)", s.changes.Load())
	}
}

// The W line reaches the summary.
func TestWatchLine(t *testing.T) {
	events, err := parseReport([]byte("W 40 2 5 61000000\nW 80 3 6 51000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep := newLedger().ingest(events, func(event) bool { return true })
	if rep.watch != [4]uint64{80, 3, 6, 51000000} {
		t.Fatalf("watch %v, want the last line's", rep.watch)
	}
	if _, err := parseReport([]byte("W 40 2\n")); err == nil {
		t.Fatal("a short W line parsed")
	}
}

// The idle check on a recovered directory with every kind of pending
// work: it finds nothing, and leaves the directory as it was.
func TestIdleCheck(t *testing.T) {
	root := t.TempDir()
	h := &harness{root: root, queueDir: filepath.Join(root, "queue"), led: newLedger(), sync: walq.SyncAlways,
		cfg: Config{SegmentSize: 8 << 10, IdleEvery: 1}}
	q, err := walq.Open(h.queueDir, queueOptions(walq.SyncAlways, 8<<10))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		hq, err := q.OpenQueue(queueName(i), namedQueueOptions(i))
		if err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			if _, err := hq.Put(ctx, []byte("x"), walq.WithDelay(time.Duration(j)*50*time.Millisecond),
				walq.WithDeadline(time.Now().Add(time.Second)), walq.WithKey(strings.Repeat("k", j+1))); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := hq.TryGet(); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := hq.Pause(time.Now().Add(300 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := q.Put(ctx, []byte("y"), walq.WithKey("k")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := filepath.Glob(filepath.Join(h.queueDir, "log", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if !h.idleDue("cycle 1") {
		t.Fatal("the first check has no idle check")
	}
	if err := h.idleCheck("cycle 1"); err != nil {
		t.Fatal(err)
	}
	if len(h.led.violations) > 0 {
		t.Fatalf("violations: %q", h.led.violations)
	}
	if h.sum.IdleChecks != 1 || h.sum.IdleTimerMax > idleTimerSlack || h.sum.IdleCommitterMax != 0 {
		t.Fatalf("idle checks %d, timer %d, committer %d", h.sum.IdleChecks, h.sum.IdleTimerMax, h.sum.IdleCommitterMax)
	}
	after, _ := filepath.Glob(filepath.Join(h.queueDir, "log", "*"))
	if strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("the queue directory changed: %q, then %q", before, after)
	}
	if matches, _ := filepath.Glob(filepath.Join(root, "idle*")); len(matches) > 0 {
		t.Fatalf("the copy is left: %q", matches)
	}
}
