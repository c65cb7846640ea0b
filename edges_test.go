package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// The tests in this file each reproduce a bug found by trying the queue as
// a hostile user would (clock steps, failures while callers wait, keys
// never forgotten), so that the class of bug stays caught.

// reopenBehind writes one queue with its clock at epoch, closes it and opens
// it again with a clock an hour behind: the log's newest time is then ahead
// of the wall clock for the life of the second queue.
func reopenBehind(t *testing.T, opts Options, fill func(q *Queue)) (*Queue, *ManualClock) {
	t.Helper()
	dir := t.TempDir()
	opts.Clock = NewManualClock(epoch)
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fill != nil {
		fill(q)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	back := NewManualClock(epoch.Add(-time.Hour))
	opts.Clock = back
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q, back
}

// TestWorkHeartbeatAfterClockSteppedBack: with the clock stepped back across
// a restart, Work's first heartbeat must still come HeartbeatEvery after the
// lease began. (It came an hour late: the lease ran out under a live handler
// and a second worker ran the item.)
func TestWorkHeartbeatAfterClockSteppedBack(t *testing.T) {
	opts := Options{Visibility: 30 * time.Second}
	q, clock := reopenBehind(t, opts, func(q *Queue) { mustPut(t, q, "slow") })
	started := make(chan Receipt, 2)
	release := make(chan struct{})
	startWork(t, q, 2, func(ctx context.Context, m Message) error {
		started <- m.Receipt
		<-release
		return nil
	}, WorkOptions{HeartbeatEvery: 10 * time.Second, Timeout: -1})
	t.Cleanup(func() { close(release) })

	r := recv(t, "the handler to start", started)
	for i := range 9 { // three visibilities
		before, ok := leaseEnd(q, r)
		if !ok {
			t.Fatalf("beat %d: the lease of a live, heartbeating handler ended", i)
		}
		clock.Advance(10 * time.Second)
		waitFor(t, "the heartbeat", func() bool {
			end, ok := leaseEnd(q, r)
			return !ok || end.After(before)
		})
	}
	select {
	case r2 := <-started:
		t.Fatalf("the item was delivered again (receipt %v) while its first handler ran", r2)
	default:
	}
	if st := q.Stats(); st.Expired != 0 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDeadlineAfterClockSteppedBack: a deadline is a span from now in queue
// time, whatever the offset between queue time and the wall clock: it is
// neither rejected (it was, for deadlines within the step) nor early.
func TestDeadlineAfterClockSteppedBack(t *testing.T) {
	q, clock := reopenBehind(t, Options{}, func(q *Queue) { mustPut(t, q, "old") })
	m := mustTryGet(t, q)
	if want := clock.Now().Add(defaultVisibility); !m.LeaseEnd.Equal(want) {
		t.Fatalf("LeaseEnd %v, want %v (wall time, one visibility from now)", m.LeaseEnd, want)
	}
	deadline := clock.Now().Add(30 * time.Minute)
	id := mustPut(t, q, "expiring", WithDeadline(deadline))
	advance(t, q, clock, 30*time.Minute-time.Nanosecond)
	if it := stored(q, id); it == nil {
		t.Fatalf("item discarded before its deadline")
	}
	advance(t, q, clock, time.Nanosecond)
	if it := stored(q, id); it != nil {
		t.Fatalf("item still stored at its deadline: %+v", it)
	}
}

// TestWallStepsChangeNothing: the wall clock stepped forward or back while
// the queue runs changes no lease, delay or deadline: they all run on queue
// time.
func TestWallStepsChangeNothing(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour, 365 * 24 * time.Hour, -365 * 24 * time.Hour} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second})
			mustPut(t, q, "leased")
			delayed := mustPut(t, q, "delayed", WithDelay(5*time.Second))
			expiring := mustPut(t, q, "expiring", WithDeadline(clock.Now().Add(20*time.Second)), WithDelay(15*time.Second))
			m := mustTryGet(t, q)

			clock.StepWall(step)
			// A deadline given after the step means the span from the
			// stepped wall clock.
			late := mustPut(t, q, "late", WithDeadline(clock.Now().Add(8*time.Second)), WithDelay(7*time.Second))
			if got := m.LeaseEnd.Sub(clock.Now()); got != 10*time.Second-step {
				t.Fatalf("the old LeaseEnd is %v from the stepped clock, want %v", got, 10*time.Second-step)
			}
			advance(t, q, clock, 4*time.Second)
			if stored(q, late) == nil {
				t.Fatalf("item discarded before its deadline")
			}
			if err := q.Extend(m.Receipt, 10*time.Second); err != nil {
				t.Fatalf("Extend after a wall step of %v: %v", step, err)
			}
			advance(t, q, clock, time.Second) // 5s: the delayed item is due
			if got := mustTryGet(t, q); got.ID != delayed {
				t.Fatalf("got item %d, want the delayed item %d", got.ID, delayed)
			}
			advance(t, q, clock, 4*time.Second) // 9s
			if err := q.Ack(m.Receipt); err != nil {
				t.Fatalf("Ack after a wall step of %v: %v", step, err)
			}
			advance(t, q, clock, 6*time.Second) // 15s: the expiring item is due, late passed its deadline at 8s
			if stored(q, late) != nil {
				t.Fatalf("item kept past its deadline")
			}
			if got := mustTryGet(t, q); got.ID != expiring {
				t.Fatalf("got item %d, want %d", got.ID, expiring)
			}
		})
	}
}

// steppingClock is the system clock with a wall offset a test steps while
// the queue runs; its monotonic reading is the system's.
type steppingClock struct {
	systemClock
	offset atomic.Int64
}

func (c *steppingClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// TestWorkUnderWallSteps runs Work on slow handlers (each longer than the
// visibility, so only the heartbeat keeps its lease) while the wall clock is
// stepped back and forth by up to a day before every beat: no item runs on
// two workers at once, no lease is lost, no ack is late, and each beat
// extends its lease to a visibility past the beat in queue time (the wall
// time at Open plus the time passed since), whatever the wall clock reads.
// It runs on the injected clock; TestWorkUnderWallStepsRealTime (tag long)
// runs it on the system clock, stepped every 20ms.
func TestWorkUnderWallSteps(t *testing.T) {
	const visibility, every = 2 * time.Second, 500 * time.Millisecond
	q, clock, _ := testQueue(t, Options{Visibility: visibility})
	const items, workers = 8, 4
	for i := range items {
		mustPut(t, q, fmt.Sprintf("item %d", i))
	}
	var mu sync.Mutex
	running := map[uint64]bool{}
	release := map[uint64]chan struct{}{}
	var twice atomic.Int64
	started := make(chan Message, items)
	cancel, done := startWork(t, q, workers, func(ctx context.Context, m Message) error {
		ch := make(chan struct{})
		mu.Lock()
		if running[m.ID] {
			twice.Add(1)
		}
		running[m.ID] = true
		release[m.ID] = ch
		mu.Unlock()
		started <- m
		<-ch // the work: released after longer than the visibility
		mu.Lock()
		delete(running, m.ID)
		mu.Unlock()
		return nil
	}, WorkOptions{HeartbeatEvery: every})

	rng := rand.New(rand.NewPCG(1, 2))
	var offset time.Duration // the wall clock's step from the true time
	stepWall := func() {
		next := time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour
		clock.StepWall(next - offset)
		offset = next
	}
	for range items / workers {
		batch := make([]Message, workers)
		for i := range batch {
			batch[i] = recv(t, "a handler to start", started)
		}
		// Six beats: 3s of work, longer than the visibility.
		for range 6 {
			stepWall()
			advance(t, q, clock, every)
			want := epoch.Add(clock.Monotonic() + visibility)
			for _, m := range batch {
				waitFor(t, "the heartbeat's extension", func() bool {
					end, ok := leaseEnd(q, m.Receipt)
					if !ok {
						t.Fatalf("item %d: lease lost at %v", m.ID, clock.Monotonic())
					}
					return end.Equal(want)
				})
			}
		}
		stepWall()
		mu.Lock()
		for _, m := range batch {
			close(release[m.ID])
		}
		mu.Unlock()
	}
	waitFor(t, "the acks", func() bool { return q.Stats().Acked == items })
	if err := stopWork(t, cancel, done); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); twice.Load() != 0 || st.Expired != 0 || st.LateAcks != 0 || st.Delivered != items || st.Work.LeasesLost != 0 {
		t.Fatalf("ran twice: %d; stats %+v", twice.Load(), st)
	}
}

// TestFailureWakesBlockedCalls: a failure nobody waits on (an interval
// fsync) puts the queue in its failed state at once: a blocked Get and an
// idle Work return ErrFailed, and every later call does too.
func TestFailureWakesBlockedCalls(t *testing.T) {
	ffs := wal.NewFaultFS(wal.OSFS(), 0)
	clock := NewManualClock(epoch)
	q, err := Open(t.TempDir(), withFS(Options{Clock: clock, Sync: SyncInterval(time.Millisecond)}, ffs))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	getErr := make(chan error, 1)
	go func() {
		_, err := q.Get(context.Background())
		getErr <- err
	}()
	workErr := make(chan error, 1)
	go func() {
		workErr <- q.Work(context.Background(), 2, func(context.Context, Message) error { return nil }, WorkOptions{})
	}()
	q.waitForWaiters(3)
	ffs.FailNext("sync")
	if _, err := q.Put(context.Background(), []byte("later"), WithDelay(time.Hour)); err != nil {
		t.Fatalf("Put returns once written under SyncInterval: %v", err)
	}
	if err := recv(t, "the blocked Get", getErr); !errors.Is(err, ErrFailed) {
		t.Fatalf("blocked Get returned %v, want ErrFailed", err)
	}
	if err := recv(t, "the idle Work", workErr); !errors.Is(err, ErrFailed) {
		t.Fatalf("idle Work returned %v, want ErrFailed", err)
	}
	if _, err := q.Put(context.Background(), []byte("x")); !errors.Is(err, ErrFailed) {
		t.Fatalf("Put after the failure: %v, want ErrFailed", err)
	}
	if _, _, err := q.TryGet(); !errors.Is(err, ErrFailed) {
		t.Fatalf("TryGet after the failure: %v, want ErrFailed", err)
	}
}

// TestFailedQueueIsIdle: once failed, the queue's background loops stop.
// (The timer loop re-armed for a time already past, on and on: a core spun
// until Close.)
func TestFailedQueueIsIdle(t *testing.T) {
	ffs := wal.NewFaultFS(wal.OSFS(), 0)
	q, clock, _ := testQueue(t, withFS(Options{Visibility: time.Second}, ffs))
	mustPut(t, q, "a")
	mustTryGet(t, q)
	ffs.FailNext("write")
	if _, err := q.Put(context.Background(), []byte("b")); !errors.Is(err, ErrFailed) {
		t.Fatalf("Put with a failing write: %v, want ErrFailed", err)
	}
	clock.Advance(time.Hour) // the lease is now past its end: the timer has work it cannot do
	before := cpuTime(t)
	start := time.Now()
	time.Sleep(300 * time.Millisecond) // what is measured: the process idle for this long
	used := cpuTime(t) - before
	if wall := time.Since(start); used > wall/4 {
		t.Fatalf("a failed queue used %v of CPU in %v", used, wall)
	}
}

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestKeysPrunedInTheLiveState: a key released longer than KeyWindow ago is
// forgotten by the running queue once a record's time passes the window
// (the state's own time, which a snapshot of it carries): until then it is
// not held (Stats.Keys does not count it), only remembered.
func TestKeysPrunedInTheLiveState(t *testing.T) {
	q, clock, _ := testQueue(t, Options{KeyWindow: time.Minute})
	for i := range 100 {
		mustPut(t, q, "x", WithKey(fmt.Sprint("key-", i)))
		if err := q.Ack(mustTryGet(t, q).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if got := q.Stats().Keys; got != 100 {
		t.Fatalf("Keys %d inside the window, want 100", got)
	}
	advance(t, q, clock, time.Minute+time.Second) // the window, and the pruning granularity
	q.mu.Lock()
	remembered := q.st.KeysReleased()
	q.mu.Unlock()
	if got := q.Stats().Keys; got != 0 || remembered != 100 {
		t.Fatalf("past the window with no record since: Keys %d, %d remembered; want 0 held, 100 remembered", got, remembered)
	}
	again := mustPut(t, q, "x", WithKey("key-0")) // not held: a new item; and a record past the window
	if err := q.Ack(mustTryGet(t, q).Receipt); err != nil || again == 0 {
		t.Fatal(err)
	}
	waitFor(t, "the timer loop to prune", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.st.KeysReleased() == 1
	})
	q.mu.Lock()
	n := len(q.st.DeadLetters(0))
	q.mu.Unlock()
	if n != 0 {
		t.Fatalf("dead letters %d", n)
	}
}

// stored returns the item with id if the queue stores it.
func stored(q *Queue, id uint64) *state.Item {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.st.Item(id)
}

// TestOpenSkipsAndRemovesCoveredSegments: a crash between a compaction's
// snapshot and its truncation leaves segments the snapshot covers wholly.
// Open neither reads nor verifies them (bit rot there refuses nothing) and
// finishes the truncation.
func TestOpenSkipsAndRemovesCoveredSegments(t *testing.T) {
	opts := Options{Clock: NewManualClock(epoch), SegmentSize: 4096, DisableAutoCompact: true}
	dir := t.TempDir()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		mustPut(t, q, fmt.Sprintf("item %03d with some padding to fill segments", i))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	crashed := copyDir(t, dir) // the log as it was before the compaction
	if q, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	snap := wal.SnapshotName(q.Stats().SnapshotLSN)
	q.Close()
	// The compaction's snapshot reached the disk, its truncation did not.
	data, err := os.ReadFile(filepath.Join(dir, snap))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, snap), data, 0o600); err != nil {
		t.Fatal(err)
	}
	segs, _, err := wal.ListSegments(filepath.Join(crashed, "log"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v, %v: want at least 3", segs, err)
	}
	// Bit rot in the first, covered segment: in the body of item 1.
	first := segs[0].Path
	b, _ := os.ReadFile(first)
	at := bytes.Index(b, []byte("item 000 with"))
	if at < 0 {
		t.Fatalf("the body of item 1 is not in %s", segs[0].Name)
	}
	b[at+5] ^= 0xff
	if err := os.WriteFile(first, b, 0o600); err != nil {
		t.Fatal(err)
	}

	q, err = Open(crashed, opts)
	if err != nil {
		t.Fatalf("Open with bit rot in a covered segment: %v", err)
	}
	defer q.Close()
	if st := q.Stats(); st.Items != 200 || st.LogSegments != len(segs) {
		t.Fatalf("items %d, segments %d (before: %d): want 200 items and the covered segments kept", st.Items, st.LogSegments, len(segs))
	}
	for i := 1; i < 200; i++ {
		m, ok, err := q.TryGet()
		if err != nil || !ok {
			t.Fatalf("get %d: %v, %v", i, ok, err)
		}
		if want := fmt.Sprintf("item %03d with some padding to fill segments", i); string(m.Body) != want {
			t.Fatalf("item %d: body %q, want %q", m.ID, m.Body, want)
		}
		must(t, q.Ack(m.Receipt))
	}
	if _, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("a 201st get: %v, %v", ok, err)
	}
	dead := q.DeadLetters(0)
	if len(dead) != 1 || dead[0].ID != 1 || !strings.Contains(dead[0].LastError, "fails its crc") ||
		!strings.Contains(dead[0].LastError, "offset") || dead[0].Body != nil || dead[0].BodyError == "" {
		t.Fatalf("dead letters %+v: want item 1, its body failing its crc", dead)
	}
	if n := q.metrics.bodyFailures.Load(); n < 1 {
		t.Fatalf("%d body failures counted", n)
	}
	must(t, q.PurgeDeadLetters())
	must(t, q.Compact())
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("covered segment still there after a compaction: %v", err)
	}
}

// TestFailedQueueIdleWithRunningHandler: a handler still running when the
// queue fails (and slow to return) leaves the process idle while Work waits
// for it.
func TestFailedQueueIdleWithRunningHandler(t *testing.T) {
	ffs := wal.NewFaultFS(wal.OSFS(), 0)
	q, _, _ := testQueue(t, withFS(Options{}, ffs))
	mustPut(t, q, "a")
	started := make(chan struct{})
	release := make(chan struct{})
	_, done := startWork(t, q, 1, func(ctx context.Context, m Message) error {
		close(started)
		<-release // slow to see the cancellation
		return ctx.Err()
	}, WorkOptions{Grace: time.Hour})
	recv(t, "the handler to start", started)
	ffs.FailNext("write")
	if _, err := q.Put(context.Background(), []byte("b")); !errors.Is(err, ErrFailed) {
		t.Fatalf("Put with a failing write: %v, want ErrFailed", err)
	}
	before := cpuTime(t)
	start := time.Now()
	time.Sleep(300 * time.Millisecond) // what is measured: the process idle for this long
	used := cpuTime(t) - before
	close(release)
	if err := recv(t, "Work to return", done); !errors.Is(err, ErrFailed) {
		t.Fatalf("Work returned %v, want ErrFailed", err)
	}
	if wall := time.Since(start); used > wall/4 {
		t.Fatalf("a failed queue with a running handler used %v of CPU in %v", used, wall)
	}
}

// TestBadSnapshotBeyondTheLogRefused: a snapshot that does not verify and
// claims an LSN the log does not reach cannot be passed over: a genuine one
// is written only after the log was synced that far, so either the log lost
// synced records or the snapshot is not what it claims. The open is refused
// and changes nothing. (Such a directory used to open as empty.)
func TestBadSnapshotBeyondTheLogRefused(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Clock: NewManualClock(epoch)}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "x")
	q.Close()
	if err := os.WriteFile(filepath.Join(dir, wal.SnapshotName(9)), []byte("WALQSNAP torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := dirListing(t, dir)
	if q, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		if q != nil {
			q.Close()
		}
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if after := dirListing(t, dir); after != before {
		t.Fatalf("the refused open changed the directory:\n%s\nwas\n%s", after, before)
	}
}

// TestOpenEmptyPath: an empty directory name is a mistake, not the current
// directory.
func TestOpenEmptyPath(t *testing.T) {
	if _, err := Open("", Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open(\"\") = %v, want ErrInvalid", err)
	}
}

// TestMessageTimesShareOneOffset: the wall-clock times of one Message are
// translated by one offset, so they are exactly as far apart as in queue
// time (translating each with its own reading of the two clocks put them
// apart by the time between readings, and a consumer saw an item leased
// "before" it was due).
func TestMessageTimesShareOneOffset(t *testing.T) {
	q, err := Open(t.TempDir(), Options{Clock: &steppingClock{}, Sync: SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range 200 {
		mustPut(t, q, "x")
		m := mustTryGet(t, q)
		it := stored(q, m.ID)
		want := time.Duration(it.LeaseEnd - it.EnqueuedAt)
		if got := m.LeaseEnd.Sub(m.EnqueuedAt); got != want {
			t.Fatalf("message %d: LeaseEnd - EnqueuedAt = %v in wall time, %v in queue time", i, got, want)
		}
	}
}

// TestHarmlessTruncateFailureKeepsTheQueue: a compaction whose truncation
// fails before it changed anything (ENOSPC writing tidwall's .START file,
// say) fails, but the queue goes on; the next compaction truncates.
func TestHarmlessTruncateFailureKeepsTheQueue(t *testing.T) {
	ffs := wal.NewFaultFS(wal.OSFS(), 0)
	q, _, _ := testQueue(t, withFS(Options{SegmentSize: 4096, DisableAutoCompact: true}, ffs))
	for i := range 100 {
		mustPut(t, q, fmt.Sprintf("item %03d padded to fill a few segments of the log", i))
	}
	before := q.Stats().LogSegments
	ffs.FailNext("truncate-front")
	if err := q.Compact(); err == nil {
		t.Fatal("Compact with a failing truncation returned nil")
	}
	if _, err := q.Put(context.Background(), []byte("after")); err != nil {
		t.Fatalf("Put after a harmless truncation failure: %v", err)
	}
	if err := q.Compact(); err != nil {
		t.Fatalf("the next compaction: %v", err)
	}
	if after := q.Stats().LogSegments; after >= before {
		t.Fatalf("segments %d after compaction, %d before", after, before)
	}
}

// TestRefusedRecordNamesItsPlace: a record that verifies but that the state
// refuses on replay is corruption, reported with the segment and offset it
// sits at (recovery used to report only its LSN).
func TestRefusedRecordNamesItsPlace(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Clock: NewManualClock(epoch)}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "x")
	last := q.Stats().LastLSN
	q.Close()
	body, err := state.Encode(nil, &state.Ack{Time: epoch.UnixNano(), Receipt: 999})
	if err != nil {
		t.Fatal(err)
	}
	segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	// Append the record through the log itself, so that its frame verifies.
	l, _, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Dir: dirIDOf(t, dir)}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, c := l.Append(state.TypeAck, body); c.Wait() != nil {
		t.Fatal(c.Wait())
	}
	must(t, l.Close())
	_, err = Open(dir, opts)
	var ce *CorruptionError
	at := segs[0].Size + int64(wal.FrameOverhead(1))
	if !errors.As(err, &ce) || ce.File != segs[0].Name || ce.Offset != at || ce.Index != last+1 {
		t.Fatalf("Open = %v (%+v), want a CorruptionError at %s offset %d index %d", err, ce, segs[0].Name, at, last+1)
	}
}

// TestRecordOfANewerBuild: a record in a verified frame whose type this
// build does not know, or of a queue it does not have, was written by a
// newer walq: Open refuses it with ErrNewerFormat, says which record, and
// changes nothing.
func TestRecordOfANewerBuild(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue uint64
		typ   byte
		want  string
	}{
		{"unknown type", 0, state.LastType + 1, fmt.Sprintf("has type %d", state.LastType+1)},
		{"required field", 0, state.TypeAck, "tag 3, which this build does not know"},
		{"required field of an item", 0, state.TypePut, "tag 5, which this build does not know"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			q, err := Open(dir, Options{})
			must(t, err)
			mustPut(t, q, "x")
			last := q.Stats().LastLSN
			must(t, q.Close())
			l, _, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Dir: dirIDOf(t, dir)}, 0, nil)
			must(t, err)
			body := []byte{0x80}
			switch tc.name {
			case "required field":
				// An ack of receipt 2 with tagged fields 2 (optional) and 3
				// (required).
				body = []byte{0x93, 0x01, 0x02, 0x82, 0x02, 0xc0, 0x03, 0xa1, 'x'}
			case "required field of an item":
				body, err = state.EncodeWithFields(nil, &state.Put{Time: 1, Items: []state.NewItem{{Body: []byte("y")}}}, nil, []state.Fields{{{Tag: 5, Value: []byte{0xc3}}}})
				must(t, err)
			}
			if _, c := l.AppendQueue(tc.queue, tc.typ, func(b []byte) []byte { return append(b, body...) }); c.Wait() != nil {
				t.Fatal(c.Wait())
			}
			must(t, l.Close())
			before := dirListing(t, dir)
			_, err = Open(dir, Options{})
			if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) ||
				!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), fmt.Sprintf("record %d", last+1)) {
				t.Fatalf("Open = %v, want ErrNewerFormat naming record %d (%q)", err, last+1, tc.want)
			}
			if after := dirListing(t, dir); after != before {
				t.Fatalf("the refused open changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestClockBounds: queue times are nanoseconds in an int64 and the queue
// adds up to MaxDuration to them. A wall clock too far ahead overflowed
// them (a clock in 2200 made an item delayed by MaxDuration ready at once,
// one in 2300 reported leases ending in 1715), and one in 2150 rejected a
// deadline in the year 9999 as "not after its due time". Open now refuses a
// clock it cannot keep times by, creating nothing, and a far deadline
// saturates instead of wrapping.
func TestClockBounds(t *testing.T) {
	for _, year := range []int{1969, 2163, 2300} {
		dir := filepath.Join(t.TempDir(), "q")
		clock := NewManualClock(time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC))
		if q, err := Open(dir, Options{Clock: clock}); !errors.Is(err, ErrInvalid) {
			if q != nil {
				q.Close()
			}
			t.Fatalf("Open with the clock in %d: %v, want ErrInvalid", year, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open with the clock in %d created the directory: %v", year, err)
		}
	}
	clock := NewManualClock(time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC))
	q, err := Open(t.TempDir(), Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	mustPut(t, q, "far", WithDelay(MaxDuration))
	expectEmpty(t, q)
	id := mustPut(t, q, "until 9999", WithDeadline(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)))
	m := mustTryGet(t, q)
	if m.ID != id || m.LeaseEnd.Sub(clock.Now()) != defaultVisibility {
		t.Fatalf("got %+v", m)
	}
}

// TestKeyWindowAcrossCompactionAndClockBehind: a reopen with the wall clock
// behind resumes queue time at the log's newest time, which can be earlier
// than the queue time at which the last compaction ran. A key pruned from
// that snapshot at the compaction's time was then missing although its
// window still held it (FuzzOps found it); the snapshot now prunes at its
// own time.
func TestKeyWindowAcrossCompactionAndClockBehind(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	opts := Options{Clock: clock, KeyWindow: 30 * time.Second, DisableAutoCompact: true}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := mustPut(t, q, "keyed", WithKey("k"))
	if err := q.Ack(mustTryGet(t, q).Receipt); err != nil { // released at epoch
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	mustPut(t, q, "the log's newest record, at epoch+5s")
	advance(t, q, clock, 30*time.Second) // no record: queue time moves on to epoch+35s
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	q.Close()

	opts.Clock = NewManualClock(epoch.Add(-time.Hour))
	if q, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Queue time is epoch+5s again: the key, released at epoch, is held.
	got, err := q.Put(context.Background(), []byte("again"), WithKey("k"))
	if !errors.Is(err, ErrDuplicate) || got != id {
		t.Fatalf("Put with the key = %d, %v; want %d, ErrDuplicate", got, err, id)
	}
}
