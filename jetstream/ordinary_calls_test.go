package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Ordinary calls that must neither lose nor weaken an item: a delayed put
// whose key a ready item holds, Close under Work, WorkQueues across a
// server restart, a last attempt extended then run out, a redrive.

// TestDelayedPutKeyHeldByReadyItem: a delayed Put with a key that a ready
// item holds is a duplicate of that item, and schedules nothing (before,
// it scheduled a second item under the first one's ID).
func TestDelayedPutKeyHeldByReadyItem(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	a := put(t, q, "ready", walq.WithKey("k"))
	id, err := q.Put(context.Background(), []byte("delayed"), walq.WithKey("k"), walq.WithDelay(time.Hour))
	if !errors.Is(err, walq.ErrDuplicate) || id != a {
		t.Fatalf("delayed Put with the key of ready item %d = %d, %v; want %d, ErrDuplicate", a, id, err, a)
	}
	st, err := q.js.Stream(context.Background(), "WALQ_diff")
	if err != nil {
		t.Fatal(err)
	}
	subj := fmt.Sprintf("walq.diff.s.jobs.%d", a)
	if m, err := st.GetLastMsgForSubject(context.Background(), subj); !errors.Is(err, njs.ErrMsgNotFound) {
		t.Fatalf("a schedule on %s (%v): a second item %d", subj, err, m.Sequence)
	}
	// A delayed put of a new key, then a put of it ready: one item.
	b, err := q.Put(context.Background(), []byte("later"), walq.WithKey("k2"), walq.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := q.Put(context.Background(), []byte("now"), walq.WithKey("k2")); !errors.Is(err, walq.ErrDuplicate) || id != b {
		t.Fatalf("ready Put with the key of delayed item %d = %d, %v", b, id, err)
	}
	if id, err := q.Put(context.Background(), []byte("again"), walq.WithKey("k2"), walq.WithDelay(time.Minute)); !errors.Is(err, walq.ErrDuplicate) || id != b {
		t.Fatalf("delayed Put with the key of delayed item %d = %d, %v", b, id, err)
	}
}

// TestCloseUnderWorkRunsNothingTwice: a queue closed while Work's
// handler runs does not send the lease back (before, Close sent a Nak, and
// another consumer ran the item while the handler still did); the item
// comes back once its visibility has run out.
func TestCloseUnderWorkRunsNothingTwice(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()
	qo := walqjs.QueueOptions{Visibility: 20 * time.Second}
	q1, err := openQueue(s.ClientURL(), "close", "jobs", walqjs.Options{}, qo)
	if err != nil {
		t.Fatal(err)
	}
	defer q1.nc.Close()
	q2, err := openQueue(s.ClientURL(), "close", "jobs", walqjs.Options{}, qo)
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if _, err := q1.Put(context.Background(), []byte("once"), walq.WithKey("once")); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	worked := make(chan error, 1)
	go func() {
		worked <- walq.Work(context.Background(), q1.Queue, 1, func(context.Context, walq.Message) error {
			close(started)
			<-release // a handler that does not watch its context
			return nil
		}, walq.WorkOptions{})
	}()
	<-started
	q1.Queue.Close()
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		m, ok, err := q2.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			close(release)
			t.Fatalf("item %d delivered to another handle while its handler still runs", m.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	<-worked
}

// TestWorkQueuesAcrossServerRestart: a WorkQueues pool goes on through a
// restart of the server (before, TryGet's ErrUnavailable stopped it, where
// Work waits).
func TestWorkQueuesAcrossServerRestart(t *testing.T) {
	store, port := t.TempDir(), freePort(t)
	s := startServer(t, store, port)
	away := make(chan struct{}, 1)
	logger := slog.New(signalHandler{msg: "TryGet: the server cannot be reached", ch: away})
	q, err := openQueue(s.ClientURL(), "restart", "jobs", walqjs.Options{Logger: logger}, walqjs.QueueOptions{})
	if err != nil {
		s.Shutdown()
		t.Fatal(err)
	}
	defer q.Close()
	var handled atomic.Int64
	got := make(chan struct{}, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	worked := make(chan error, 1)
	go func() {
		worked <- walq.WorkQueues(ctx, []walq.WorkQueue{{Queue: q.Queue}}, 2, func(context.Context, walq.Message) error {
			handled.Add(1)
			got <- struct{}{}
			return nil
		}, walq.WorkOptions{})
	}()
	putUntil := func(body string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := q.Put(context.Background(), []byte(body))
			if err == nil {
				return
			}
			if !errors.Is(err, walqjs.ErrUnavailable) || time.Now().After(deadline) {
				t.Fatalf("put %s: %v", body, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait := func(n int64) {
		t.Helper()
		for handled.Load() < n {
			select {
			case <-got:
			case err := <-worked:
				t.Fatalf("WorkQueues returned %v with %d of %d handled", err, handled.Load(), n)
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d handled", handled.Load(), n)
			}
		}
	}
	putUntil("before")
	wait(1)
	s.Shutdown()
	s.WaitForShutdown()
	select { // the pool's TryGet met the server gone
	case <-away:
	case err := <-worked:
		t.Fatalf("WorkQueues returned %v while the server was away", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no TryGet met the server away")
	}
	s = startServer(t, store, port)
	defer s.Shutdown()
	putUntil("after")
	wait(2)
	cancel()
	if err := <-worked; err != nil {
		t.Fatalf("WorkQueues: %v", err)
	}
}

// TestExtendedLastAttemptRunsOutToDeadLetters: a last attempt extended
// and then left to run out goes to the dead letters (before, the move's
// deadline was the lease's first end, already past, and the item stayed).
func TestExtendedLastAttemptRunsOutToDeadLetters(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 400 * time.Millisecond, Fence: 150 * time.Millisecond, MaxAttempts: 1})
	id := put(t, q, "slow")
	m := get(t, q, 2*time.Second)
	time.Sleep(150 * time.Millisecond) // into the lease: its first end is 250ms after its start
	if err := q.Extend(m.Receipt, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for {
		dead, err := q.DeadLetters(0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) == 1 && dead[0].ID == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the extended last attempt ran out; dead letters %+v", dead)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedriveKeepsDeadline: a redriven item keeps its deadline, and is
// discarded once it passes, as on walq (before, the redrive dropped it).
func TestRedriveKeepsDeadline(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	deadline := time.Now().Add(600 * time.Millisecond)
	id := put(t, q, "soon", walq.WithDeadline(deadline))
	m := get(t, q, time.Second)
	if err := q.DeadLetter(m.Receipt, errors.New("to the dead letters")); err != nil {
		t.Fatal(err)
	}
	if err := q.Redrive(id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	if m, ok, err := q.TryGet(); err != nil || ok {
		t.Fatalf("after its deadline the redriven item was delivered: %v %v (ID %d)", ok, err, m.ID)
	}
	// Redriven past its deadline: discarded, not refused.
	id2 := put(t, q, "late", walq.WithDeadline(time.Now().Add(300*time.Millisecond)))
	m = get(t, q, time.Second)
	if err := q.DeadLetter(m.Receipt, errors.New("dead")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond)
	if err := q.Redrive(id2); err != nil {
		t.Fatalf("redrive past the deadline: %v", err)
	}
	if m, ok, err := q.TryGet(); err != nil || ok {
		t.Fatalf("an item redriven past its deadline was delivered: %v %v (ID %d)", ok, err, m.ID)
	}
}

// signalHandler is a slog.Handler that signals ch when a record's message
// holds msg.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestKeysAndErrorsTravelExactly: keys that differ only in surrounding
// whitespace, CR or LF are different keys, and a handler, the dead
// letters and a redrive see each exactly as it was put; so is a dead
// letter's cause (before, header sanitising trimmed and rewrote them, and
// such keys collapsed into one).
func TestKeysAndErrorsTravelExactly(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{MaxAttempts: 1})
	keys := []string{"k", " k", "k ", "\tk", "k\r\n", "a\nb", "a\r\nWalq-V: 2", "k\x00", "ü k ", "k/\x7f"}
	ids := map[uint64]string{}
	for i, k := range keys {
		id, err := q.Put(context.Background(), []byte("body"), walq.WithKey(k))
		if err != nil {
			t.Fatalf("put of key %q: %v", k, err)
		}
		if prev, ok := ids[id]; ok {
			t.Fatalf("keys %q and %q: one item %d", prev, k, id)
		}
		ids[id] = k
		if i%2 == 0 { // and a delayed put of it is a duplicate of that item
			if got, err := q.Put(context.Background(), []byte("again"), walq.WithKey(k), walq.WithDelay(time.Hour)); !errors.Is(err, walq.ErrDuplicate) || got != id {
				t.Fatalf("second put of key %q = %d, %v; want %d, ErrDuplicate", k, got, err, id)
			}
		}
	}
	cause := " failed:\r\n\tline two "
	for range keys {
		m := get(t, q, time.Second)
		if m.Key != ids[m.ID] {
			t.Fatalf("item %d delivered with key %q, put with %q", m.ID, m.Key, ids[m.ID])
		}
		if err := q.DeadLetter(m.Receipt, errors.New(cause)); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := q.DeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != len(keys) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(keys))
	}
	for _, d := range dead {
		if d.Key != ids[d.ID] || d.LastError != cause {
			t.Fatalf("dead letter %d: key %q, error %q; put with %q, failed with %q", d.ID, d.Key, d.LastError, ids[d.ID], cause)
		}
		if err := q.Redrive(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	for range keys {
		m := get(t, q, time.Second)
		if m.Key != ids[m.ID] {
			t.Fatalf("redriven item %d has key %q, put with %q", m.ID, m.Key, ids[m.ID])
		}
	}
}
