package walq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDeletedAnswerWaitsForTheDelete: a call on a handle of a named queue
// whose Delete is appended but not durable must not answer ErrQueueDeleted
// before the delete is durable (guarantees.md: "ErrQueueDeleted" is among
// the answers that first wait). Put and a blocked Get wait; these calls
// read rt.gone through callLocked and return at once. The write then fails
// and the queue, with its items, is still there on reopen, while the caller
// was told it was gone (a Work loop, say, stopped for good).
func TestDeletedAnswerWaitsForTheDelete(t *testing.T) {
	ctx := context.Background()
	var exports *Queue
	named := exportsWithItem(&exports)
	del := func(q *Queue) error { return exports.Delete(true) }
	runHeldCases(t, []heldCase{
		{"Get", named, del, func(q *Queue) error {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := exports.Get(c)
			return err
		}},
		{"TryGet", named, del, func(q *Queue) error { _, _, err := exports.TryGet(); return err }},
		{"Pause", named, del, func(q *Queue) error { return exports.Pause(time.Time{}) }},
		{"Resume", named, del, func(q *Queue) error { return exports.Resume() }},
		{"SetSettings", named, del, func(q *Queue) error { return exports.SetSettings(QueueOptions{MaxItems: 3}) }},
		{"Delete again", named, del, func(q *Queue) error { return exports.Delete(false) }},
		{"PurgeDeadLetters of all", named, del, func(q *Queue) error { return exports.PurgeDeadLetters() }},
		{"Work", named, del, func(q *Queue) error {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return exports.Work(c, 1, func(context.Context, Message) error { return nil }, WorkOptions{})
		}},
	})
}

// TestItemNotFoundWaitsForDurable: the browsing calls (Item, ItemBody)
// answer ErrNoItem or ErrQueueDeleted from the state without waiting for
// the record it rests on. Item says "no such item" for an item whose ack
// is not durable: the write fails, and the item is there on reopen.
func TestItemNotFoundWaitsForDurable(t *testing.T) {
	ctx := context.Background()
	var rcpt Receipt
	leased := func(t *testing.T, q *Queue) {
		if _, err := q.Put(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		m, err := q.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rcpt = m.Receipt
	}
	ack := func(q *Queue) error { return q.Ack(rcpt) }
	runHeldCases(t, []heldCase{
		{"Item of an item acked, not durable", leased, ack, func(q *Queue) error { _, err := q.Item(1); return err }},
		{"ItemBody of an item acked, not durable", leased, ack, func(q *Queue) error { _, err := q.ItemBody(1); return err }},
	})
}

// TestWorkAckDeletedWaitsForTheDelete: Work's fast path
// (ackAndLease) acks a handler's success with ackLocked; a queue whose
// forced Delete is appended but not durable makes that ack fail with
// ErrQueueDeleted, which ackAndLease returns as a failure of the queue at
// once, without the barrier. Work stops and returns ErrQueueDeleted; the
// delete's write then fails, and the queue and its item are still there
// on reopen. (Blocked Gets and Work's own watch learn of a Delete only once
// it is durable.)
func TestWorkAckDeletedWaitsForTheDelete(t *testing.T) {
	q, gate, ffs := gatedQueue(t, Options{Sync: SyncAlways})
	exports := mustOpenQueue(t, q, "exports", QueueOptions{})
	mustPut(t, exports, "x")
	started, release := make(chan struct{}), make(chan struct{})
	_, done := startWork(t, exports, 1, func(context.Context, Message) error {
		close(started)
		<-release
		return nil
	}, WorkOptions{Timeout: -1, DrainTimeout: -1})
	recv(t, "the handler to start", started)
	gate.arm()
	delRes := make(chan error, 1)
	go func() { delRes <- exports.Delete(true) }()
	<-gate.entered
	close(release)
	select {
	case err := <-done:
		ffs.FailNext("write")
		gate.open()
		t.Fatalf("Work returned %v while the delete was not durable", err)
	case <-time.After(500 * time.Millisecond): // it comes at once when it comes early
	}
	ffs.FailNext("write")
	gate.open()
	if err := recv(t, "the delete", delRes); !errors.Is(err, ErrFailed) {
		t.Fatalf("delete: %v, want ErrFailed", err)
	}
	if err := recv(t, "Work", done); !errors.Is(err, ErrFailed) {
		t.Fatalf("Work: %v, want ErrFailed", err)
	}
}
