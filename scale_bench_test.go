package walq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks in this file measure what the number of queues in a
// directory costs the operations of one of them. They run with SyncNever,
// so what they measure is the work under the lock, not the disk.

// idleQueues opens a queue in a fresh directory with n idle named queues
// beside the default queue.
func idleQueues(b *testing.B, n int) *Queue {
	b.Helper()
	q, err := Open(b.TempDir(), Options{Sync: SyncNever, Visibility: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	createQueues(b, q, n)
	return q
}

// BenchmarkPutBesideIdleQueues measures a put to the default queue with
// idle named queues beside it: its cost must not grow with them.
func BenchmarkPutBesideIdleQueues(b *testing.B) {
	body := make([]byte, 128)
	for _, n := range []int{0, 20000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			q := idleQueues(b, n)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if _, err := q.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueues measures listing every queue of a directory.
func BenchmarkQueues(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			q := idleQueues(b, n)
			b.ResetTimer()
			for range b.N {
				if _, err := q.Queues(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWorkQueuesManyQueues measures items handled per second by one
// pool of 8 workers: Work on one queue holding b.N items, against
// WorkQueues over 1,000 queues holding as many in all. Each handler
// returns at once, so what is measured is the dispatch and the disk.
func BenchmarkWorkQueuesManyQueues(b *testing.B) {
	for _, p := range []struct {
		name string
		sync SyncPolicy
	}{{"always", SyncAlways}, {"never", SyncNever}} {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("sync=%s/queues=%d", p.name, n), func(b *testing.B) {
				q, err := Open(b.TempDir(), Options{Sync: p.sync, Visibility: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				defer q.Close()
				hs := []*Queue{q}
				if n > 1 {
					createQueues(b, q, n)
					hs = hs[:0]
					for i := range n {
						h, err := q.OpenQueue(fmt.Sprintf("tenant-%05d", i), QueueOptions{})
						if err != nil {
							b.Fatal(err)
						}
						hs = append(hs, h)
					}
				}
				body := make([]byte, 128)
				per := make([][]Item, len(hs))
				for i := range b.N {
					per[i%len(hs)] = append(per[i%len(hs)], Item{Body: body})
				}
				for i, items := range per {
					for len(items) > 0 {
						k := min(len(items), 1000)
						if _, err := hs[i].PutBatch(context.Background(), items[:k]); err != nil {
							b.Fatal(err)
						}
						items = items[k:]
					}
				}
				var done atomic.Int64
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				h := func(context.Context, Message) error {
					if done.Add(1) == int64(b.N) {
						cancel()
					}
					return nil
				}
				fsyncs := q.Stats().Fsync.Count
				b.ResetTimer()
				if n == 1 {
					err = q.Work(ctx, 8, h, WorkOptions{})
				} else {
					wqs := make([]WorkQueue, len(hs))
					for i, hq := range hs {
						wqs[i] = WorkQueue{Queue: hq}
					}
					err = WorkQueues(ctx, wqs, 8, h, WorkOptions{})
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
				// An ack and the next lease share an fsync when this is near 1
				// divided by the items an fsync's batch serves.
				b.ReportMetric(float64(q.Stats().Fsync.Count-fsyncs)/float64(b.N), "fsyncs/item")
			})
		}
	}
}
