package jetstream_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestTryGetSeesOwnPut: the server answers a put before it tells the
// consumer of the message, so a no_wait pull right after it may be told
// "no messages". TryGet right after the same handle's Put finds the item,
// every time, and a more urgent level put after a less urgent one is
// leased first.
func TestTryGetSeesOwnPut(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Priorities: []int{0, 1}})
	missed, inverted := 0, 0
	for i := range 150 {
		put(t, q, "low", walq.WithPriority(1))
		put(t, q, "high", walq.WithPriority(0))
		for want := range 2 {
			m, ok, err := q.TryGet()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				missed++
				// Take it anyway, so the next round starts empty.
				m = get(t, q, 2*time.Second)
			}
			if (want == 0) != (m.Priority == 0) {
				inverted++
			}
			if err := q.Ack(m.Receipt); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
	if missed != 0 || inverted != 0 {
		t.Fatalf("of %d TryGets right after the handle's own puts, %d found nothing and %d leased the less urgent item first", 300, missed, inverted)
	}
}

// TestWaitingGetHeapBounded: a Get waiting on an empty queue holds a
// pull request of its own; the heap it holds stays small (before, each
// held a synchronous subscription's channel of 65,536 slots, 512 KiB).
func TestWaitingGetHeapBounded(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 30 * time.Second})
	const n = 100
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { q.Get(ctx) })
	}
	// The server holds each Get's request: wait for all of them there.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ci, err := q.js.Consumer(context.Background(), "WALQ_diff", consumerName(t, q))
		if err != nil {
			t.Fatal(err)
		}
		info, err := ci.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Gets waiting at the server", info.NumWaiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	per := (int64(heap()) - int64(before)) / n
	cancel()
	wg.Wait()
	if per > 32<<10 {
		t.Fatalf("%d B of heap per waiting Get; want at most 32 KiB", per)
	}
	t.Logf("%d B of heap per waiting Get", per)
}

// consumerName is the name of the consumer of q's first level.
func consumerName(t *testing.T, q *closingQueue) string {
	t.Helper()
	s, err := q.js.Stream(context.Background(), "WALQ_diff")
	if err != nil {
		t.Fatal(err)
	}
	l := s.ListConsumers(context.Background())
	for ci := range l.Info() {
		if ci.Config.FilterSubject == "walq.diff.q.jobs.p0" {
			return ci.Name
		}
	}
	t.Fatal("no consumer of walq.diff.q.jobs.p0")
	return ""
}
