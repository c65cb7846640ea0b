package walq

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
)

// poolQueues opens n named queues q0..q(n-1) on a directory synced
// never (the tests count deliveries, not durability).
func poolQueues(t *testing.T, n int, o QueueOptions) (*Queue, *ManualClock, []*Queue) {
	t.Helper()
	q, clock, _ := testQueue(t, Options{Sync: SyncNever})
	var qs []*Queue
	for i := range n {
		qs = append(qs, mustOpenQueue(t, q, fmt.Sprintf("q%d", i), o))
	}
	return q, clock, qs
}

func fill(t *testing.T, q *Queue, n int) {
	t.Helper()
	items := make([]Item, n)
	for i := range items {
		items[i].Body = []byte("x")
	}
	if _, err := q.PutBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
}

// runPool runs WorkQueues in the background; stop cancels it and returns
// its error.
func runPool(t *testing.T, wqs []WorkQueue, shared int, h func(context.Context, Message) error, o WorkOptions) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- WorkQueues(ctx, wqs, shared, h, o) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				err = errors.New("WorkQueues did not return within a minute of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestWorkQueuesWeights: with every queue always holding ready items, the
// shared workers go to each queue in proportion to its weight, within 5%
// of its share over 2,000 deliveries (10,000 in a build with the tag long).
func TestWorkQueuesWeights(t *testing.T) {
	total := int64(2000)
	if testrule.Long {
		total = 10000
	}
	_, _, qs := poolQueues(t, 3, QueueOptions{})
	weights := []int{6, 3, 1}
	for _, q := range qs {
		fill(t, q, int(total))
	}
	var count [3]atomic.Int64
	var all atomic.Int64
	reached := make(chan struct{})
	idx := map[string]int{"q0": 0, "q1": 1, "q2": 2}
	h := func(_ context.Context, m Message) error {
		n := all.Add(1)
		if n <= total {
			count[idx[m.Queue]].Add(1)
		}
		if n == total {
			close(reached)
		}
		return nil
	}
	var wqs []WorkQueue
	for i, q := range qs {
		wqs = append(wqs, WorkQueue{Queue: q, Weight: weights[i]})
	}
	stop := runPool(t, wqs, 4, h, WorkOptions{})
	select {
	case <-reached:
	case <-time.After(5 * time.Minute):
		t.Fatalf("only %d deliveries", all.Load())
	}
	must(t, stop())
	for i, w := range weights {
		want := float64(total) * float64(w) / 10
		got := float64(count[i].Load())
		if got < want*0.95 || got > want*1.05 {
			t.Errorf("queue %d (weight %d) had %v of %d deliveries, want %v ±5%%", i, w, got, total, want)
		}
	}
	t.Logf("deliveries by queue: %d %d %d", count[0].Load(), count[1].Load(), count[2].Load())
}

// blockingHandler runs until released, and tells of each start.
type blockingHandler struct {
	mu       sync.Mutex
	started  map[string]int
	running  int
	release  map[uint64]chan struct{}
	starts   chan string
	sequence []string
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{started: map[string]int{}, release: map[uint64]chan struct{}{}, starts: make(chan string, 1<<16)}
}

func (b *blockingHandler) handle(ctx context.Context, m Message) error {
	ch := make(chan struct{})
	b.mu.Lock()
	b.started[m.Queue]++
	b.running++
	b.release[m.ID] = ch
	b.sequence = append(b.sequence, m.Queue)
	b.mu.Unlock()
	b.starts <- m.Queue
	select {
	case <-ch:
	case <-ctx.Done():
	}
	b.mu.Lock()
	b.running--
	b.mu.Unlock()
	return nil
}

// releaseOne lets one running handler (chosen by r) return; false if none.
func (b *blockingHandler) releaseOne(r *rand.Rand) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []uint64
	for id := range b.release {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return false
	}
	id := ids[r.IntN(len(ids))]
	close(b.release[id])
	delete(b.release, id)
	return true
}

// await waits, on handler starts, until cond holds; it fails the test if a
// start does not come within limit while cond is false.
func (b *blockingHandler) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for {
		b.mu.Lock()
		ok := cond()
		state := fmt.Sprintf("started %v, %d running, %d not released", b.started, b.running, len(b.release))
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-b.starts:
		case <-time.After(10 * time.Second):
			t.Fatalf("no handler started in 10s while %s (%s)", what, state)
		}
	}
}

// TestWorkQueuesNoIdleWorker: with queues that run dry and refill at
// random, no worker is idle while a queue it may serve has an item: a
// reserved worker while its queue has one, a shared worker while any has.
func TestWorkQueuesNoIdleWorker(t *testing.T) {
	_, _, qs := poolQueues(t, 3, QueueOptions{})
	const shared, reserved = 3, 1
	b := newBlockingHandler()
	stop := runPool(t, []WorkQueue{
		{Queue: qs[0], Reserved: reserved, Weight: 2},
		{Queue: qs[1], Weight: 1},
		{Queue: qs[2], Weight: 5},
	}, shared, b.handle, WorkOptions{DrainTimeout: -1})
	r := rand.New(rand.NewPCG(1, 2))
	put := map[string]int{}
	for step := range 400 {
		if r.IntN(5) < 3 || !b.releaseOne(r) { // puts outrun releases: backlogs build and drain
			i := r.IntN(3)
			n := 1 + r.IntN(3)
			fill(t, qs[i], n)
			put[qs[i].Name()] += n
		}
		// Wait for the pool to take what it must. Released handlers are
		// still counted as running until they return, so count waiting
		// items by starts: every started item left its queue.
		b.await(t, fmt.Sprintf("step %d: %v put", step, put), func() bool {
			waiting := map[string]int{}
			any := 0
			for name, n := range put {
				waiting[name] = n - b.started[name]
				any += waiting[name]
			}
			live := len(b.release) // started and not released
			switch {
			case waiting["q0"] > 0:
				return live >= shared+reserved
			case any > 0:
				return live >= shared
			}
			return true
		})
	}
	must(t, stop())
}

// TestWorkQueuesReservedWorker: with long handlers holding every shared
// worker, an item put in a queue with a reserved worker starts at once,
// with the clock standing still, and an item of the busy queue waits.
func TestWorkQueuesReservedWorker(t *testing.T) {
	_, _, qs := poolQueues(t, 2, QueueOptions{})
	long, urgent := qs[0], qs[1]
	b := newBlockingHandler()
	runPool(t, []WorkQueue{{Queue: long}, {Queue: urgent, Reserved: 1}}, 2, b.handle, WorkOptions{Timeout: -1, DrainTimeout: -1})
	fill(t, long, 3)
	b.await(t, "long items wait for the shared workers", func() bool { return b.started["q0"] == 2 })
	fill(t, urgent, 1)
	b.await(t, "an urgent item waits for its reserved worker", func() bool { return b.started["q1"] == 1 })
	b.mu.Lock()
	started := b.started["q0"]
	b.mu.Unlock()
	if started != 2 || long.Stats().Leased != 2 {
		t.Fatalf("a third long item started on the urgent queue's reserved worker")
	}
}

// TestWorkQueuesStrictOrder: a lower queue is never served while a higher
// one has an item and a worker is free.
func TestWorkQueuesStrictOrder(t *testing.T) {
	_, _, qs := poolQueues(t, 2, QueueOptions{})
	high, low := qs[0], qs[1]
	fill(t, high, 5)
	fill(t, low, 5)
	var mu sync.Mutex
	var seq []string
	done := make(chan struct{})
	refilled := false
	h := func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		seq = append(seq, m.Queue)
		if m.Queue == "q1" && !refilled {
			refilled = true
			fill(t, high, 2) // before this item is acked: the next must be q0's
		}
		if len(seq) == 12 {
			close(done)
		}
		return nil
	}
	runPool(t, []WorkQueue{{Queue: high}, {Queue: low}}, 1, h, WorkOptions{StrictOrder: true})
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("not every item was delivered")
	}
	mu.Lock()
	got := fmt.Sprint(seq)
	mu.Unlock()
	if want := "[q0 q0 q0 q0 q0 q1 q0 q0 q1 q1 q1 q1]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// TestWorkQueuesPausedAndDeleted: a paused queue delivers nothing while
// the others go on; a deleted queue is dropped; when every queue is gone
// WorkQueues returns ErrQueueDeleted.
func TestWorkQueuesPausedAndDeleted(t *testing.T) {
	_, _, qs := poolQueues(t, 2, QueueOptions{})
	paused, other := qs[0], qs[1]
	must(t, paused.Pause(time.Time{}))
	fill(t, paused, 3)
	var delivered sync.Map
	got := make(chan string, 100)
	h := func(_ context.Context, m Message) error {
		delivered.Store(m.ID, m.Queue)
		got <- m.Queue
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- WorkQueues(ctx, []WorkQueue{{Queue: paused}, {Queue: other}}, 2, h, WorkOptions{}) }()
	fill(t, other, 2)
	for range 2 {
		if q := <-got; q != "q1" {
			t.Fatalf("the paused queue delivered")
		}
	}
	settled(t, other)
	must(t, other.Delete(false))
	must(t, paused.Resume())
	for range 3 {
		if q := <-got; q != "q0" {
			t.Fatalf("got an item of %s after its delete", q)
		}
	}
	settled(t, paused)
	must(t, paused.Delete(false))
	select {
	case err := <-done:
		if !errors.Is(err, ErrQueueDeleted) {
			t.Fatalf("WorkQueues = %v, want ErrQueueDeleted", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("WorkQueues did not return when its queues were deleted")
	}
}

// settled returns once q has no lease open: the acks of the handlers that
// returned are in.
func settled(t *testing.T, q *Queue) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for q.Stats().Leased > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still has leases open after a minute", q.Name())
		}
		runtime.Gosched()
	}
}

func TestWorkQueuesArguments(t *testing.T) {
	d, _, qs := poolQueues(t, 1, QueueOptions{})
	// A second handle of the same queue (it would get a double share).
	again, err := d.OpenQueue(qs[0].Name(), QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, Message) error { return nil }
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"no queues":          func() error { return WorkQueues(ctx, nil, 1, h, WorkOptions{}) },
		"no worker for one":  func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0]}}, 0, h, WorkOptions{}) },
		"negative reserved":  func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0], Reserved: -1}}, 1, h, WorkOptions{}) },
		"negative weight":    func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0], Weight: -1}}, 1, h, WorkOptions{}) },
		"a queue twice":      func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0]}, {Queue: qs[0]}}, 1, h, WorkOptions{}) },
		"two handles of one": func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0]}, {Queue: again}}, 1, h, WorkOptions{}) },
		"nil handler":        func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0]}}, 1, nil, WorkOptions{}) },
		"nil queue":          func() error { return WorkQueues(ctx, []WorkQueue{{}}, 1, h, WorkOptions{}) },
		"negative shared":    func() error { return WorkQueues(ctx, []WorkQueue{{Queue: qs[0], Reserved: 1}}, -1, h, WorkOptions{}) },
		"heartbeat too large": func() error {
			return WorkQueues(ctx, []WorkQueue{{Queue: qs[0]}}, 1, h, WorkOptions{HeartbeatEvery: time.Hour})
		},
	} {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestWorkQueuesDeleteUnderHandler: a queue deleted, forced, while one of
// its handlers runs cancels that handler; the other queues go on.
func TestWorkQueuesDeleteUnderHandler(t *testing.T) {
	_, _, qs := poolQueues(t, 2, QueueOptions{})
	doomed, other := qs[0], qs[1]
	fill(t, doomed, 1)
	cancelled := make(chan error, 1)
	got := make(chan string, 10)
	h := func(ctx context.Context, m Message) error {
		if m.Queue == "q0" {
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			return ctx.Err()
		}
		got <- string(m.Body)
		return nil
	}
	stop := runPool(t, []WorkQueue{{Queue: doomed}, {Queue: other}}, 2, h, WorkOptions{Timeout: -1})
	settledLeases := func() {
		for doomed.Stats().Leased == 0 {
			runtime.Gosched()
		}
	}
	settledLeases()
	must(t, doomed.Delete(true))
	if err := <-cancelled; !errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("the handler's context ended with %v, want ErrQueueDeleted", err)
	}
	fill(t, other, 1)
	if b := <-got; b != "x" {
		t.Fatalf("other queue delivered %q", b)
	}
	must(t, stop())
}

// TestWorkQueuesRebase: passes near the end of uint64 are taken down
// together, keeping their order, so a pool that runs for years never
// overflows one.
func TestWorkQueuesRebase(t *testing.T) {
	p := &pool{}
	for i, pass := range []uint64{rebaseAt + 5, rebaseAt + 1, rebaseAt + 9, 3} {
		q := &poolQueue{idx: i, pass: pass, pos: -1, stride: 1}
		p.qs = append(p.qs, q)
		if i < 3 {
			heap.Push(&p.ready, q)
		}
	}
	p.vtime = rebaseAt + 1
	p.rebase()
	var got []uint64
	for _, q := range p.qs {
		got = append(got, q.pass)
	}
	if fmt.Sprint(got) != "[4 0 8 0]" || p.vtime != 0 || p.ready[0].idx != 1 {
		t.Fatalf("passes after the rebase %v, vtime %d, first %d; want [4 0 8 0], 0, 1", got, p.vtime, p.ready[0].idx)
	}
}
