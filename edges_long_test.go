//go:build long

package walq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkUnderWallStepsRealTime runs Work on slow handlers (each longer
// than the visibility, so only the heartbeat keeps its lease) while the
// wall clock is stepped back and forth by up to a day: no item runs on two
// workers at once, no lease is lost, no ack is late. It runs on the system
// clock, so it takes the handlers' real time; TestWorkUnderWallSteps is the
// same check on the injected clock.
func TestWorkUnderWallStepsRealTime(t *testing.T) {
	clock := &steppingClock{}
	// A visibility of 2s and a beat every 100ms leave 1.9s of margin for a
	// loaded machine; each handler runs 2.5s, longer than the visibility.
	q, err := Open(t.TempDir(), Options{Clock: clock, Visibility: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const items = 8
	for i := range items {
		if _, err := q.Put(context.Background(), fmt.Appendf(nil, "item %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	running := map[uint64]bool{}
	var twice, done atomic.Int64
	allDone := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workErr := make(chan error, 1)
	go func() {
		workErr <- q.Work(ctx, 4, func(ctx context.Context, m Message) error {
			mu.Lock()
			if running[m.ID] {
				twice.Add(1)
			}
			running[m.ID] = true
			mu.Unlock()
			time.Sleep(2500 * time.Millisecond) // the work: longer than the visibility
			mu.Lock()
			delete(running, m.ID)
			mu.Unlock()
			if done.Add(1) == items {
				close(allDone)
			}
			return nil
		}, WorkOptions{HeartbeatEvery: 100 * time.Millisecond})
	}()
	rng := rand.New(rand.NewPCG(1, 2))
	stepper := time.NewTicker(20 * time.Millisecond)
	defer stepper.Stop()
	for waiting := true; waiting; {
		select {
		case <-allDone:
			waiting = false
		case <-stepper.C:
			clock.offset.Store(int64(time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour))
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d items done", done.Load(), items)
		}
	}
	waitFor(t, "the acks", func() bool { return q.Stats().Acked == items })
	cancel()
	if err := <-workErr; err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); twice.Load() != 0 || st.Expired != 0 || st.LateAcks != 0 || st.Delivered != items || st.Work.LeasesLost != 0 {
		t.Fatalf("ran twice: %d; stats %+v", twice.Load(), st)
	}
}
