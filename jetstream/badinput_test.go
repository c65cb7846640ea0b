package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestForeignMessages: messages that walq did not write, published on a
// queue's subject by another client, are dead-lettered with a cause that
// says so, while Work goes on handling the queue's own items; none reaches
// the handler, none crashes or wedges Work.
func TestForeignMessages(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()
	q, err := openQueue(s.ClientURL(), "foreign", "jobs", walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second, MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	subject := "walq.foreign.q.jobs.p0"

	// Each kind of foreign message, with what its cause must say.
	foreign := []struct {
		name string
		msg  *nats.Msg
		says string
	}{
		{"no headers", &nats.Msg{Subject: subject, Data: []byte("hello from another client")}, "no Walq-V header"},
		{"other headers", &nats.Msg{Subject: subject, Header: nats.Header{"Content-Type": {"application/json"}}, Data: []byte(`{"a":1}`)}, "no Walq-V header"},
		{"binary body", &nats.Msg{Subject: subject, Data: []byte{0, 0xff, 0xfe, 0x80, '\n'}}, "no Walq-V header"},
		{"empty", &nats.Msg{Subject: subject}, "no Walq-V header"},
		{"newer version", &nats.Msg{Subject: subject, Header: nats.Header{"Walq-V": {"9"}}, Data: []byte("x")}, `"9" is not a version`},
		{"bad due", &nats.Msg{Subject: subject, Header: nats.Header{"Walq-V": {"1"}, "Walq-Due": {"soon"}}, Data: []byte("x")}, "malformed walq header"},
		{"bad id", &nats.Msg{Subject: subject, Header: nats.Header{"Walq-V": {"1"}, "Walq-Id": {"-3"}}, Data: []byte("x")}, "header Walq-Id"},
		{"bad history", &nats.Msg{Subject: subject, Header: nats.Header{"Walq-V": {"1"}, "Walq-History": {"[{"}}, Data: []byte("x")}, "malformed walq header"},
	}
	seqs := map[uint64]string{}
	put := func(i int) uint64 {
		id, err := q.Put(ctx, []byte(fmt.Sprintf("own %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	own := map[uint64]bool{}
	for i, f := range foreign {
		own[put(i)] = true
		pa, err := q.js.PublishMsg(ctx, f.msg)
		if err != nil {
			t.Fatalf("publish %s: %v", f.name, err)
		}
		seqs[pa.Sequence] = f.name
	}
	own[put(100)] = true

	var mu sync.Mutex
	handled := map[uint64]int{}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- walq.Work(wctx, q, 3, func(ctx context.Context, m walq.Message) error {
			mu.Lock()
			handled[m.ID]++
			mu.Unlock()
			return nil
		}, walq.WorkOptions{})
	}()
	deadline := time.Now().Add(20 * time.Second)
	var dl []walq.DeadLetter
	for {
		dl, err = q.DeadLetters(0)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		if len(dl) == len(foreign) && n == len(own) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d dead letters (want %d), %d own items handled (want %d)", len(dl), len(foreign), n, len(own))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Work: %v", err)
	}
	for id := range own {
		if handled[id] != 1 {
			t.Errorf("own item %d handled %d times", id, handled[id])
		}
	}
	for id := range handled {
		if !own[id] {
			t.Errorf("the handler got item %d, which walq did not write", id)
		}
	}
	for _, d := range dl {
		name, ok := seqs[d.ID]
		if !ok {
			t.Errorf("dead letter %d is not one of the foreign messages: %q", d.ID, d.LastError)
			continue
		}
		var want string
		for _, f := range foreign {
			if f.name == name {
				want = f.says
				if string(d.Body) != string(f.msg.Data) {
					t.Errorf("%s: dead letter body %q, want %q", name, d.Body, f.msg.Data)
				}
			}
		}
		if !strings.Contains(d.LastError, "a message walq did not write") || !strings.Contains(d.LastError, want) {
			t.Errorf("%s: cause %q, want it to say walq did not write it, and %q", name, d.LastError, want)
		}
		t.Logf("%s: dead letter %d: %s", name, d.ID, d.LastError)
	}
	// A foreign dead letter can be purged like any other.
	if err := q.PurgeDeadLetters(dl[0].ID); err != nil {
		t.Fatal(err)
	}
}

// freePort finds a loopback port to restart a server on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServerGoesAway: the server stops mid-run. Calls made while it is away
// fail with errors wrapping ErrUnavailable that say what failed; Work does
// not stop: its Gets wait, its settling calls give up at the lease's end
// (ErrLeaseLost, a late ack), and once the server is back (same store) it
// goes on until every item is handled. Nothing acknowledged is lost.
func TestServerGoesAway(t *testing.T) {
	store := t.TempDir()
	port := freePort(t)
	s := startServer(t, store, port)
	url := s.ClientURL()
	q, err := openQueue(url, "away", "jobs", walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second, MaxAttempts: 100, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	const items = 300
	all := map[uint64]bool{}
	for i := range items {
		id, err := q.Put(ctx, []byte(fmt.Sprintf("item %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		all[id] = true
	}
	var mu sync.Mutex
	handled := map[uint64]int{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- walq.Work(wctx, q, 4, func(ctx context.Context, m walq.Message) error {
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			handled[m.ID]++
			mu.Unlock()
			return nil
		}, walq.WorkOptions{})
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	for count() < items/4 {
		time.Sleep(5 * time.Millisecond)
	}
	// A lease held on another queue of the Dir, of a longer visibility,
	// for an ack while the server is away.
	hq, err := q.dir.OpenQueue(ctx, "held", walqjs.QueueOptions{Visibility: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer hq.Close()
	if _, err := hq.Put(ctx, []byte("held")); err != nil {
		t.Fatal(err)
	}
	held, ok, err := hq.TryGet()
	if err != nil || !ok {
		t.Fatalf("TryGet before the server goes: %v %v", ok, err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	t.Logf("server stopped after %d items handled", count())

	// Callers get clear errors.
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = q.Put(pctx, []byte("while away"))
	pcancel()
	if !errors.Is(err, walqjs.ErrUnavailable) || !strings.Contains(err.Error(), "put") {
		t.Errorf("Put while the server is away: %v, want an error wrapping ErrUnavailable that says put", err)
	} else {
		t.Logf("Put while the server is away: %v", err)
	}
	if _, _, err := q.TryGet(); !errors.Is(err, walqjs.ErrUnavailable) {
		t.Errorf("TryGet while the server is away: %v, want ErrUnavailable", err)
	} else {
		t.Logf("TryGet while the server is away: %v", err)
	}
	if _, err := q.DeadLetters(0); !errors.Is(err, walqjs.ErrUnavailable) {
		t.Errorf("DeadLetters while the server is away: %v, want ErrUnavailable", err)
	}
	// An ack while the server is away is tried until the lease's end,
	// then gives up: the lease is lost, and the error says why.
	start := time.Now()
	if err := hq.Ack(held.Receipt); !errors.Is(err, walq.ErrLeaseLost) || !errors.Is(err, walqjs.ErrUnavailable) {
		t.Errorf("Ack while the server is away: %v, want ErrLeaseLost and ErrUnavailable", err)
	} else {
		t.Logf("Ack while the server is away, after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if time.Now().Before(held.LeaseEnd) {
		t.Errorf("the Ack gave up before the lease's end")
	}
	select {
	case err := <-done:
		t.Fatalf("Work returned while the server was away: %v", err)
	case <-time.After(3 * time.Second):
	}
	away := count()

	s = startServer(t, store, port)
	defer s.Shutdown()
	deadline := time.Now().Add(60 * time.Second)
	for count() < items {
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %d of %d items handled", count(), items)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the server came back; Work went on from %d to all %d items", away, items)
	// Past the visibility, nothing is left.
	time.Sleep(2 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Work: %v", err)
	}
	if m, ok, err := q.TryGet(); err != nil || ok {
		t.Fatalf("after every item was handled: TryGet %v %v %v", m.ID, ok, err)
	}
	twice := 0
	for id := range all {
		if handled[id] == 0 {
			t.Errorf("item %d lost", id)
		}
		if handled[id] > 1 {
			twice++
		}
	}
	// An item whose ack was in flight when the server went away runs
	// again: at least once, as the README says.
	t.Logf("%d items ran twice (their ack could not reach the server)", twice)
}

// TestCloseWakesGet: a Get blocked on the server returns walq.ErrClosed
// when the queue closes, at once, not at the end of its pull request.
func TestCloseWakesGet(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()
	q, err := openQueue(s.ClientURL(), "close", "jobs", walqjs.Options{}, walqjs.QueueOptions{Visibility: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := q.Get(context.Background())
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	q.Queue.Close()
	select {
	case err := <-got:
		if !errors.Is(err, walq.ErrClosed) {
			t.Fatalf("the blocked Get returned %v, want ErrClosed", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("the blocked Get returned %v after Close", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Get did not return after Close")
	}
	q.nc.Close()
}
