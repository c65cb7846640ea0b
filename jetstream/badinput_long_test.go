//go:build long

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

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
	// TryGet finds nothing, as Get waits: a WorkQueues pool goes on
	// (TestWorkQueuesAcrossServerRestart).
	if m, ok, err := q.TryGet(); err != nil || ok {
		t.Errorf("TryGet while the server is away: %d %v %v, want nothing", m.ID, ok, err)
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
