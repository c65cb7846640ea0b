package walq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/walq/walq"
)

// A producer puts an item; a consumer leases it, does the work and acks.
func Example() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)

	q, err := walq.Open(dir, walq.Options{Visibility: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	ctx := context.Background()
	if _, err := q.Put(ctx, []byte("resize image 42")); err != nil {
		log.Fatal(err)
	}
	m, err := q.Get(ctx) // blocks until an item is ready
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("attempt %d: %s\n", m.Attempt, m.Body)
	if err := q.Ack(m.Receipt); err != nil {
		log.Fatal(err) // ErrLeaseLost: the lease ran out and the item went to someone else
	}
	// Output: attempt 1: resize image 42
}

// Keys make puts idempotent: a retried request does not queue the work twice.
func ExampleWithKey() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ctx := context.Background()
	first, _ := q.Put(ctx, []byte("charge order 7"), walq.WithKey("order-7"))
	again, err := q.Put(ctx, []byte("charge order 7"), walq.WithKey("order-7"))
	fmt.Println(errors.Is(err, walq.ErrDuplicate), again == first)
	// Output: true true
}

// Failed work comes back after the backoff and ends in the dead-letter list
// when it is out of attempts; Redrive sends it back once the cause is fixed.
func ExampleQueue_Nack() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{
		MaxAttempts: 2,
		Backoff:     func(int) time.Duration { return 0 },
	})
	defer q.Close()

	ctx := context.Background()
	id, _ := q.Put(ctx, []byte("call flaky service"))
	for i := 0; i < 2; i++ {
		m, _ := q.Get(ctx)
		q.Nack(m.Receipt, fmt.Errorf("attempt %d: service unavailable", m.Attempt))
	}
	for _, d := range q.DeadLetters(10) {
		fmt.Printf("item %d dead after %d attempts: %s\n", d.ID, d.Attempts, d.LastError)
	}
	q.Redrive(id)
	m, _ := q.Get(ctx)
	fmt.Printf("redriven: attempt %d, delivery %d\n", m.Attempt, m.Deliveries)
	// Output:
	// item 1 dead after 2 attempts: attempt 2: service unavailable
	// redriven: attempt 1, delivery 3
}

// DeadLetterPage reads a dead-letter list of any length a page at a time.
func ExampleQueue_DeadLetterPage() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{MaxAttempts: 1})
	defer q.Close()

	ctx := context.Background()
	for i := range 5 {
		q.Put(ctx, fmt.Appendf(nil, "job %d", i))
		m, _ := q.Get(ctx)
		q.Nack(m.Receipt, errors.New("failed"))
	}
	var cur walq.DeadLetterCursor
	for {
		page, next := q.DeadLetterPage(cur, 2)
		if len(page) == 0 {
			break
		}
		for _, d := range page {
			fmt.Printf("%s ", d.Body)
		}
		fmt.Println("| end of page")
		cur = next
	}
	// Output:
	// job 0 job 1 | end of page
	// job 2 job 3 | end of page
	// job 4 | end of page
}

// Work runs handlers with the heartbeat, timeout, ack/nack and panic safety
// built in; it returns once ctx ends and the running handlers are done.
func ExampleQueue_Work() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ctx, stop := context.WithCancel(context.Background())
	for _, job := range []string{"a", "b", "c"} {
		q.Put(ctx, []byte(job))
	}
	done := make(chan string, 3)
	err := q.Work(ctx, 2, func(ctx context.Context, m walq.Message) error {
		done <- string(m.Body)
		if len(done) == 3 {
			stop() // all three handled: stop taking items
		}
		return nil // ack
	}, walq.WorkOptions{Timeout: time.Minute})
	fmt.Println(err, len(done), q.Stats().Acked)
	// Output: <nil> 3 3
}

// PutBatch stores several items in one record: after a crash all of them
// are there or none.
func ExampleQueue_PutBatch() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ids, err := q.PutBatch(context.Background(), []walq.Item{
		{Body: []byte("first")},
		{Body: []byte("later"), Delay: time.Hour},
		{Body: []byte("urgent"), Priority: -1},
	})
	fmt.Println(ids, err)
	st := q.Stats()
	fmt.Println(st.Items, st.Delayed+st.Ready)
	// Output:
	// [1 2 3] <nil>
	// 3 3
}

// A ManualClock lets time pass with Advance and steps the wall clock alone
// with StepWall. The queue runs on its own time, so a wall clock stepped
// back an hour neither stretches a delay nor ends a lease early.
func ExampleManualClock() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)

	clock := walq.NewManualClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	q, err := walq.Open(dir, walq.Options{Clock: clock, Visibility: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	ctx := context.Background()
	if _, err := q.Put(ctx, []byte("in ten seconds"), walq.WithDelay(10*time.Second)); err != nil {
		log.Fatal(err)
	}
	clock.StepWall(-time.Hour) // an administrator sets the clock back
	clock.Advance(10 * time.Second)
	m, ok, err := q.TryGet()
	if err != nil || !ok {
		log.Fatal("not ready after its delay: ", err)
	}
	fmt.Printf("%s: leased until %s by the wall clock\n", m.Body, m.LeaseEnd.Format("15:04:05"))
	// Output: in ten seconds: leased until 08:01:10 by the wall clock
}

// A receipt's text form lets one process lease an item and another end the
// lease: here the text would travel in a message or a database row. The
// receipt carries its directory's identity, so a queue refuses a receipt of
// another directory with ErrInvalid.
func ExampleParseReceipt() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ctx := context.Background()
	q.Put(ctx, []byte("send invoice 12"))
	m, _ := q.Get(ctx)
	text, _ := m.Receipt.MarshalText() // <directory>-<queue>-<lease>, in hex

	// Later, perhaps in another process:
	r, err := walq.ParseReceipt(string(text))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Ack(r))
	_, err = walq.ParseReceipt("42") // a bare LSN is not a receipt
	fmt.Println(errors.Is(err, walq.ErrInvalid))
	// Output:
	// <nil>
	// true
}
