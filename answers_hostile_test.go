package walq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Hostile review: answers that append nothing and rest on a record a crash
// (here: a failed write) can take back, found outside the cases of
// TestNoAnswerBeforeDurable. Each case holds a record in the log's write,
// asks, then fails the write: the answer must wait, and be the failure.
func TestHostileNoAnswerBeforeDurable(t *testing.T) {
	ctx := context.Background()
	var exports *Queue
	var rcpt Receipt
	named := func(opts QueueOptions) func(t *testing.T, q *Queue) {
		return func(t *testing.T, q *Queue) {
			e, err := q.OpenQueue("exports", opts)
			if err != nil {
				t.Fatal(err)
			}
			exports = e
		}
	}
	runHeldCases(t, []heldCase{
		{"ErrFull resting on a put not durable",
			named(QueueOptions{MaxItems: 1}),
			func(q *Queue) error { _, err := exports.Put(ctx, []byte("a")); return err },
			func(q *Queue) error { _, err := exports.Put(ctx, []byte("b")); return err }},
		{"OpenQueue refusing settings of a creation not durable",
			nil,
			func(q *Queue) error { _, err := q.OpenQueue("exports", QueueOptions{MaxItems: 5}); return err },
			func(q *Queue) error { _, err := q.OpenQueue("exports", QueueOptions{MaxItems: 6}); return err }},
		{"OpenQueue refusing settings whose SetSettings is not durable",
			named(QueueOptions{MaxInFlight: 2}),
			func(q *Queue) error {
				s := exports.Settings()
				s.MaxInFlight = 8
				return exports.SetSettings(s)
			},
			func(q *Queue) error { _, err := q.OpenQueue("exports", QueueOptions{MaxInFlight: 2}); return err }},
		{"ErrQueueDeleted for a Put, resting on a delete not durable",
			named(QueueOptions{}),
			func(q *Queue) error { return exports.Delete(true) },
			func(q *Queue) error { _, err := exports.Put(ctx, []byte("x")); return err }},
		{"RedriveTo a target whose delete is not durable",
			func(t *testing.T, q *Queue) {
				named(QueueOptions{})(t, q)
				deadLetter(t, q) // item 1 dead in the default queue
			},
			func(q *Queue) error { return exports.Delete(true) },
			func(q *Queue) error { return q.RedriveTo(exports, 1) }},
		{"ErrLeaseLost resting on a DeleteItems not durable",
			func(t *testing.T, q *Queue) {
				if _, err := q.Put(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
				m, err := q.Get(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rcpt = m.Receipt
			},
			func(q *Queue) error { return q.DeleteItems(1) },
			func(q *Queue) error { return q.Ack(rcpt) }},
		{"ErrLeaseLost for a second Ack, resting on the first not durable",
			func(t *testing.T, q *Queue) {
				if _, err := q.Put(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
				m, err := q.Get(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rcpt = m.Receipt
			},
			func(q *Queue) error { return q.Ack(rcpt) },
			func(q *Queue) error { return q.Extend(rcpt, time.Minute) }},
		{"DeleteItems naming an item twice, the item's put not durable",
			nil,
			func(q *Queue) error { _, err := q.Put(ctx, []byte("x")); return err },
			func(q *Queue) error { return q.DeleteItems(1, 1) }}, // ErrNoItem (waited for) had the put not been there
		{"ErrQueueDeleted for a receipt of a queue whose delete is not durable",
			func(t *testing.T, q *Queue) {
				named(QueueOptions{})(t, q)
				if _, err := exports.Put(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
				m, err := exports.Get(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rcpt = m.Receipt
			},
			func(q *Queue) error { return exports.Delete(true) },
			func(q *Queue) error { return q.Ack(rcpt) }}, // on the default handle: not the old one
	})
}

// TestHostileBlockedGetToldDeletedBeforeDurable: a Get blocked on a named
// queue was told ErrQueueDeleted as soon as a Delete appended its record,
// before the record was durable; the write then failed, and the queue
// (with its items) was still there on reopen, while its consumer had been
// told it was gone. It now learns of the delete once it is durable.
func TestHostileBlockedGetToldDeletedBeforeDurable(t *testing.T) {
	ctx := context.Background()
	q, gate, ffs := gatedQueue(t, Options{Sync: SyncAlways})
	exports, err := q.OpenQueue("exports", QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := exports.Get(ctx); got <- err }()
	// Let the Get block.
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		n := exports.rt.waiters.len()
		q.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Get never blocked")
		}
		time.Sleep(time.Millisecond)
	}
	gate.arm()
	delRes := make(chan error, 1)
	go func() { delRes <- exports.Delete(false) }()
	<-gate.entered
	select {
	case err := <-got:
		t.Fatalf("blocked Get answered %v while the delete was not durable", err)
	case <-time.After(500 * time.Millisecond): // it comes at once when it comes early
	}
	ffs.FailNext("write")
	gate.open()
	if err := recv(t, "the delete", delRes); !errors.Is(err, ErrFailed) {
		t.Fatalf("delete: %v, want ErrFailed", err)
	}
	if err := recv(t, "the Get", got); !errors.Is(err, ErrFailed) {
		t.Fatalf("Get: %v, want ErrFailed", err)
	}
}
