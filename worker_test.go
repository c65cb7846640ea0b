package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// waitFor yields until cond holds. The real-time limit only turns a hang
// into a failure; passing never depends on it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// recv receives from ch, failing the test instead of hanging.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// startWork runs q.Work in the background. cancel ends Work's context;
// done yields what Work returned, then nil. The test's cleanup cancels and
// waits for Work.
func startWork(t *testing.T, q *Queue, n int, handler func(context.Context, Message) error, opts WorkOptions) (cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- q.Work(ctx, n, handler, opts)
		close(errc)
	}()
	t.Cleanup(func() {
		cancel()
		recv(t, "Work to return", errc)
	})
	return cancel, errc
}

// stopWork cancels Work's context and returns what Work returned.
func stopWork(t *testing.T, cancel context.CancelFunc, done <-chan error) error {
	t.Helper()
	cancel()
	return recv(t, "Work to return", done)
}

// leaseEnd is when the lease that r names ends (false: it is not open).
func leaseEnd(q *Queue, r Receipt) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := q.st.Leased(r.lease)
	if it == nil {
		return time.Time{}, false
	}
	return time.Unix(0, it.LeaseEnd), true
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestWorkProcessesEachItemOnce(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	const items = 200
	for i := range items {
		mustPut(t, q, fmt.Sprint(i))
	}
	var mu sync.Mutex
	runs := make(map[uint64]int)
	cancel, done := startWork(t, q, 8, func(ctx context.Context, m Message) error {
		mu.Lock()
		runs[m.ID]++
		mu.Unlock()
		return nil
	}, WorkOptions{})
	waitFor(t, "every item acked", func() bool { return q.Stats().Acked == items })
	if err := stopWork(t, cancel, done); err != nil {
		t.Fatalf("Work = %v, want nil", err)
	}
	if len(runs) != items {
		t.Fatalf("%d items ran, want %d", len(runs), items)
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("item %d ran %d times", id, n)
		}
	}
	st := q.Stats()
	if st.Delivered != items || st.LateAcks != 0 || st.Items != 0 || st.DurableLSN != st.LastLSN {
		t.Fatalf("stats %+v", st)
	}
}

func TestWorkAckAndNextLeaseShareOneWait(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	first := mustPut(t, q, "first")
	second := mustPut(t, q, "second")
	m := mustTryGet(t, q)
	if m.ID != first {
		t.Fatalf("leased %d, want %d", m.ID, first)
	}
	next, ok, ackErr, err := q.ackAndLease(m.Receipt)
	if err != nil || ackErr != nil || !ok || next.ID != second || string(next.Body) != "second" || next.Attempt != 1 {
		t.Fatalf("ackAndLease = %+v, %v, %v, %v", next, ok, ackErr, err)
	}
	// One wait covered both records: both are durable on return.
	st := q.Stats()
	if st.Acked != 1 || st.Leased != 1 || st.DurableLSN < next.Receipt.lease || next.Receipt.lease != st.LastLSN {
		t.Fatalf("after ackAndLease: %+v", st)
	}

	// A late ack still leases the next item; with nothing ready, only the
	// ack is waited for.
	third := mustPut(t, q, "third")
	late, ok, ackErr, err := q.ackAndLease(m.Receipt)
	if err != nil || !errors.Is(ackErr, ErrLeaseLost) || !ok || late.ID != third {
		t.Fatalf("late ackAndLease = %+v, %v, %v, %v", late, ok, ackErr, err)
	}
	for _, r := range []Receipt{next.Receipt, late.Receipt} {
		if _, ok, ackErr, err := q.ackAndLease(r); err != nil || ackErr != nil || ok {
			t.Fatalf("last ackAndLease = %v, %v, %v", ok, ackErr, err)
		}
	}
	if st := q.Stats(); st.Acked != 3 || st.Items != 0 || st.LateAcks != 1 || st.DurableLSN != st.LastLSN {
		t.Fatalf("at the end: %+v", st)
	}
}

func TestWorkHangingHandlerTimesOutThenDeadLetters(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 3})
	id := mustPut(t, q, "hangs")
	type seen struct {
		attempt  int
		err      error
		deadline time.Time
		start    time.Time
	}
	started := make(chan struct{}, 1)
	ended := make(chan seen, 3)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		s := seen{attempt: m.Attempt, start: clock.Now()}
		s.deadline, _ = ctx.Deadline()
		started <- struct{}{}
		<-ctx.Done()
		s.err = ctx.Err()
		ended <- s
		return ctx.Err()
	}, WorkOptions{Timeout: 2 * time.Second})

	for attempt := 1; attempt <= 3; attempt++ {
		recv(t, "the handler to start", started)
		clock.Advance(2 * time.Second) // the timeout; the heartbeat (every 3.3s) does not come
		s := recv(t, "the handler to be cancelled", ended)
		if s.attempt != attempt || s.err != context.DeadlineExceeded || !s.deadline.Equal(s.start.Add(2*time.Second)) {
			t.Fatalf("attempt %d: handler saw %+v", attempt, s)
		}
		if attempt < 3 {
			q.waitForWaiters(1) // nacked; the worker waits out the backoff
			advance(t, q, clock, time.Second)
		}
	}
	waitFor(t, "the dead letter", func() bool { return q.Stats().Dead == 1 })
	dl := q.DeadLetters(0)
	if len(dl) != 1 || dl[0].ID != id || dl[0].Attempts != 3 ||
		dl[0].LastError != "walq: handler timed out after 2s: context deadline exceeded" {
		t.Fatalf("dead letters %+v", dl)
	}
	if got := q.rt.work.timeouts.Load(); got != 3 {
		t.Errorf("timeouts %d, want 3", got)
	}
	if got := q.rt.work.handlerErrors.Load(); got != 3 {
		t.Errorf("handler errors %d, want 3", got)
	}
	if st := q.Stats(); st.Expired != 0 || st.LateAcks != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestWorkHeartbeatKeepsSlowHandlerFromRunningTwice(t *testing.T) {
	q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second})
	mustPut(t, q, "slow")
	started := make(chan Message, 2)
	release := make(chan struct{})
	startWork(t, q, 2, func(ctx context.Context, m Message) error {
		started <- m
		<-release
		return nil
	}, WorkOptions{Timeout: time.Minute})
	m := recv(t, "the handler to start", started)
	q.waitForWaiters(1) // the other worker is idle and would take a redelivery

	// Three times the visibility, one heartbeat period at a time.
	every := q.opts.Visibility / 3
	for range 9 {
		advance(t, q, clock, every)
		want := clock.Now().Add(q.opts.Visibility)
		waitFor(t, "the heartbeat's extension", func() bool {
			end, ok := leaseEnd(q, m.Receipt)
			if !ok {
				t.Fatalf("lease lost at %v", clock.Now().Sub(epoch))
			}
			return end.Equal(want)
		})
	}
	close(release)
	waitFor(t, "the ack", func() bool { return q.Stats().Acked == 1 })
	select {
	case again := <-started:
		t.Fatalf("item ran twice: %+v", again)
	default:
	}
	if st := q.Stats(); st.Delivered != 1 || st.Expired != 0 || st.LateAcks != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// stallFS holds every fsync of the log while it is stalled.
type stallFS struct {
	wal.FS
	mu   sync.Mutex
	gate chan struct{} // nil: not stalled
}

func (f *stallFS) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
}

func (f *stallFS) resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func (f *stallFS) Check(op string) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if op == "sync" && gate != nil {
		<-gate
	}
	return f.FS.Check(op)
}

func TestWorkHeartbeatOutlastsAStalledFsync(t *testing.T) {
	fsys := &stallFS{FS: wal.OSFS()}
	q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second, fs: fsys})
	t.Cleanup(fsys.resume) // before the queue closes
	mustPut(t, q, "slow")
	started := make(chan Message, 1)
	release := make(chan struct{})
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		started <- m
		<-release
		return nil
	}, WorkOptions{Timeout: time.Minute})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	m := recv(t, "the handler to start", started)

	// The disk stops answering for three times the visibility: the
	// heartbeat must not wait for it.
	fsys.stall()
	every := q.opts.Visibility / 3
	for range 9 {
		advance(t, q, clock, every)
		want := clock.Now().Add(q.opts.Visibility)
		waitFor(t, "the heartbeat's extension during the stall", func() bool {
			end, ok := leaseEnd(q, m.Receipt)
			if !ok {
				t.Fatalf("lease lost at %v", clock.Now().Sub(epoch))
			}
			return end.Equal(want)
		})
	}
	fsys.resume()
	close(release)
	waitFor(t, "the ack", func() bool { return q.Stats().Acked == 1 })
	if st := q.Stats(); st.Delivered != 1 || st.Expired != 0 || st.LateAcks != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestWorkFirstHeartbeatCountsFromTheLease(t *testing.T) {
	fsys := &stallFS{FS: wal.OSFS()}
	q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second, fs: fsys})
	t.Cleanup(fsys.resume)
	mustPut(t, q, "x")
	fsys.stall() // the lease's fsync will take 2s
	started := make(chan Message, 1)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		started <- m
		<-ctx.Done()
		return ctx.Err()
	}, WorkOptions{Timeout: time.Minute, DrainTimeout: -1})
	waitFor(t, "the lease", func() bool { return q.Stats().Leased == 1 })
	advance(t, q, clock, 2*time.Second)
	fsys.resume()
	m := recv(t, "the handler to start", started)

	// The first beat is due a period after the lease began, not after Get
	// returned.
	advance(t, q, clock, q.opts.Visibility/3-2*time.Second)
	want := clock.Now().Add(q.opts.Visibility)
	waitFor(t, "the first heartbeat", func() bool {
		end, _ := leaseEnd(q, m.Receipt)
		return end.Equal(want)
	})
}

func TestWorkPanicIsNack(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 2})
	id := mustPut(t, q, "panics")
	var recurse func(int)
	recurse = func(depth int) {
		if depth == 0 {
			panic("deep")
		}
		recurse(depth - 1)
	}
	acked := make(chan uint64, 1)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		switch {
		case string(m.Body) == "fine":
			acked <- m.ID
			return nil
		case m.Attempt == 1:
			panic(fmt.Sprintf("kaboom %d", m.ID))
		default:
			recurse(200) // a stack longer than a dead letter keeps
		}
		return nil
	}, WorkOptions{})

	q.waitForWaiters(1) // the panic was nacked and Work lives on
	if st := q.Stats(); st.Nacked != 1 || st.Dead != 0 || st.Ready+st.Delayed != 1 {
		t.Fatalf("after the first panic: %+v", st)
	}
	advance(t, q, clock, time.Second)
	waitFor(t, "the dead letter", func() bool { return q.Stats().Dead == 1 })
	dl := q.DeadLetters(0)[0]
	if dl.ID != id || dl.Attempts != 2 || !strings.HasPrefix(dl.LastError, "panic: deep\n\n") ||
		!strings.Contains(dl.LastError, "worker_test.go") || !strings.HasSuffix(dl.LastError, "\n…") ||
		len(dl.LastError) > maxPanicStack+100 || strings.Contains(dl.LastError, "runtime/debug.Stack") {
		t.Fatalf("dead letter (%d bytes): %+v", len(dl.LastError), dl)
	}
	if got := q.rt.work.panics.Load(); got != 2 {
		t.Errorf("panics %d, want 2", got)
	}

	fine := mustPut(t, q, "fine")
	if got := recv(t, "the next item", acked); got != fine {
		t.Fatalf("handled %d, want %d", got, fine)
	}
}

func TestWorkPanicStackStartsAtThePanic(t *testing.T) {
	var stack []byte
	func() {
		defer func() {
			recover()
			stack = trimStack(debug.Stack())
		}()
		panic("x")
	}()
	first, _, _ := strings.Cut(string(stack), "\n")
	if !strings.Contains(first, "TestWorkPanicStackStartsAtThePanic") {
		t.Fatalf("stack starts with %q, want the panicking function:\n%s", first, stack)
	}
}

func TestWorkPermanentDeadLettersAtOnce(t *testing.T) {
	q, _, _ := testQueue(t, Options{MaxAttempts: 5})
	id := mustPut(t, q, "malformed")
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		return fmt.Errorf("parse: %w", Permanent(errors.New("bad input")))
	}, WorkOptions{})
	waitFor(t, "the dead letter", func() bool { return q.Stats().Dead == 1 })
	dl := q.DeadLetters(0)
	if len(dl) != 1 || dl[0].ID != id || dl[0].Attempts != 1 || dl[0].LastError != "parse: bad input" {
		t.Fatalf("dead letters %+v", dl)
	}
	if st := q.Stats(); st.Nacked != 0 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPermanent(t *testing.T) {
	cause := errors.New("bad input")
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	cases := []struct {
		name      string
		err       error
		permanent bool
	}{
		{"nil", nil, false},
		{"plain", cause, false},
		{"permanent", Permanent(cause), true},
		{"wrapped permanent", fmt.Errorf("step 2: %w", Permanent(cause)), true},
		{"joined", errors.Join(errors.New("other"), Permanent(cause)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsPermanent(tc.err); got != tc.permanent {
				t.Fatalf("IsPermanent = %v, want %v", got, tc.permanent)
			}
			var p *PermanentError
			if errors.As(tc.err, &p) != tc.permanent {
				t.Fatalf("errors.As disagrees with IsPermanent")
			}
			if tc.permanent && (p.Err != cause || !errors.Is(tc.err, cause)) {
				t.Fatalf("the cause is lost: %v", p.Err)
			}
		})
	}
	if got := Permanent(cause).Error(); got != "bad input" {
		t.Fatalf("Error() = %q, want the cause's text", got)
	}
}

func TestWorkLeaseLostCancelsHandlerAtOnce(t *testing.T) {
	q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second})
	mustPut(t, q, "stalled")
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return errors.New("gave up")
	}, WorkOptions{Timeout: time.Hour})
	recv(t, "the handler to start", started)

	// The process stalls past the whole lease: the first heartbeat comes too
	// late, and the queue has taken the item back.
	advance(t, q, clock, 10*time.Second)
	if cause := recv(t, "the handler to be cancelled", causes); !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	q.waitForWaiters(1)
	if got := q.rt.work.leaseLost.Load(); got != 1 {
		t.Fatalf("lease lost %d, want 1", got)
	}
	// The result was dropped, not reported with the lost receipt.
	if st := q.Stats(); st.Expired != 1 || st.Nacked != 0 || st.LateAcks != 1 || st.Leased != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWorkAbandonsHandlerIgnoringContext: a handler that ignores its
// cancelled context past the grace period is abandoned: its worker goes on
// with the next item, and its own item stays leased by the heartbeat for as
// long as it runs (it is never delivered to a second worker meanwhile); its
// result settles the item when it finally returns.
func TestWorkAbandonsHandlerIgnoringContext(t *testing.T) {
	logs := &logBuffer{}
	q, clock, _ := testQueue(t, Options{MaxAttempts: 1, Visibility: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	stuck := mustPut(t, q, "stuck")
	next := mustPut(t, q, "next")
	started := make(chan Receipt, 1)
	sawCancel := make(chan struct{})
	release := make(chan struct{})
	handled := make(chan uint64, 1)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		if m.ID == stuck {
			started <- m.Receipt // Work armed the timeout before it called the handler
			<-ctx.Done()
			close(sawCancel)
			<-release // ignores the cancellation
			return nil
		}
		handled <- m.ID
		return nil
	}, WorkOptions{Timeout: time.Second, Grace: 500 * time.Millisecond})

	receipt := recv(t, "the stuck handler to start", started)
	clock.Advance(time.Second) // the timeout
	recv(t, "the stuck handler to see the cancellation", sawCancel)
	clock.Advance(500 * time.Millisecond) // the grace period
	// With one worker, the next item runs only if the slot was replaced.
	if got := recv(t, "the next item", handled); got != next {
		t.Fatalf("handled %d, want %d", got, next)
	}
	if a, r := q.rt.work.abandoned.Load(), q.rt.work.abandonedRunning.Load(); a != 1 || r != 1 {
		t.Fatalf("abandoned %d, still running %d; want 1, 1", a, r)
	}
	// The next item's ack must be in before the clock moves on: otherwise
	// its own lease runs out below and it is dead-lettered (MaxAttempts 1).
	waitFor(t, "the next item's ack", func() bool { return q.Stats().Acked == 1 })
	// Ten visibilities pass while it hangs: the heartbeat keeps the lease.
	for i := range 10 * 3 {
		before, ok := leaseEnd(q, receipt)
		if !ok {
			t.Fatalf("beat %d: the abandoned handler's lease ended", i)
		}
		clock.Advance(10 * time.Second) // HeartbeatEvery: Visibility/3
		waitFor(t, "the keeper's heartbeat", func() bool {
			end, ok := leaseEnd(q, receipt)
			return !ok || end.After(before)
		})
	}
	if st := q.Stats(); st.Delivered != 2 || st.Leased != 1 || st.Dead != 0 || st.Expired != 0 {
		t.Fatalf("while the abandoned handler runs: stats %+v", st)
	}

	close(release) // its nil result settles the item
	waitFor(t, "the abandoned handler to return", func() bool { return q.rt.work.abandonedRunning.Load() == 0 })
	waitFor(t, "the acks", func() bool { return q.Stats().Acked == 2 })
	if !strings.Contains(logs.String(), "abandoned handler returned") {
		t.Fatalf("the late return was not logged:\n%s", logs)
	}
	if st := q.Stats(); st.Acked != 2 || st.Dead != 0 || st.LateAcks != 0 || st.Items != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWorkBoundsAbandonedHandlers: past WorkOptions.MaxAbandoned, a worker
// whose handler ignores its cancellation waits for it instead of starting
// another goroutine.
func TestWorkBoundsAbandonedHandlers(t *testing.T) {
	logs := &logBuffer{}
	q, clock, _ := testQueue(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	first := mustPut(t, q, "first")
	second := mustPut(t, q, "second")
	third := mustPut(t, q, "third")
	started := make(chan uint64, 3)
	cancelled := make(chan uint64, 3)
	release := make(chan struct{})
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		started <- m.ID // Work armed the timeout before it called the handler
		if m.ID == third {
			return nil
		}
		<-ctx.Done() // Work armed the grace timer before it cancelled
		cancelled <- m.ID
		<-release
		return ctx.Err()
	}, WorkOptions{Timeout: time.Second, Grace: 500 * time.Millisecond, MaxAbandoned: 1})

	for _, want := range []uint64{first, second} {
		if got := recv(t, "a handler to start", started); got != want {
			t.Fatalf("started %d, want %d", got, want)
		}
		clock.Advance(time.Second)
		recv(t, "the handler to see its cancellation", cancelled)
		clock.Advance(500 * time.Millisecond)
	}
	waitFor(t, "the second handler to be kept waiting", func() bool {
		return strings.Contains(logs.String(), "MaxAbandoned reached")
	})
	select {
	case id := <-started:
		t.Fatalf("item %d started while the only worker waits for a handler past MaxAbandoned", id)
	default:
	}
	if r := q.rt.work.abandonedRunning.Load(); r != 1 {
		t.Fatalf("abandoned handlers running: %d, want 1", r)
	}
	close(release)
	if got := recv(t, "the third item", started); got != third {
		t.Fatalf("started %d, want %d", got, third)
	}
	waitFor(t, "every item to be settled", func() bool { st := q.Stats(); return st.Acked == 1 && st.Nacked == 2 })
}

func TestWorkDrainsOnCancelAndLosesNothing(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	for _, b := range []string{"a", "b", "c"} {
		mustPut(t, q, b)
	}
	started := make(chan string, 3)
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	causes := make(chan error, 1)
	cancel, done := startWork(t, q, 2, func(ctx context.Context, m Message) error {
		started <- string(m.Body)
		select {
		case <-release[string(m.Body)]:
			return nil
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
	}, WorkOptions{Timeout: -1, DrainTimeout: 2 * time.Second})
	running := map[string]bool{recv(t, "a handler", started): true, recv(t, "a handler", started): true}
	if !running["a"] || !running["b"] {
		t.Fatalf("running %v, want a and b", running)
	}

	cancel() // Work's context ends: no new leases
	waitFor(t, "the drain timer", func() bool {
		// b's heartbeat, a's heartbeat, the drain timer and the queue's own
		// timer (which dips while it re-arms).
		return clock.Timers() == 4
	})
	close(release["a"]) // a finishes within the drain: acked
	waitFor(t, "a's ack", func() bool { return q.Stats().Acked == 1 })
	select {
	case cause := <-causes:
		t.Fatalf("b was cancelled before the drain timeout: %v", cause)
	case err := <-done:
		t.Fatalf("Work returned before the drain timeout: %v", err)
	default:
	}

	clock.Advance(2 * time.Second) // the drain timeout: b is cancelled and nacked
	if cause := recv(t, "b to be cancelled", causes); !errors.Is(cause, context.Canceled) ||
		!strings.Contains(cause.Error(), "drain timeout") {
		t.Fatalf("b's cause: %v", cause)
	}
	if err := recv(t, "Work to return", done); err != nil {
		t.Fatalf("Work = %v, want nil", err)
	}
	select {
	case s := <-started:
		t.Fatalf("%s started after Work's context ended", s)
	default:
	}
	st := q.Stats()
	if st.Put != 3 || st.Acked != 1 || st.Nacked != 1 || st.Leased != 0 || st.Items != 2 || st.Acked+uint64(st.Items) != st.Put {
		t.Fatalf("stats %+v", st)
	}
}

func TestWorkReturnsWhenQueueCloses(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	mustPut(t, q, "x")
	causes := make(chan error, 1)
	started := make(chan struct{}, 1)
	_, done := startWork(t, q, 2, func(ctx context.Context, m Message) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, WorkOptions{})
	recv(t, "the handler to start", started)
	q.waitForWaiters(1)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, "the handler to be cancelled", causes); !errors.Is(cause, ErrClosed) {
		t.Fatalf("cause %v, want ErrClosed", cause)
	}
	if err := recv(t, "Work to return", done); !errors.Is(err, ErrClosed) {
		t.Fatalf("Work = %v, want ErrClosed", err)
	}
}

func TestWorkInvalidArguments(t *testing.T) {
	q, _, _ := testQueue(t, Options{Visibility: 3 * time.Second})
	ok := func(context.Context, Message) error { return nil }
	cases := []struct {
		name    string
		n       int
		handler func(context.Context, Message) error
		opts    WorkOptions
	}{
		{"no workers", 0, ok, WorkOptions{}},
		{"nil handler", 1, nil, WorkOptions{}},
		{"negative heartbeat", 1, ok, WorkOptions{HeartbeatEvery: -time.Second}},
		{"heartbeat not shorter than the visibility", 1, ok, WorkOptions{HeartbeatEvery: 3 * time.Second}},
		{"negative grace", 1, ok, WorkOptions{Grace: -time.Second}},
		{"heartbeat under a millisecond", 1, ok, WorkOptions{HeartbeatEvery: time.Microsecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := q.Work(context.Background(), tc.n, tc.handler, tc.opts); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Work = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestWorkOptionsDefaults(t *testing.T) {
	o, err := WorkOptions{}.withDefaults(30*time.Second, 1)
	want := WorkOptions{Timeout: 5 * time.Minute, HeartbeatEvery: 10 * time.Second, Grace: 5 * time.Second, DrainTimeout: 10 * time.Second, MaxAbandoned: 1}
	if err != nil || o.Logger == nil || o.Counters == nil {
		t.Fatalf("defaults %+v, %v: want a logger and counters", o, err)
	}
	o.Logger, o.Counters = nil, nil
	if o != want {
		t.Fatalf("defaults %+v; want %+v", o, want)
	}
	o, _ = WorkOptions{}.withDefaults(3*time.Second, 1)
	if o.HeartbeatEvery != time.Second || o.Grace != time.Second {
		t.Fatalf("defaults for a 3s visibility: %+v", o)
	}
}

func TestWorkLeavesNoGoroutines(t *testing.T) {
	q, _, _ := testQueue(t, Options{MaxAttempts: 1})
	before := runtime.NumGoroutine()
	kinds := []string{"ok", "ok", "ok", "error", "panic", "permanent", "ok", "error", "panic", "ok"}
	for _, k := range kinds {
		mustPut(t, q, k)
	}
	cancel, done := startWork(t, q, 4, func(ctx context.Context, m Message) error {
		switch string(m.Body) {
		case "error":
			return errors.New("failed")
		case "panic":
			panic("boom")
		case "permanent":
			return Permanent(errors.New("never"))
		}
		return nil
	}, WorkOptions{})
	waitFor(t, "every item settled", func() bool {
		st := q.Stats()
		return st.Acked+uint64(st.Dead) == uint64(len(kinds))
	})
	if err := stopWork(t, cancel, done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Work's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if e, p := q.rt.work.handlerErrors.Load(), q.rt.work.panics.Load(); e != 3 || p != 2 {
		t.Fatalf("handler errors %d, panics %d; want 3, 2", e, p)
	}
}

// A lease that ends while Get waits for its fsync (a disk slower than the
// visibility) goes back to the queue, and the item may be another worker's
// at once: Work must not run the handler on it. (Found by the crash
// harness: an 8 KiB segment roll's fsyncs held a lease's batch for 170 ms
// against a visibility of 150 ms, and the handler ran for an instant under
// a lease already expired, beside the worker that had the item next.)
func TestWorkSkipsALeaseThatEndedWhileItWaitedForTheDisk(t *testing.T) {
	fsys := &stallFS{FS: wal.OSFS()}
	q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second, fs: fsys})
	t.Cleanup(fsys.resume)
	mustPut(t, q, "x")
	fsys.stall() // the lease's fsync outlasts the visibility
	type start struct {
		attempt int
		cause   error
	}
	started := make(chan start, 4)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		time.Sleep(10 * time.Millisecond) // room for a beat that finds the lease gone
		started <- start{m.Attempt, context.Cause(ctx)}
		return nil
	}, WorkOptions{Timeout: time.Minute})
	waitFor(t, "the lease", func() bool { return q.Stats().Leased == 1 })
	advance(t, q, clock, 11*time.Second) // the lease expires, its record still unwritten
	waitFor(t, "the expiry", func() bool { return q.Stats().Expired == 1 })
	fsys.resume()
	advance(t, q, clock, time.Second) // the backoff after the expiry
	s := recv(t, "the handler to start", started)
	if s.attempt != 2 || s.cause != nil {
		t.Fatalf("the first handler call saw attempt %d, cause %v: want the delivery after the expiry, with a live lease", s.attempt, s.cause)
	}
	if got := q.rt.work.leaseLost.Load(); got != 1 {
		t.Errorf("leases lost %d, want 1 (the one that ended before its handler)", got)
	}
}

// plainEngine has Engine's methods alone: Work finds no fast path on it.
type plainEngine struct{ Engine }

// TestWorkOnAnEngine: Work on an engine without walq's fast path settles
// through the Engine methods, counts in the counters it is given and logs
// to the logger it is given, not the queue's.
func TestWorkOnAnEngine(t *testing.T) {
	q, _, _ := testQueue(t, Options{MaxAttempts: 1})
	mustPut(t, q, "ok")
	mustPut(t, q, "fails")
	var logs lockedBuffer
	counters := new(WorkCounters)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Work(ctx, plainEngine{q}, 2, func(ctx context.Context, m Message) error {
			if string(m.Body) == "fails" {
				return errors.New("it failed")
			}
			return nil
		}, WorkOptions{Counters: counters, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	waitFor(t, "an ack and a dead letter", func() bool {
		st := q.Stats()
		return st.Acked == 1 && st.Dead == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := counters.Stats().HandlerErrors; got != 1 {
		t.Fatalf("the given counters: %d handler errors, want 1", got)
	}
	if got := q.Stats().Work.HandlerErrors; got != 0 {
		t.Fatalf("the queue counted %d handler errors of a Work call given its own counters", got)
	}
	if !strings.Contains(logs.String(), "handler failed") {
		t.Fatalf("the given logger got %q", logs.String())
	}
	if err := Work(ctx, nil, 1, func(context.Context, Message) error { return nil }, WorkOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Work on a nil engine: %v", err)
	}
}

// TestWorkRefusesTooShortAVisibility: a visibility of a few nanoseconds
// would make the default heartbeat 0, a loop that writes an extension
// record per turn; Work refuses it and writes nothing.
func TestWorkRefusesTooShortAVisibility(t *testing.T) {
	q, _, _ := testQueue(t, Options{Visibility: 2 * time.Nanosecond})
	mustPut(t, q, "a")
	before := q.Stats().LastLSN
	err := q.Work(context.Background(), 1, func(context.Context, Message) error { return nil }, WorkOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("Work under a 2ns visibility: %v, want ErrInvalid saying it is too short", err)
	}
	if got := q.Stats().LastLSN; got != before {
		t.Fatalf("the refused Work wrote records %d..%d", before+1, got)
	}
}

// TestWorkUsesOnlyTheEngine: apart from Queue.Work, which hands the queue
// to Work as an Engine, nothing in worker.go names the Queue type, so Work
// reaches the queue only through Engine and the fast-path interface.
func TestWorkUsesOnlyTheEngine(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "worker.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && fd.Name.Name == "Work" {
			continue // Queue.Work
		}
		ast.Inspect(d, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == "Queue" {
				t.Errorf("%s: worker.go names Queue outside Queue.Work", fset.Position(id.Pos()))
			}
			return true
		})
	}
}
