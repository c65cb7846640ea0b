package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testQueue opens a queue on a fresh directory with a manual clock and a
// fixed backoff, so tests control every time the queue sees.
func testQueue(t *testing.T, opts Options) (*Queue, *ManualClock, string) {
	t.Helper()
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	if opts.Clock == nil {
		opts.Clock = clock
	}
	if opts.Backoff == nil {
		opts.Backoff = func(int) time.Duration { return time.Second }
	}
	if opts.Visibility == 0 {
		opts.Visibility = 10 * time.Second
	}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q, clock, dir
}

func mustPut(t *testing.T, q *Queue, body string, opts ...PutOption) uint64 {
	t.Helper()
	id, err := q.Put(context.Background(), []byte(body), opts...)
	if err != nil {
		t.Fatalf("Put(%q): %v", body, err)
	}
	return id
}

func mustTryGet(t *testing.T, q *Queue) Message {
	t.Helper()
	m, ok, err := q.TryGet()
	if err != nil || !ok {
		t.Fatalf("TryGet = ok %v, err %v; want an item", ok, err)
	}
	return m
}

func expectEmpty(t *testing.T, q *Queue) {
	t.Helper()
	if m, ok, err := q.TryGet(); err != nil || ok {
		t.Fatalf("TryGet = %+v, %v, %v; want nothing ready", m, ok, err)
	}
}

// advance moves the clock and waits until the queue's timer loop has
// handled everything that came due (it re-arms its timer when done).
func advance(t *testing.T, q *Queue, clock *ManualClock, d time.Duration) {
	t.Helper()
	clock.Advance(d)
	q.settle()
}

func TestPutGetAck(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	id := mustPut(t, q, "hello")
	m := mustTryGet(t, q)
	if m.ID != id || string(m.Body) != "hello" || m.Attempt != 1 || m.Deliveries != 1 {
		t.Fatalf("got %+v", m)
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(m.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second Ack = %v, want ErrLeaseLost", err)
	}
	expectEmpty(t, q)
	st := q.Stats()
	if st.Put != 1 || st.Acked != 1 || st.Delivered != 1 || st.LateAcks != 1 || st.Items != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOrderPriorityThenFIFO(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	a := mustPut(t, q, "a", WithPriority(5))
	clock.Advance(time.Millisecond)
	b := mustPut(t, q, "b")
	clock.Advance(time.Millisecond)
	c := mustPut(t, q, "c", WithPriority(5))
	clock.Advance(time.Millisecond)
	d := mustPut(t, q, "d", WithPriority(-1))
	for _, want := range []uint64{d, b, a, c} {
		if m := mustTryGet(t, q); m.ID != want {
			t.Fatalf("got item %d (%s), want %d", m.ID, m.Body, want)
		}
	}
}

func TestDelayedNeverEarlyAndEarlierWakes(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	late := mustPut(t, q, "late", WithDelay(time.Hour))
	expectEmpty(t, q)

	got := make(chan Message, 1)
	go func() {
		m, err := q.Get(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	q.waitForWaiters(1)
	soon := mustPut(t, q, "soon", WithDelay(50*time.Millisecond))
	advance(t, q, clock, 49*time.Millisecond)
	select {
	case m := <-got:
		t.Fatalf("delivered %d before it was due", m.ID)
	default:
	}
	advance(t, q, clock, time.Millisecond)
	if m := <-got; m.ID != soon {
		t.Fatalf("got %d, want the 50ms item %d", m.ID, soon)
	}
	advance(t, q, clock, time.Hour)
	if m := mustTryGet(t, q); m.ID != late {
		t.Fatalf("got %d, want %d", m.ID, late)
	}
}

func TestLeaseExpiryRedeliversAndCountsAttempts(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 2, Visibility: time.Second})
	id := mustPut(t, q, "x")
	m1 := mustTryGet(t, q)
	advance(t, q, clock, time.Second) // lease ends; backoff 1s
	if err := q.Ack(m1.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Ack after lease end = %v, want ErrLeaseLost", err)
	}
	expectEmpty(t, q)
	advance(t, q, clock, time.Second)
	m2 := mustTryGet(t, q)
	if m2.ID != id || m2.Attempt != 2 || m2.Deliveries != 2 || m2.Receipt == m1.Receipt {
		t.Fatalf("second delivery %+v", m2)
	}
	advance(t, q, clock, time.Second) // out of attempts: dead
	dl := q.DeadLetters(0)
	if len(dl) != 1 || dl[0].ID != id || dl[0].Attempts != 2 || dl[0].LastError != "lease expired" {
		t.Fatalf("dead letters %+v", dl)
	}
	st := q.Stats()
	if st.Expired != 2 || st.DeadLettered != 1 || st.Dead != 1 || st.LateAcks != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestExpiredButNotYetReapedIsFenced(t *testing.T) {
	q, clock, _ := testQueue(t, Options{Visibility: time.Second})
	mustPut(t, q, "x")
	m := mustTryGet(t, q)
	clock.Advance(time.Second) // no settle: the timer may not have run yet
	for name, call := range map[string]func() error{
		"ack":    func() error { return q.Ack(m.Receipt) },
		"extend": func() error { return q.Extend(m.Receipt, time.Minute) },
		"nack":   func() error { return q.Nack(m.Receipt, errors.New("x")) },
		"dead":   func() error { return q.DeadLetter(m.Receipt, errors.New("x")) },
	} {
		if err := call(); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("%s after lease end = %v, want ErrLeaseLost", name, err)
		}
	}
}

func TestExtendKeepsLease(t *testing.T) {
	q, clock, _ := testQueue(t, Options{Visibility: time.Second})
	mustPut(t, q, "slow")
	m := mustTryGet(t, q)
	for i := 0; i < 5; i++ {
		advance(t, q, clock, 600*time.Millisecond)
		if err := q.Extend(m.Receipt, time.Second); err != nil {
			t.Fatalf("extend %d: %v", i, err)
		}
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Expired != 0 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNackBackoffThenDeadLetter(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 2})
	id := mustPut(t, q, "bad")
	m := mustTryGet(t, q)
	if err := q.Nack(m.Receipt, errors.New("boom 1")); err != nil {
		t.Fatal(err)
	}
	expectEmpty(t, q) // backing off
	advance(t, q, clock, time.Second)
	m = mustTryGet(t, q)
	if err := q.Nack(m.Receipt, errors.New("boom 2")); err != nil {
		t.Fatal(err)
	}
	advance(t, q, clock, time.Hour)
	expectEmpty(t, q)
	dl := q.DeadLetters(10)
	if len(dl) != 1 || dl[0].ID != id || dl[0].LastError != "boom 2" || dl[0].Attempts != 2 {
		t.Fatalf("dead letters %+v", dl)
	}
	// Redrive resets attempts, not deliveries; the old receipt stays dead.
	if err := q.Redrive(id); err != nil {
		t.Fatal(err)
	}
	m2 := mustTryGet(t, q)
	if m2.Attempt != 1 || m2.Deliveries != 3 {
		t.Fatalf("after redrive %+v", m2)
	}
	if err := q.Ack(m.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("receipt from before the redrive: %v", err)
	}
	if err := q.DeadLetter(m2.Receipt, errors.New("permanent")); err != nil {
		t.Fatal(err)
	}
	if err := q.PurgeDeadLetters(); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Items != 0 || st.Purged != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDeadlineDiscards(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	mustPut(t, q, "expires", WithDeadline(epoch.Add(time.Second)))
	keep := mustPut(t, q, "keeps")
	advance(t, q, clock, time.Second)
	if m := mustTryGet(t, q); m.ID != keep {
		t.Fatalf("got %d, want %d", m.ID, keep)
	}
	expectEmpty(t, q)
	if st := q.Stats(); st.Discarded != 1 || st.Items != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A nack whose backoff lands on the deadline discards at once.
	mustPut(t, q, "short", WithDeadline(clock.Now().Add(500*time.Millisecond)))
	m := mustTryGet(t, q)
	if err := q.Nack(m.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Discarded != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestKeysAndWindow(t *testing.T) {
	q, clock, _ := testQueue(t, Options{KeyWindow: time.Minute})
	id := mustPut(t, q, "a", WithKey("k"))
	dup, err := q.Put(context.Background(), []byte("b"), WithKey("k"))
	if !errors.Is(err, ErrDuplicate) || dup != id {
		t.Fatalf("duplicate put = %d, %v; want %d, ErrDuplicate", dup, err, id)
	}
	m := mustTryGet(t, q)
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	advance(t, q, clock, 59*time.Second)
	if _, err := q.Put(context.Background(), []byte("c"), WithKey("k")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("inside the window: %v", err)
	}
	advance(t, q, clock, time.Second)
	if _, err := q.Put(context.Background(), []byte("d"), WithKey("k")); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestPutBatch(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	held := mustPut(t, q, "held", WithKey("h"))
	ids, err := q.PutBatch(context.Background(), []Item{
		{Body: []byte("1"), Key: "x"},
		{Body: []byte("2"), Key: "h"},
		{Body: []byte("3"), Key: "x"},
		{Body: []byte("4")},
	})
	var be *BatchError
	if !errors.As(err, &be) || !errors.Is(err, ErrDuplicate) {
		t.Fatalf("err = %v, want a *BatchError with ErrDuplicate", err)
	}
	if be.Errors[0] != nil || be.Errors[1] == nil || be.Errors[2] == nil || be.Errors[3] != nil {
		t.Fatalf("per-item errors %v", be.Errors)
	}
	if ids[1] != held || ids[2] != ids[0] || ids[3] != ids[0]+1 {
		t.Fatalf("ids %v (held %d)", ids, held)
	}
	if st := q.Stats(); st.Items != 3 {
		t.Fatalf("items %d, want 3", st.Items)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	q, clock, dir := testQueue(t, Options{MaxBodySize: 10, MaxItems: 2})
	mustPut(t, q, "one")
	m := mustTryGet(t, q)
	before := q.Stats()
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"oversized body", func() error { _, err := q.Put(ctx, make([]byte, 11)); return err }, ErrTooLarge},
		{"negative delay", func() error { _, err := q.Put(ctx, nil, WithDelay(-1)); return err }, ErrInvalid},
		{"key too long", func() error {
			_, err := q.Put(ctx, nil, WithKey(string(make([]byte, MaxKeySize+1))))
			return err
		}, ErrInvalid},
		{"deadline before due", func() error {
			_, err := q.Put(ctx, nil, WithDelay(time.Minute), WithDeadline(clock.Now().Add(time.Second)))
			return err
		}, ErrInvalidDeadline},
		{"deadline at due", func() error { _, err := q.Put(ctx, nil, WithDeadline(clock.Now())); return err }, ErrInvalidDeadline},
		{"full", func() error {
			_, err := q.PutBatch(ctx, []Item{{Body: []byte("a")}, {Body: []byte("b")}})
			return err
		}, ErrFull},
		{"zero extend", func() error { return q.Extend(m.Receipt, 0) }, ErrInvalid},
		{"endless extend", func() error { return q.Extend(m.Receipt, math.MaxInt64) }, ErrInvalid},
		{"endless delay", func() error { _, err := q.Put(ctx, nil, WithDelay(math.MaxInt64)); return err }, ErrInvalid},
		{"endless visibility", func() error { _, err := Open(t.TempDir(), Options{Visibility: math.MaxInt64}); return err }, ErrInvalid},
		{"negative extend", func() error { return q.Extend(m.Receipt, -time.Second) }, ErrInvalid},
		{"unknown receipt", func() error { return q.Ack(q.receiptFor(999)) }, ErrLeaseLost},
		{"zero receipt", func() error { return q.Ack(Receipt{}) }, ErrInvalid},
		{"redrive of a live item", func() error { return q.Redrive(m.ID) }, ErrNotFound},
		{"purge of an unknown item", func() error { return q.PurgeDeadLetters(12345) }, ErrNotFound},
		{"cancelled context", func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := q.Put(c, []byte("x"))
			return err
		}, context.Canceled},
		{"second open", func() error { _, err := Open(dir, Options{}); return err }, ErrLocked},
		{"bad options", func() error { _, err := Open(t.TempDir(), Options{Visibility: -1}); return err }, ErrInvalid},
		{"bad sync interval", func() error { _, err := Open(t.TempDir(), Options{Sync: SyncInterval(0)}); return err }, ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	after := q.Stats()
	if after.Items != before.Items || after.Put != before.Put || after.LastLSN != before.LastLSN {
		t.Fatalf("bad input changed the queue: before %+v after %+v", before, after)
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatalf("the lease survived the bad calls: %v", err)
	}
}

func TestClosed(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	mustPut(t, q, "x")
	m := mustTryGet(t, q)
	blocked := make(chan error, 1)
	go func() { _, err := q.Get(context.Background()); blocked <- err }()
	q.waitForWaiters(1)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Get = %v, want ErrClosed", err)
	}
	calls := map[string]func() error{
		"put":     func() error { _, err := q.Put(context.Background(), nil); return err },
		"get":     func() error { _, err := q.Get(context.Background()); return err },
		"tryget":  func() error { _, _, err := q.TryGet(); return err },
		"ack":     func() error { return q.Ack(m.Receipt) },
		"extend":  func() error { return q.Extend(m.Receipt, time.Second) },
		"nack":    func() error { return q.Nack(m.Receipt, nil) },
		"close":   q.Close,
		"compact": q.Compact,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestGetCancelled(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	mustPut(t, q, "ready")
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := q.Get(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with an ended context and an item ready = %v, want context.Canceled", err)
	}
	mustTryGet(t, q) // the item was not leased
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := q.Get(ctx); errc <- err }()
	q.waitForWaiters(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	opts := Options{Clock: clock, Backoff: func(int) time.Duration { return time.Second }, MaxAttempts: 3}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := q.Put(ctx, []byte(fmt.Sprint(i)), WithKey(fmt.Sprint("k", i))); err != nil {
			t.Fatal(err)
		}
	}
	m, _, _ := q.TryGet()
	q.Ack(m.Receipt)
	open, _, _ := q.TryGet() // left open: expires on recovery
	before := q.Stats()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	after := q.Stats()
	if after.Items != before.Items || after.Put != 10 || after.Acked != 1 || after.Recovery.LeasesExpired != 1 {
		t.Fatalf("before %+v\nafter %+v", before, after)
	}
	if err := q.Ack(open.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("receipt from before the restart: %v", err)
	}
	if _, err := q.Put(ctx, nil, WithKey("k0")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("key window across restart: %v", err)
	}
}

// TestClockSteppedBack: a clock stepped back across a restart neither
// reorders time in the log nor stretches a delay: the item comes due after
// its delay as measured by the clock from the restart.
func TestClockSteppedBack(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	q, err := Open(dir, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "delayed", WithDelay(10*time.Second))
	q.Close()

	back := NewManualClock(epoch.Add(-time.Hour))
	q, err = Open(dir, Options{Clock: back})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	advance(t, q, back, 9*time.Second)
	expectEmpty(t, q)
	advance(t, q, back, time.Second)
	m := mustTryGet(t, q)
	// Times come back in wall time: the item was put 10s ago and its lease
	// ends one visibility from now, by the clock the caller reads.
	if want := back.Now().Add(-10 * time.Second); !m.EnqueuedAt.Equal(want) {
		t.Fatalf("EnqueuedAt %v, want %v", m.EnqueuedAt, want)
	}
	if want := back.Now().Add(defaultVisibility); !m.LeaseEnd.Equal(want) {
		t.Fatalf("LeaseEnd %v, want %v", m.LeaseEnd, want)
	}
}

// TestMaxBytesCountsDeadLetters: dead letters count toward MaxBytes until
// purged.
func TestMaxBytesCountsDeadLetters(t *testing.T) {
	q, _, _ := testQueue(t, Options{MaxBytes: 10})
	ctx := context.Background()
	mustPut(t, q, "12345")
	m := mustTryGet(t, q)
	if err := q.DeadLetter(m.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "12345")
	if _, err := q.Put(ctx, []byte("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("put past MaxBytes = %v, want ErrFull", err)
	}
	if err := q.PurgeDeadLetters(); err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "x")
}

// TestShorterExtendRearmsTimer: an Extend that brings a lease's end closer
// than the timer planned wakes it, so the item comes back on time (found by
// fuzzing).
func TestShorterExtendRearmsTimer(t *testing.T) {
	q, clock, _ := testQueue(t, Options{Visibility: 10 * time.Second})
	mustPut(t, q, "x")
	m := mustTryGet(t, q)
	if err := q.Extend(m.Receipt, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(6500 * time.Millisecond)
	// Wait on the timer loop itself (no settle): it must have re-armed for
	// the new, earlier end and now take the lease back. Not on its plan:
	// once it has taken the lease back it plans for nothing (timerAt is
	// MaxInt64), and a wait for a plan at 6 s would never end.
	waitFor(t, "the lease to expire", func() bool { return q.Stats().Expired == 1 })
}

// TestBatchTooLarge: a batch is one record; one past MaxBatchBytes is
// refused whole, even when every body is within MaxBodySize. The batch of
// millions of empty items (checking each takes a second under the race
// detector) runs in a build with the tag long; the default run passes the
// limit with 63 MiB of bodies and 65,537 empty items, which only the items'
// overhead takes past it.
func TestBatchTooLarge(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	body := make([]byte, 1<<20)
	items := make([]Item, MaxBatchBytes/len(body)+1)
	for i := range items {
		items[i] = Item{Body: body}
	}
	if _, err := q.PutBatch(context.Background(), items); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutBatch of %d MiB = %v, want ErrTooLarge", len(items), err)
	}
	if st := q.Stats(); st.Items != 0 {
		t.Fatalf("%d items stored", st.Items)
	}
	// Empty items count too: the record holds their keys and other fields
	// (a batch of millions of empty items built a record of hundreds of MB).
	if testrule.Long {
		empty := make([]Item, MaxBatchBytes/batchItemOverhead+1)
		if _, err := q.PutBatch(context.Background(), empty); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("PutBatch of %d empty items = %v, want ErrTooLarge", len(empty), err)
		}
	}
	// 63 MiB of bodies leave 1 MiB: the overhead of 65,536 items, which
	// one more item passes.
	mixed := make([]Item, (1<<20)/batchItemOverhead+1)
	for i := range 63 {
		mixed[i].Body = body
	}
	if _, err := q.PutBatch(context.Background(), mixed); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutBatch of 63 MiB of bodies in %d items = %v, want ErrTooLarge", len(mixed), err)
	}
	// Keys of MaxKeySize bytes, distinct, "%0*d" of the item's index: cut
	// from one string rather than formatted one by one (64 MiB of keys:
	// the long tests only).
	if !testrule.Long {
		return
	}
	keyed := make([]Item, MaxBatchBytes/MaxKeySize)
	keys := bytes.Repeat([]byte{'0'}, len(keyed)*MaxKeySize)
	for i := range keyed {
		end := (i + 1) * MaxKeySize
		d := strconv.Itoa(i)
		copy(keys[end-len(d):end], d)
	}
	all := string(keys)
	for i := range keyed {
		keyed[i].Key = all[i*MaxKeySize : (i+1)*MaxKeySize]
	}
	if _, err := q.PutBatch(context.Background(), keyed); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutBatch of %d items with %d-byte keys = %v, want ErrTooLarge", len(keyed), MaxKeySize, err)
	}
	if st := q.Stats(); st.Items != 0 {
		t.Fatalf("%d items stored", st.Items)
	}
}
