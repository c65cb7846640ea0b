package jetstream_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// The cycle workload of walq-bench and of the core's BenchmarkCycle, on
// walq's own queue and on the adapter, side by side on this machine:
//
//	go test -run '^$' -bench . -benchtime 3s ./jetstream
//
// Both durable on every write: walq with SyncAlways, the JetStream server
// (embedded, in this process, file store in a temporary directory) with
// sync_interval: always, R1.

// engine is what the benchmarks drive.
type engine interface {
	walq.Engine
	Put(ctx context.Context, body []byte, opts ...walq.PutOption) (uint64, error)
	Close() error
}

func engines(b *testing.B, vis time.Duration) []struct {
	name string
	open func() engine
} {
	return []struct {
		name string
		open func() engine
	}{
		{"walq", func() engine {
			q, err := walq.Open(b.TempDir(), walq.Options{Sync: walq.SyncAlways, Visibility: vis})
			if err != nil {
				b.Fatal(err)
			}
			return q
		}},
		{"jetstream", func() engine {
			s := startServer(b, b.TempDir(), 0)
			b.Cleanup(s.Shutdown)
			q, err := openQueue(s.ClientURL(), "bench", "cycle", walqjs.Options{}, walqjs.QueueOptions{Visibility: vis})
			if err != nil {
				b.Fatal(err)
			}
			return q
		}},
	}
}

// BenchmarkCycle: each op is a put, a get and an ack of a 128-byte body,
// by 1 and by 32 goroutines at once. It reports the latency of a cycle
// (p50, p99) beside ns/op, which is the time per cycle of the whole.
func BenchmarkCycle(b *testing.B) {
	body := make([]byte, 128)
	for _, e := range engines(b, 30*time.Second) {
		for _, g := range []int{1, 32} {
			b.Run(fmt.Sprintf("engine=%s/goroutines=%d", e.name, g), func(b *testing.B) {
				q := e.open()
				defer q.Close()
				ctx := context.Background()
				var mu sync.Mutex
				var lat []time.Duration
				var next atomic.Int64
				var failed atomic.Value
				var wg sync.WaitGroup
				b.ResetTimer()
				for range g {
					wg.Go(func() {
						var mine []time.Duration
						defer func() {
							mu.Lock()
							lat = append(lat, mine...)
							mu.Unlock()
						}()
						for next.Add(1) <= int64(b.N) {
							start := time.Now()
							if _, err := q.Put(ctx, body); err != nil {
								failed.Store(err)
								return
							}
							m, err := q.Get(ctx)
							if err != nil {
								failed.Store(err)
								return
							}
							if err := q.Ack(m.Receipt); err != nil {
								failed.Store(err)
								return
							}
							mine = append(mine, time.Since(start))
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				reportLatency(b, lat)
			})
		}
	}
}

// BenchmarkWork: walq.Work with 10 workers on a backlog of b.N items, the
// handler doing nothing: what the engine costs a handler per item.
func BenchmarkWork(b *testing.B) {
	body := make([]byte, 128)
	for _, e := range engines(b, 30*time.Second) {
		b.Run("engine="+e.name, func(b *testing.B) {
			q := e.open()
			defer q.Close()
			ctx := context.Background()
			for range b.N {
				if _, err := q.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			var done atomic.Int64
			wctx, cancel := context.WithCancel(ctx)
			finished := make(chan error, 1)
			b.ResetTimer()
			go func() {
				finished <- walq.Work(wctx, q, 10, func(context.Context, walq.Message) error {
					if done.Add(1) == int64(b.N) {
						cancel()
					}
					return nil
				}, walq.WorkOptions{DrainTimeout: time.Minute})
			}()
			if err := <-finished; err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
