package walq

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var benchPolicies = []struct {
	name string
	sync SyncPolicy
}{
	{"always", SyncAlways},
	{"interval10ms", SyncInterval(10 * time.Millisecond)},
	{"never", SyncNever},
}

func benchQueue(b *testing.B, policy SyncPolicy) *Queue {
	b.Helper()
	q, err := Open(b.TempDir(), Options{Sync: policy, Visibility: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

// parallel runs op b.N times in total across g goroutines.
func parallel(b *testing.B, g int, op func() error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPut measures durable puts of 128-byte bodies.
func BenchmarkPut(b *testing.B) {
	body := make([]byte, 128)
	for _, p := range benchPolicies {
		for _, g := range []int{1, 32} {
			b.Run(fmt.Sprintf("sync=%s/goroutines=%d", p.name, g), func(b *testing.B) {
				q := benchQueue(b, p.sync)
				ctx := context.Background()
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				parallel(b, g, func() error { _, err := q.Put(ctx, body); return err })
			})
		}
	}
}

// BenchmarkGetAck measures a lease and its ack on a queue filled beforehand.
func BenchmarkGetAck(b *testing.B) {
	body := make([]byte, 128)
	for _, p := range benchPolicies {
		for _, g := range []int{1, 32} {
			b.Run(fmt.Sprintf("sync=%s/goroutines=%d", p.name, g), func(b *testing.B) {
				q := benchQueue(b, p.sync)
				ctx := context.Background()
				items := make([]Item, 0, 1000)
				for n := 0; n < b.N; n += len(items) {
					items = items[:0]
					for i := 0; i < min(1000, b.N-n); i++ {
						items = append(items, Item{Body: body})
					}
					if _, err := q.PutBatch(ctx, items); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				parallel(b, g, func() error {
					m, ok, err := q.TryGet()
					if err != nil || !ok {
						return fmt.Errorf("get: ok %v, err %v", ok, err)
					}
					return q.Ack(m.Receipt)
				})
			})
		}
	}
}

// BenchmarkCycle measures whole items: put, get and ack, each by the same
// goroutine (so 3 durable records per item).
func BenchmarkCycle(b *testing.B) {
	body := make([]byte, 128)
	for _, p := range benchPolicies {
		for _, g := range []int{1, 32} {
			b.Run(fmt.Sprintf("sync=%s/goroutines=%d", p.name, g), func(b *testing.B) {
				q := benchQueue(b, p.sync)
				ctx := context.Background()
				b.ResetTimer()
				parallel(b, g, func() error {
					if _, err := q.Put(ctx, body); err != nil {
						return err
					}
					m, err := q.Get(ctx)
					if err != nil {
						return err
					}
					return q.Ack(m.Receipt)
				})
			})
		}
	}
}

// BenchmarkPutBesideLargeBatch measures a small durable put to one queue
// while another queue of the directory puts a batch of the given size
// back to back: the records share the log, so a small put waits for the
// large write (and its fsync) in progress. It reports the small put's
// median, 99th percentile and worst latency.
func BenchmarkPutBesideLargeBatch(b *testing.B) {
	body := make([]byte, 128)
	for _, size := range []int{0, 1 << 20, 8 << 20, 60 << 20} {
		b.Run(fmt.Sprintf("batch=%dMiB", size>>20), func(b *testing.B) {
			q := benchQueue(b, SyncAlways)
			q.opts.CompactMinBytes = 1 << 40 // keep compaction out of the figures
			small, err := q.OpenQueue("small", QueueOptions{})
			if err != nil {
				b.Fatal(err)
			}
			large, err := q.OpenQueue("large", QueueOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			if size > 0 {
				items := make([]Item, size/(64<<10))
				for i := range items {
					items[i].Body = make([]byte, 64<<10)
				}
				wg.Go(func() {
					for ctx.Err() == nil {
						if _, err := large.PutBatch(ctx, items); err != nil && ctx.Err() == nil {
							b.Error(err)
							return
						}
						// Drain what was put, so the log's size stays bounded.
						for {
							m, ok, err := large.TryGet()
							if err != nil || !ok {
								break
							}
							large.Ack(m.Receipt)
						}
					}
				})
			}
			timedPuts(b, small, body)
			cancel()
			wg.Wait()
		})
	}
}

// BenchmarkPutDuringCompaction measures a small durable put to one queue
// while compactions run back to back beside a cold, paused queue that
// holds the given backlog: each compaction writes the backlog into a new
// snapshot, and the small put's fsync shares the disk with that write.
func BenchmarkPutDuringCompaction(b *testing.B) {
	body := make([]byte, 128)
	for _, size := range []int{0, 256 << 20} {
		b.Run(fmt.Sprintf("backlog=%dMiB", size>>20), func(b *testing.B) {
			q := benchQueue(b, SyncAlways)
			q.opts.DisableAutoCompact = true
			hot, err := q.OpenQueue("hot", QueueOptions{})
			if err != nil {
				b.Fatal(err)
			}
			cold, err := q.OpenQueue("cold", QueueOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := cold.Pause(time.Time{}); err != nil {
				b.Fatal(err)
			}
			items := make([]Item, 256)
			for i := range items {
				items[i].Body = make([]byte, 64<<10)
			}
			for put := 0; put < size; put += 16 << 20 {
				if _, err := cold.PutBatch(context.Background(), items); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var compactions atomic.Int64
			if size > 0 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if err := q.Compact(); err != nil {
							b.Error(err)
							return
						}
						compactions.Add(1)
					}
				})
			}
			timedPuts(b, hot, body)
			cancel()
			wg.Wait()
			b.ReportMetric(float64(compactions.Load()), "compactions")
		})
	}
}

// timedPuts puts body b.N times into q, one at a time, and reports the
// median, 99th percentile and worst latency of a put.
func timedPuts(b *testing.B, q *Queue, body []byte) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := q.Put(context.Background(), body); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}

// BenchmarkPutBatchIntoBacklog measures a PutBatch of 1,000 items into a
// queue that already holds a ready backlog of 200,000: its cost must not
// grow with the backlog (it did when each batch ordered the whole ready
// heap again).
func BenchmarkPutBatchIntoBacklog(b *testing.B) {
	q := benchQueue(b, SyncNever)
	ctx := context.Background()
	items := make([]Item, 1000)
	for i := range items {
		items[i] = Item{Body: make([]byte, 32)}
	}
	for range 200 {
		if _, err := q.PutBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if _, err := q.PutBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(items)), "ns/item")
}
