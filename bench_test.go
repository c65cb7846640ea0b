package walq

import (
	"context"
	"fmt"
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
