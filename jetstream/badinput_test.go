package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
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

// TestForeignMessageTooLargeToDeadLetter: a foreign message whose body is
// near the server's max_payload cannot carry a dead letter's headers even
// with its cause cut: it is dead-lettered without its body, with a cause
// that says the body was too large to keep, its size and its stream
// sequence, and terminated: it never reaches a handler and never comes
// back; Redrive refuses the dead letter (it holds no body). (Before, the
// dead letter failed (ErrTooLarge), the message was neither dead-lettered
// nor terminated, and it came back after every visibility, for good.)
func TestForeignMessageTooLargeToDeadLetter(t *testing.T) {
	q := smallServerQueue(t, walqjs.QueueOptions{Visibility: time.Second})
	ctx := context.Background()
	const subj = "walq.sizes.q.jobs.p0"
	size := smallPayload - 200
	pa, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: make([]byte, size)})
	if err != nil {
		t.Fatal(err)
	}
	// The server answers a raw publish before its consumer knows of the
	// message, so a TryGet may not see it yet: asked again until the dead
	// letter is there.
	var dl []walq.DeadLetter
	for deadline := time.Now().Add(2 * time.Second); ; {
		if m, ok, err := q.TryGet(); ok || err != nil {
			t.Fatalf("TryGet handed out %d, %v, %v", m.ID, ok, err)
		}
		if dl, err = q.DeadLetters(0); err != nil {
			t.Fatal(err)
		}
		if len(dl) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(dl) != 1 || len(dl[0].Body) != 0 || !strings.Contains(dl[0].LastError, "too large to keep") ||
		!strings.Contains(dl[0].LastError, fmt.Sprintf("%d B", size)) || !strings.Contains(dl[0].LastError, fmt.Sprintf("stream sequence %d", pa.Sequence)) {
		t.Fatalf("dead letters of a foreign message of %d B (server max_payload %d): %+v; want one without the body, saying why", size, smallPayload, dl)
	}
	st, err := q.js.Stream(ctx, "WALQ_sizes")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, njs.WithSubjectFilter(subj))
	if err != nil || info.State.Subjects[subj] != 0 {
		t.Fatalf("%v messages still on %s (%v): not terminated", info.State.Subjects, subj, err)
	}
	if err := q.Redrive(dl[0].ID); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("Redrive of a dead letter without its body = %v; want ErrInvalid", err)
	}
}
