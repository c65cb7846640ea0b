package crashtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
)

// testChild is a child workload in this process, on a queue in a temporary
// directory, whose report the test reads back.
func testChild(t *testing.T, dir string, offset time.Duration, mix Mix) *child {
	t.Helper()
	rep, err := openReport(filepath.Join(t.TempDir(), "report"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.f.Close() })
	clock := newSteppedClock(offset)
	opts := queueOptions(walq.SyncAlways, 8<<10)
	opts.Clock = clock
	q, err := walq.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	c := &child{mix: mix, q: q, clock: clock, rep: rep, running: runningSet{m: make(map[string]running)}}
	c.slots = []*slot{{h: q}}
	return c
}

func (c *child) reported(t *testing.T, kind byte) []string {
	t.Helper()
	data, err := os.ReadFile(c.rep.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	events, err := parseReport(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		if ev.kind == kind {
			out = append(out, strings.Join(ev.args, " "))
		}
	}
	return out
}

func (c *child) putOne(t *testing.T) string {
	t.Helper()
	tok := "c1." + time.Now().Format("150405.000000000")
	c.intent("put %s/0/0/-", tok)
	if _, err := c.q.Put(context.Background(), bodyOf(tok)); err != nil {
		t.Fatal(err)
	}
	return tok
}

// The check of "no item runs on two workers while its first handler is
// alive": a handler that outlives the visibility with no heartbeat (as
// Work's first heartbeat was, late by a clock step back across a restart,
// before queue time) loses its lease; the item is delivered again while
// the first handler runs, and the second handler's entry reports it.
func TestRunningSetCatchesSecondRun(t *testing.T) {
	c := testChild(t, t.TempDir(), 0, Mix{Slow: 100, Ack: 100})
	tok := c.putOne(t)
	first, err := c.q.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	slowest := func(n int) int { return n - 1 } // runs for twice the visibility, less a millisecond
	wg.Go(func() { c.handle(context.Background(), c.slots[0], 0, first, slowest) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*visibility)
	defer cancel()
	second, err := c.q.Get(ctx) // once the first lease has run out
	if err != nil {
		t.Fatalf("the item did not come back after its lease ran out: %v", err)
	}
	c.handle(context.Background(), c.slots[0], 0, second, slowest)
	wg.Wait()
	v := c.reported(t, 'V')
	if len(v) != 1 || !strings.Contains(v[0], tok) || !strings.Contains(v[0], "second worker") {
		t.Fatalf("violations reported: %q, want one for item %s on a second worker", v, tok)
	}
	if _, running := c.running.has(tok); running {
		t.Fatal("the item is still in the running set after both handlers returned")
	}
}

// The same handlers under Work, whose heartbeat keeps their lease, after a
// restart with the wall clock stepped back by an hour and with steps while
// they run: no second run, no lost lease.
func TestWorkHeartbeatAcrossClockStepBack(t *testing.T) {
	dir := t.TempDir()
	mix := Mix{Slow: 100, Ack: 100}
	before := testChild(t, dir, 0, mix)
	for range 3 {
		before.putOne(t)
	}
	if err := before.q.Close(); err != nil {
		t.Fatal(err)
	}
	c := testChild(t, dir, -time.Hour, mix)
	ctx, cancel := context.WithCancel(context.Background())
	var handled sync.WaitGroup
	handled.Add(3)
	var once sync.Map
	done := make(chan error, 1)
	go func() {
		done <- c.q.Work(ctx, 3, func(ctx context.Context, m walq.Message) error {
			err := c.handle(ctx, c.slots[0], 0, m, func(n int) int { return n - 1 }) // twice the visibility
			if _, again := once.LoadOrStore(m.ID, true); !again {
				handled.Done()
			}
			return err
		}, walq.WorkOptions{HeartbeatEvery: workHeartbeat, Timeout: workTimeout})
	}()
	for range 4 {
		time.Sleep(visibility / 3)
		c.clock.step(-30 * time.Minute)
	}
	handled.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := c.reported(t, 'V'); len(v) > 0 {
		t.Fatalf("violations: %q", v)
	}
	if st := c.q.Stats(); st.Expired != 0 || st.Acked != 3 {
		t.Fatalf("expired %d, acked %d: want 0 and 3", st.Expired, st.Acked)
	}
}

// A stall that ends just before a lease is judged lost must count: the
// judgement waits for the watchers to record it (settle), and a watcher
// that has not ended its round counts as stalled since it was due.
func TestStallWatchSeesStallJustEnded(t *testing.T) {
	var lock sync.Mutex // the queue's lock, as the probe takes it
	held := 0
	w := &stallWatch{probe: func() {
		lock.Lock()
		held++ // something to do under it, as the real probe has
		lock.Unlock()
	}, quit: make(chan struct{})}
	defer close(w.quit)
	w.start()
	time.Sleep(3 * watchEvery)
	start := time.Now()
	lock.Lock()
	time.Sleep(150 * time.Millisecond)
	// The watchers are blocked in their probes: their rounds have not ended.
	if union, _ := w.covered(start, time.Now()); union < 120*time.Millisecond {
		t.Errorf("rounds not ended: stalls cover %v of the last 150ms", union)
	}
	lock.Unlock()
	now := time.Now()
	w.settle(now)
	union, longest := w.covered(start, now)
	if union < 140*time.Millisecond || longest < 140*time.Millisecond {
		t.Errorf("after settle: stalls cover %v of the last %v, the longest %v", union, now.Sub(start), longest)
	}
}

// A slow fsync is a stall too: a lease record that waited on the disk
// left its handler that much less of the visibility, and the watchers,
// which see the CPU, cannot tell.
func TestStallWatchSeesSlowFsync(t *testing.T) {
	var mu sync.Mutex
	h := walq.Histogram{Bounds: []float64{1e-3, 25e-3, 100e-3, 250e-3}, Counts: make([]uint64, 4)}
	read := make(chan struct{}, 1)
	w := &stallWatch{probe: func() {}, quit: make(chan struct{}), fsyncs: func() walq.Histogram {
		mu.Lock()
		defer mu.Unlock()
		select {
		case read <- struct{}{}:
		default:
		}
		return walq.Histogram{Bounds: h.Bounds, Counts: append([]uint64(nil), h.Counts...), Count: h.Count}
	}}
	defer close(w.quit)
	w.start()
	<-read
	<-read // a sample before the fsync
	start := time.Now()
	mu.Lock()
	h.Counts[3]++ // one fsync between 100 ms and 250 ms
	h.Count++
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, longest := w.covered(start.Add(-time.Second), time.Now()); longest >= 100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a 100 to 250 ms fsync was not recorded as a stall of 100 ms")
		}
		time.Sleep(diskEvery)
	}
}
