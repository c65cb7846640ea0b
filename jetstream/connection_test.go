package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestClosedConnectionEndsWork: a NATS connection whose reconnects ran
// out is CLOSED for good (nats.Connect's defaults, as in the README's
// example: 60 tries 2 s apart, so an outage of about two minutes; here one
// try, so the test does not wait). Work returns an error wrapping
// walq.ErrClosed and nats.ErrConnectionClosed, and so do Get, TryGet and
// Put, at once, though the server is back. (Before, the adapter counted a
// closed connection as an outage: Get waited forever, TryGet found
// nothing, and Work neither returned nor handled anything again.)
func TestClosedConnectionEndsWork(t *testing.T) {
	store, port := t.TempDir(), freePort(t)
	s := startServer(t, store, port)
	url := s.ClientURL()
	nc, err := nats.Connect(url, nats.MaxReconnects(1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	ctx := context.Background()
	d, err := walqjs.OpenDir(ctx, js, "closed", walqjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.OpenQueue(ctx, "jobs", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	wctx, cancel := context.WithTimeout(ctx, 1200*time.Millisecond)
	defer cancel()
	worked := make(chan error, 1)
	go func() {
		worked <- walq.Work(wctx, q, 1, func(context.Context, walq.Message) error { return nil }, walq.WorkOptions{})
	}()
	s.Shutdown()
	for nc.Status() != nats.CLOSED {
		time.Sleep(10 * time.Millisecond)
	}
	s = startServer(t, store, port)
	defer s.Shutdown()
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, walq.ErrClosed) || !errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, walqjs.ErrUnavailable) {
			t.Fatalf("%s on a CLOSED connection = %v; want an error wrapping walq.ErrClosed and nats.ErrConnectionClosed, not ErrUnavailable", what, err)
		}
	}
	select {
	case err := <-worked:
		closed("Work", err)
	case <-wctx.Done():
		t.Fatalf("Work still runs on a connection CLOSED for good (%v)", <-worked)
	}
	gctx, gcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer gcancel()
	_, err = q.Get(gctx)
	closed("Get", err)
	_, _, err = q.TryGet()
	closed("TryGet", err)
	_, err = q.Put(ctx, []byte("x"))
	closed("Put", err)
}
