package walq

import (
	"context"
	"fmt"
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
	for i := range n {
		if _, err := q.OpenQueue(fmt.Sprintf("tenant-%05d", i), QueueOptions{}); err != nil {
			b.Fatal(err)
		}
	}
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
