package walq

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/state"
)

func mustOpenQueue(t *testing.T, q *Queue, name string, o QueueOptions) *Queue {
	t.Helper()
	h, err := q.OpenQueue(name, o)
	if err != nil {
		t.Fatalf("OpenQueue(%q): %v", name, err)
	}
	return h
}

func reopen(t *testing.T, q *Queue, dir string, opts Options) *Queue {
	t.Helper()
	must(t, q.Close())
	if opts.Visibility == 0 {
		opts.Visibility = 10 * time.Second
	}
	q2, err := Open(dir, opts)
	must(t, err)
	t.Cleanup(func() { q2.Close() })
	return q2
}

// TestNamedQueuesAreSeparate: items, keys, receipts, counters and dead
// letters are the queue's own; IDs are the directory's.
func TestNamedQueuesAreSeparate(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	mail := mustOpenQueue(t, q, "mail", QueueOptions{})
	hooks := mustOpenQueue(t, q, "web.hooks-2", QueueOptions{})
	a := mustPut(t, mail, "m1", WithKey("k"))
	b := mustPut(t, hooks, "h1", WithKey("k")) // same key, other queue: not a duplicate
	c := mustPut(t, q, "d1", WithKey("k"))
	if a == b || b == c || a == c {
		t.Fatalf("IDs %d %d %d are not unique in the directory", a, b, c)
	}
	if _, err := mail.Put(context.Background(), []byte("m2"), WithKey("k")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second put of key k in mail = %v, want ErrDuplicate", err)
	}
	m := mustTryGet(t, hooks)
	if m.ID != b || string(m.Body) != "h1" || m.Queue != "web.hooks-2" {
		t.Fatalf("hooks delivered %+v", m)
	}
	if err := mail.Ack(m.Receipt); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ack of a hooks receipt on mail = %v, want ErrInvalid", err)
	}
	if err := q.Ack(m.Receipt); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ack of a hooks receipt on the default queue = %v, want ErrInvalid", err)
	}
	must(t, hooks.Ack(m.Receipt))
	if _, ok, _ := hooks.TryGet(); ok {
		t.Fatal("hooks delivered a second item")
	}
	if s := mail.Stats(); s.Items != 1 || s.Put != 1 || s.Queue != "mail" {
		t.Fatalf("mail stats %+v", s)
	}
	if s := hooks.Stats(); s.Items != 0 || s.Put != 1 || s.Acked != 1 {
		t.Fatalf("hooks stats %+v", s)
	}
	if s := q.DirStats(); s.Items != 2 || s.Put != 3 || s.Acked != 1 || s.Queue != "" {
		t.Fatalf("directory stats %+v", s)
	}
	infos, err := q.Queues()
	must(t, err)
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	if strings.Join(names, ",") != ",mail,web.hooks-2" {
		t.Fatalf("Queues = %q", names)
	}
	if infos[1].ID == 0 || infos[1].ID >= infos[2].ID || infos[1].Created.IsZero() {
		t.Fatalf("queue infos %+v", infos)
	}
	if err := mail.Redrive(b); !errors.Is(err, ErrNotFound) {
		t.Fatalf("redrive of another queue's item = %v, want ErrNotFound", err)
	}
}

func TestQueueNames(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	for _, name := range []string{"", ".hidden", "-x", "a b", "a/b", "ü", strings.Repeat("a", 101), "a\x00"} {
		if _, err := q.OpenQueue(name, QueueOptions{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "queue name") {
			t.Errorf("OpenQueue(%q) = %v, want ErrInvalid naming the problem", name, err)
		}
	}
	for _, name := range []string{"a", "A.b_c-9", strings.Repeat("z", 100), "0"} {
		mustOpenQueue(t, q, name, QueueOptions{})
	}
	if _, err := q.OpenQueue("x", QueueOptions{MaxInFlight: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative MaxInFlight = %v", err)
	}
}

// TestQueueSettingsRecorded: settings are records, written when they
// change, and known after a restart before any handle gives them.
func TestQueueSettingsRecorded(t *testing.T) {
	q, clock, dir := testQueue(t, Options{})
	o := QueueOptions{Visibility: time.Minute, MaxAttempts: 2, KeyWindow: time.Hour, MaxItems: 5, MaxBytes: 500, MaxInFlight: 3}
	mustOpenQueue(t, q, "s", o)
	last := q.Stats().LastLSN
	mustOpenQueue(t, q, "s", o)
	if q.Stats().LastLSN != last {
		t.Fatal("opening a queue with its recorded settings wrote a record")
	}
	q = reopen(t, q, dir, Options{Clock: clock})
	infos, err := q.Queues()
	must(t, err)
	got := infos[1].Options
	if got.Visibility != o.Visibility || got.MaxAttempts != o.MaxAttempts || got.KeyWindow != o.KeyWindow ||
		got.MaxItems != o.MaxItems || got.MaxBytes != o.MaxBytes || got.MaxInFlight != o.MaxInFlight {
		t.Fatalf("settings after reopen %+v, want %+v", got, o)
	}
	// Opening never changes them: zero fields keep what is recorded, and
	// a field that differs is refused, naming it.
	h := mustOpenQueue(t, q, "s", QueueOptions{})
	if got := h.Settings(); got.MaxInFlight != 3 || got.MaxItems != 5 || got.Visibility != time.Minute {
		t.Fatalf("OpenQueue with zero options changed the settings: %+v", got)
	}
	o.MaxInFlight = 1
	if _, err := q.OpenQueue("s", o); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "MaxInFlight") ||
		!strings.Contains(err.Error(), "SetSettings") {
		t.Fatalf("OpenQueue with another MaxInFlight: %v, want ErrInvalid naming it and SetSettings", err)
	}
	if q.Stats().LastLSN != last {
		t.Fatal("opening a queue wrote a record")
	}
	must(t, h.SetSettings(o))
	if q.Stats().LastLSN != last+1 {
		t.Fatalf("a change of settings wrote %d records", q.Stats().LastLSN-last)
	}
	q = reopen(t, q, dir, Options{Clock: clock})
	infos, _ = q.Queues()
	if infos[1].Options.MaxInFlight != 1 {
		t.Fatalf("changed settings not kept: %+v", infos[1].Options)
	}
}

// TestPauseIsDurable: a paused queue takes puts, delivers nothing, and
// stays paused across a restart; a pause until a time wakes a blocked Get
// at its end without another event.
func TestPauseIsDurable(t *testing.T) {
	q, clock, dir := testQueue(t, Options{})
	p := mustOpenQueue(t, q, "p", QueueOptions{})
	must(t, p.Pause(time.Time{}))
	id := mustPut(t, p, "x")
	if _, ok, err := p.TryGet(); ok || err != nil {
		t.Fatalf("paused queue delivered (ok %v, err %v)", ok, err)
	}
	mustPut(t, q, "default goes on")
	mustTryGet(t, q)
	q = reopen(t, q, dir, Options{Clock: clock})
	p = mustOpenQueue(t, q, "p", QueueOptions{})
	if s := p.Stats(); !s.Paused || s.Items != 1 {
		t.Fatalf("after reopen: %+v", s)
	}
	if _, ok, _ := p.TryGet(); ok {
		t.Fatal("paused queue delivered after a restart")
	}
	must(t, p.Resume())
	if m := mustTryGet(t, p); m.ID != id {
		t.Fatalf("resumed queue delivered %d, want %d", m.ID, id)
	}

	// Until a time: a Get blocked on the paused queue wakes at its end.
	must(t, p.Pause(clock.Now().Add(time.Minute)))
	mustPut(t, p, "y")
	got := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background())
		got <- err
	}()
	p.waitForWaiters(1)
	select {
	case err := <-got:
		t.Fatalf("Get returned during the pause: %v", err)
	default:
	}
	q.waitForTimerAt(q.qt.fromWall(clock.Now().Add(time.Minute)))
	clock.Advance(time.Minute)
	if err := <-got; err != nil {
		t.Fatalf("Get after the pause: %v", err)
	}
	if err := p.Pause(clock.Now().Add(-time.Second)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("pause until a past time = %v", err)
	}
}

// TestDeleteQueue: refused with leases open unless forced; every handle
// and blocked Get then says ErrQueueDeleted; the name makes a new, empty
// incarnation; after a compaction nothing of the old one is on disk.
func TestDeleteQueue(t *testing.T) {
	q, clock, dir := testQueue(t, Options{})
	d := mustOpenQueue(t, q, "doomed", QueueOptions{})
	d2 := mustOpenQueue(t, q, "doomed", QueueOptions{})
	secret := "secret-body-of-the-doomed-queue"
	mustPut(t, d, secret, WithKey("key-of-doomed"))
	mustPut(t, d, "second")
	m := mustTryGet(t, d)
	if err := d.Delete(false); !errors.Is(err, ErrQueueBusy) {
		t.Fatalf("delete with a lease open = %v, want ErrQueueBusy", err)
	}
	blocked := make(chan error, 1)
	idle := mustOpenQueue(t, q, "idle", QueueOptions{})
	must(t, d.Delete(true))
	for _, h := range []*Queue{d, d2} {
		if _, err := h.Put(context.Background(), []byte("x")); !errors.Is(err, ErrQueueDeleted) {
			t.Fatalf("Put on a deleted queue's handle = %v", err)
		}
		if _, _, err := h.TryGet(); !errors.Is(err, ErrQueueDeleted) {
			t.Fatalf("TryGet on a deleted queue's handle = %v", err)
		}
	}
	if err := d.Ack(m.Receipt); !errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("ack of a deleted queue's lease = %v", err)
	}
	// A Get blocked on a queue that is then deleted returns ErrQueueDeleted.
	go func() {
		_, err := idle.Get(context.Background())
		blocked <- err
	}()
	idle.waitForWaiters(1)
	must(t, idle.Delete(false))
	if err := <-blocked; !errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("blocked Get on a deleted queue = %v", err)
	}

	again := mustOpenQueue(t, q, "doomed", QueueOptions{})
	if again.rt.id == d.rt.id {
		t.Fatal("the re-created queue has the deleted one's incarnation")
	}
	if s := again.Stats(); s.Items != 0 || s.Put != 0 || s.Delivered != 0 {
		t.Fatalf("re-created queue is not empty: %+v", s)
	}
	if _, err := again.Put(context.Background(), []byte("new"), WithKey("key-of-doomed")); err != nil {
		t.Fatalf("the deleted queue's key still holds in the new one: %v", err)
	}
	if _, err := d.Put(context.Background(), []byte("x")); !errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("an old handle reached the new incarnation: %v", err)
	}
	if err := again.Ack(m.Receipt); !errors.Is(err, ErrQueueDeleted) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("an old receipt on the new incarnation = %v, want ErrQueueDeleted (and ErrInvalid)", err)
	}
	must(t, q.Compact())
	q = reopen(t, q, dir, Options{Clock: clock})
	q.mu.Lock()
	q.st.Each(func(it *state.Item) {
		if it.Queue == d.rt.id || it.Queue == idle.rt.id {
			t.Errorf("item %d of a deleted queue survived", it.ID)
		}
	})
	q.mu.Unlock()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s still holds a body of the deleted queue", e.Name())
		}
	}
	// The log may still hold the deleted queue's bodies: they are garbage
	// like an acked item's, reclaimed with the file that holds them
	// (TestDeletedQueueCopiesNoHeldBacklog).
	if err := q.Delete(true); !errors.Is(err, ErrInvalid) {
		t.Fatalf("deleting the default queue = %v", err)
	}
}

// TestMaxInFlight: the cap holds on every lease, and a Get blocked at the
// cap wakes when a lease ends.
func TestMaxInFlight(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	c := mustOpenQueue(t, q, "capped", QueueOptions{MaxInFlight: 2})
	for range 4 {
		mustPut(t, c, "x")
	}
	m1, m2 := mustTryGet(t, c), mustTryGet(t, c)
	if _, ok, _ := c.TryGet(); ok {
		t.Fatal("a third lease passed the cap of 2")
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background())
		got <- err
	}()
	c.waitForWaiters(1)
	must(t, c.Ack(m1.Receipt))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	must(t, c.Nack(m2.Receipt, errors.New("x")))
	if s := c.Stats(); s.Leased != 1 || s.MaxInFlight != 2 {
		t.Fatalf("stats %+v", s)
	}
	// The state refuses a lease past the cap: replay checks it.
	mustTryGet(t, c)
	mustPut(t, c, "y")
	q.mu.Lock()
	qs := q.st.Queue(c.rt.id)
	qs.Promote(q.qt.now())
	it := qs.NextReady()
	if it == nil {
		q.mu.Unlock()
		t.Fatal("no ready item")
	}
	err := q.st.ApplyTo(q.st.LastLSN()+1, c.rt.id, &state.Lease{Time: q.qt.now(), ID: it.ID, LeaseEnd: q.qt.now() + 1e9})
	q.mu.Unlock()
	if !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("state applied a lease past the cap: %v", err)
	}
}

// TestRedriveTo: dead letters move with their IDs; a key held in the
// target or a full target is reported per item and leaves that item.
func TestRedriveTo(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	src := mustOpenQueue(t, q, "src", QueueOptions{MaxAttempts: 1})
	dst := mustOpenQueue(t, q, "dst", QueueOptions{MaxItems: 3})
	var ids []uint64
	for i, key := range []string{"a", "b", "", ""} {
		ids = append(ids, mustPut(t, src, "body"+string(rune('0'+i)), WithKey(key)))
		m := mustTryGet(t, src)
		must(t, src.Nack(m.Receipt, errors.New("boom")))
	}
	if src.Stats().Dead != 4 {
		t.Fatalf("dead letters: %+v", src.Stats())
	}
	mustPut(t, dst, "holds b", WithKey("b"))
	err := src.RedriveTo(dst, ids...)
	var be *BatchError
	if !errors.As(err, &be) || be.Errors[0] != nil || !errors.Is(be.Errors[1], ErrDuplicate) ||
		be.Errors[2] != nil || !errors.Is(be.Errors[3], ErrFull) {
		t.Fatalf("RedriveTo = %v", err)
	}
	if s, d := src.Stats(), dst.Stats(); s.Dead != 2 || s.MovedOut != 2 || d.Items != 3 || d.MovedIn != 2 {
		t.Fatalf("after the move: src %+v, dst %+v", s, d)
	}
	seen := map[uint64]bool{}
	for range 3 {
		m := mustTryGet(t, dst)
		seen[m.ID] = true
		if m.Attempt != 1 {
			t.Fatalf("moved item's attempt %d", m.Attempt)
		}
	}
	if !seen[ids[0]] || !seen[ids[2]] {
		t.Fatalf("moved items did not keep their IDs: %v", seen)
	}
	if _, err := dst.Put(context.Background(), []byte("x"), WithKey("a")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("the moved item's key does not hold in its new queue: %v", err)
	}
	if _, err := src.Put(context.Background(), []byte("x"), WithKey("a")); err != nil {
		t.Fatalf("the moved item's key still holds in its old queue: %v", err)
	}
	if err := src.RedriveTo(dst, 999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RedriveTo of no dead letter = %v", err)
	}
}

// TestAttemptHistory: the last attempts of an item, their ends and errors,
// bounded in count and size, survive a restart.
func TestAttemptHistory(t *testing.T) {
	q, clock, dir := testQueue(t, Options{MaxAttempts: 12})
	id := mustPut(t, q, "x")
	long := strings.Repeat("é", 400) // 800 bytes
	for i := range 12 {
		clock.Advance(time.Second)
		q.settle()
		m := mustTryGet(t, q)
		cause := errors.New("fail " + string(rune('a'+i)))
		if i == 11 {
			cause = errors.New(long)
		}
		must(t, q.Nack(m.Receipt, cause))
	}
	check := func(q *Queue) {
		t.Helper()
		dl := q.DeadLetters(0)
		if len(dl) != 1 || dl[0].ID != id {
			t.Fatalf("dead letters %+v", dl)
		}
		h := dl[0].History
		if len(h) != state.HistoryLen {
			t.Fatalf("history of %d attempts, want %d", len(h), state.HistoryLen)
		}
		if h[0].Error != "fail c" || h[8].Error != "fail k" || h[0].How != "nack" || !h[0].End.After(h[0].Start) && !h[0].End.Equal(h[0].Start) {
			t.Fatalf("history %+v", h)
		}
		if e := h[9].Error; len(e) > state.MaxAttemptError || len(e) < state.MaxAttemptError-1 || !strings.HasPrefix(long, e) {
			t.Fatalf("last error cut to %d bytes: %q", len(e), e)
		}
		if dl[0].LastError != long {
			t.Fatalf("LastError is cut: %d bytes", len(dl[0].LastError))
		}
	}
	check(q)
	must(t, q.Compact())
	check(reopen(t, q, dir, Options{Clock: clock, MaxAttempts: 12}))
}

// TestNamedHandleClose: Close on a named handle closes that handle only.
func TestNamedHandleClose(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	h := mustOpenQueue(t, q, "h", QueueOptions{})
	got := make(chan error, 1)
	go func() {
		_, err := h.Get(context.Background())
		got <- err
	}()
	h.waitForWaiters(1)
	must(t, h.Close())
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Get on a closed handle = %v", err)
	}
	if err := h.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := h.Put(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put on a closed handle = %v", err)
	}
	h2 := mustOpenQueue(t, q, "h", QueueOptions{})
	mustPut(t, h2, "still open")
	mustPut(t, q, "directory open")
}

// TestWorkOnDeletedQueue: Work blocked on a queue that is deleted returns
// ErrQueueDeleted; so does Work with a handler running when it is forced.
func TestWorkOnDeletedQueue(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	idle := mustOpenQueue(t, q, "idle", QueueOptions{})
	done := make(chan error, 1)
	go func() {
		done <- idle.Work(context.Background(), 2, func(context.Context, Message) error { return nil }, WorkOptions{})
	}()
	idle.waitForWaiters(2)
	must(t, idle.Delete(false))
	if err := <-done; !errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("Work on a deleted queue = %v", err)
	}

	busy := mustOpenQueue(t, q, "busy", QueueOptions{})
	mustPut(t, busy, "x")
	started := make(chan struct{})
	go func() {
		done <- busy.Work(context.Background(), 1, func(ctx context.Context, _ Message) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, WorkOptions{Timeout: -1, DrainTimeout: -1})
	}()
	<-started
	must(t, busy.Delete(true))
	if err := <-done; !errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("Work with a handler running on a deleted queue = %v", err)
	}
}

// TestOpenQueueKeepsSettings: a second component that opens a queue only
// to put into it (QueueOptions{}) leaves its cap, visibility and attempts
// as recorded, across a reopen too. On 997a6e0 the zero fields were filled
// from the directory's Options and recorded: the cap was lifted.
func TestOpenQueueKeepsSettings(t *testing.T) {
	q, clock, dir := testQueue(t, Options{})
	o := QueueOptions{Visibility: time.Minute, MaxAttempts: 2, MaxInFlight: 3}
	mustOpenQueue(t, q, "exports", o)
	mustOpenQueue(t, q, "exports", QueueOptions{})
	check := func(when string) {
		t.Helper()
		infos, err := q.Queues()
		must(t, err)
		for _, in := range infos {
			if in.Name == "exports" && (in.Options.MaxInFlight != 3 || in.Options.Visibility != time.Minute || in.Options.MaxAttempts != 2) {
				t.Fatalf("%s: settings %+v, want MaxInFlight 3, Visibility 1m, MaxAttempts 2", when, in.Options)
			}
		}
	}
	check("after a second OpenQueue with no options")
	q = reopen(t, q, dir, Options{Clock: clock})
	mustOpenQueue(t, q, "exports", QueueOptions{})
	check("after a reopen")
}

// TestQueuesStatsAsOfTheirLSN: Queues reads its list a few hundred queues
// at a time; a record appended between two reads shows in a queue's
// figures only with a LastLSN that covers it (a crash-harness run found
// a queue that counted a discard at an LSN before the discard's record).
func TestQueuesStatsAsOfTheirLSN(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	mail := mustOpenQueue(t, q, "mail", QueueOptions{})
	var after uint64
	queuesChunkHook = func() {
		if after == 0 {
			mustPut(t, mail, "between the reads")
			after = mail.Stats().LastLSN
		}
	}
	defer func() { queuesChunkHook = nil }()
	infos, err := q.Queues()
	must(t, err)
	if after == 0 {
		t.Fatal("the hook did not run")
	}
	for _, info := range infos {
		if info.Name == "mail" && info.Stats.Put == 1 && info.Stats.LastLSN < after {
			t.Fatalf("Queues: mail counts the put appended at LSN %d, reports LastLSN %d", after, info.Stats.LastLSN)
		}
	}
}
