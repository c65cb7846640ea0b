package walq_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/walq/walq"
)

// BenchmarkItemMemory measures the memory a stored item costs beyond its
// body: 200,000 waiting items put in batches, with no key or deadline,
// with a 14-byte key, with a deadline, and with both. Memory is the Go
// heap in use after a GC plus the index mapped outside it
// (Stats.IndexMappedBytes), less the bodies held in memory (none here: no
// body cache), against the same before the queue was opened. Run it with
//
//	go test -run '^$' -bench ItemMemory -benchtime 1x .
func BenchmarkItemMemory(b *testing.B) {
	for _, kind := range []string{"plain", "key", "deadline", "key+deadline"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				b.ReportMetric(itemMemory(b, kind, 200_000), "B/item")
			}
		})
	}
}

func itemMemory(b *testing.B, kind string, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	q, err := walq.Open(b.TempDir(), walq.Options{Sync: walq.SyncNever, DisableAutoCompact: true, BodyCacheBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	deadline := time.Now().Add(time.Hour)
	items := make([]walq.Item, 1000)
	for i := 0; i < n; i += len(items) {
		for j := range items {
			items[j] = walq.Item{Body: []byte("0123456789abcdef0123456789abcdef")}
			if kind == "key" || kind == "key+deadline" {
				items[j].Key = fmt.Sprintf("order-%08d", i+j)
			}
			if kind == "deadline" || kind == "key+deadline" {
				items[j].Deadline = deadline
			}
		}
		if _, err := q.PutBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	q.Stats() // places the bodies of the last frames written
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := q.Stats()
	if st.Items != n {
		b.Fatalf("%d items stored, want %d", st.Items, n)
	}
	inMemory := st.Bodies.CacheBytes + st.Bodies.UnplacedBytes
	per := (float64(after.HeapInuse) - float64(before.HeapInuse) + float64(st.IndexMappedBytes) - float64(inMemory)) / float64(n)
	runtime.KeepAlive(q)
	return per
}
