package walq

import (
	"context"
	"runtime"
	"testing"
)

func openCacheQueue(t *testing.T, opts Options) *Queue {
	t.Helper()
	q, err := Open(t.TempDir(), opts)
	must(t, err)
	t.Cleanup(func() { q.Close() })
	return q
}

// TestCachedBodyOwnsItsBytes: a body cached from a PutBatch holds its own
// bytes, not the batch's buffer. Sixteen batches of 100 bodies of 10 KiB,
// each leaving one straggler in the cache (its last item, of a later
// priority) while the rest are delivered: the stragglers held the sixteen
// 1 MiB buffers (16 MiB under a 4 MiB bound); now they hold 160 KiB.
func TestCachedBodyOwnsItsBytes(t *testing.T) {
	q := openCacheQueue(t, Options{BodyCacheBytes: 4 << 20, Sync: SyncNever})
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const batches, size = 16, 100
	for range batches {
		items := make([]Item, size)
		for i := range items {
			items[i].Body = make([]byte, 10<<10)
		}
		items[size-1].Priority = 1 // the straggler, delivered last
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
		for range size - 1 {
			m, ok, err := q.TryGet()
			if err != nil || !ok {
				t.Fatalf("TryGet: %v %v", ok, err)
			}
			if err := q.Ack(m.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	q.mu.Lock()
	cached := len(q.bodies.cache)
	q.mu.Unlock()
	grown := int64(heap()) - int64(before)
	t.Logf("%d bodies cached; the heap grew by %d KiB", cached, grown>>10)
	if cached != batches {
		t.Fatalf("%d bodies cached, want the %d stragglers", cached, batches)
	}
	if grown > 8<<20 {
		t.Errorf("%d stragglers of 10 KiB grew the heap by %d KiB: each keeps its batch's buffer", batches, grown>>10)
	}
}

// TestBodyDeliveredBeforePlacedNotCached: a body delivered before its
// frame was written (taken from the bodies not yet placed) is not put in
// the cache once the frame is placed: the cache keeps a body for its
// delivery, and this one had it.
func TestBodyDeliveredBeforePlacedNotCached(t *testing.T) {
	q := openCacheQueue(t, Options{})
	release := q.log.Hold() // the committer writes nothing until release
	put := make(chan error, 1)
	go func() {
		_, err := q.Put(context.Background(), []byte("delivered before placed"))
		put <- err
	}()
	for q.Stats().Ready == 0 { // the put is appended (and applied) before its write
		runtime.Gosched()
	}
	got := make(chan Message, 1)
	go func() {
		m, ok, err := q.TryGet()
		if err != nil || !ok {
			t.Errorf("TryGet: %v %v", ok, err)
		}
		got <- m
	}()
	for q.Stats().Leased == 0 {
		runtime.Gosched()
	}
	release()
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	m := <-got
	if string(m.Body) != "delivered before placed" {
		t.Fatalf("body %q", m.Body)
	}
	q.mu.Lock()
	q.bodies.drainLocked(q.st)
	_, cached := q.bodies.cache[m.ID]
	q.mu.Unlock()
	if cached {
		t.Errorf("item %d's body, delivered before its frame was placed, was cached after", m.ID)
	}
}
