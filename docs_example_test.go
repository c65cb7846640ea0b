package walq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walq/walq"
)

// The examples in this file are the Go code of README.md and docs/: each
// block there is copied from the body of one of them.

// process is the README's handler: it does the work of one item, calling
// heartbeat when it runs long.
func process(_ context.Context, body []byte, heartbeat func() error) error {
	if len(body) == 0 {
		return errors.New("empty job")
	}
	return heartbeat()
}

// A producer puts an item; a consumer leases it, does the work with a
// heartbeat, and acks it (the README's example).
func Example_lease() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	q, err := walq.Open(dir, walq.Options{Visibility: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	// Producer: returns once the item is on disk (fsynced, shared with concurrent calls).
	id, err := q.Put(ctx, []byte(`{"resize":42}`), walq.WithKey("resize-42"))
	if err != nil {
		log.Fatal(err)
	}

	// Consumer: lease, work, heartbeat, ack.
	m, err := q.Get(ctx) // blocks until an item is ready
	if err != nil {
		log.Fatal(err)
	}
	err = process(ctx, m.Body, func() error { return q.Extend(m.Receipt, 30*time.Second) })
	if err != nil {
		q.Nack(m.Receipt, err) // back after the backoff, dead-lettered after MaxAttempts
	} else if err := q.Ack(m.Receipt); errors.Is(err, walq.ErrLeaseLost) {
		log.Printf("item %d: the lease ran out before the ack; it was delivered again", m.ID)
	}
	fmt.Println(id == m.ID, m.Attempt, q.Stats().Acked)
	// Output: true 1 1
}

// errBadImage is an error that retrying cannot fix.
var errBadImage = errors.New("not an image")

// A handler's error nacks the item; one made with Permanent dead-letters it
// at once.
func ExampleQueue_Work_permanent() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ctx, stop := context.WithCancel(context.Background())
	q.Put(ctx, []byte("photo.jpg"))
	q.Put(ctx, []byte("notes.txt"))
	var handled atomic.Int64
	resize := func(ctx context.Context, body []byte) error {
		defer func() {
			if handled.Add(1) == 2 {
				stop() // both handled: Work settles them and returns
			}
		}()
		if string(body) == "notes.txt" {
			return fmt.Errorf("%s: %w", body, errBadImage)
		}
		return nil
	}

	err := q.Work(ctx, 10, func(ctx context.Context, m walq.Message) error {
		if err := resize(ctx, m.Body); err != nil {
			if errors.Is(err, errBadImage) {
				return walq.Permanent(err) // straight to the dead letters
			}
			return err // nack: back after the backoff, dead-lettered after MaxAttempts
		}
		return nil // ack
	}, walq.WorkOptions{Timeout: 2 * time.Minute})
	fmt.Println("work:", err)
	for _, d := range q.DeadLetters(0) {
		fmt.Printf("dead after %d attempt: %s\n", d.Attempts, d.LastError)
	}
	fmt.Println("acked:", q.Stats().Acked)
	// Output:
	// work: <nil>
	// dead after 1 attempt: notes.txt: not an image
	// acked: 1
}

// Work on any Engine, with a logger and counters of its own.
func ExampleWork_counters() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ctx, stop := context.WithCancel(context.Background())
	for _, job := range []string{"a", "b", "c"} {
		q.Put(ctx, []byte(job))
	}
	engine := &countingEngine{Engine: q} // any walq.Engine
	logger := slog.New(slog.DiscardHandler)
	var handled atomic.Int64
	handler := func(ctx context.Context, m walq.Message) error {
		if handled.Add(1) == 3 {
			stop()
		}
		if string(m.Body) == "b" {
			return errors.New("b failed")
		}
		return nil
	}

	var counters walq.WorkCounters
	err := walq.Work(ctx, engine, 10, handler, walq.WorkOptions{
		Timeout:  2 * time.Minute,
		Logger:   logger,    // [discarded]
		Counters: &counters, // [none]
	})
	fmt.Println(err, engine.acks.Load(), counters.Stats().HandlerErrors)
	// Output: <nil> 2 1
}

// A directory with named queues, served by one pool of workers (the
// README's example).
func Example_namedQueues() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var done []string
	handler := func(_ context.Context, m walq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, m.Queue)
		if len(done) == 2 {
			cancel()
		}
		return nil
	}

	q, err := walq.Open(dir, walq.Options{}) // the directory, and its default queue
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close() // closes every queue of the directory
	mail, err := q.OpenQueue("mail", walq.QueueOptions{Visibility: time.Minute, MaxAttempts: 10})
	if err != nil {
		log.Fatal(err)
	}
	thumbs, err := q.OpenQueue("thumbnails", walq.QueueOptions{MaxInFlight: 4, MaxItems: 100_000})
	if err != nil {
		log.Fatal(err)
	}

	mail.Put(ctx, []byte("welcome alice@example.com"))
	thumbs.Put(ctx, []byte("photo 42"), walq.WithKey("photo-42")) // keys are per queue

	err = walq.WorkQueues(ctx, []walq.WorkQueue{
		{Queue: mail, Reserved: 2, Weight: 3}, // 2 workers for mail alone; 3 shares of the rest
		{Queue: thumbs, Weight: 1},
	}, 8, handler, walq.WorkOptions{}) // 8 shared workers, 10 in all
	fmt.Println(err, len(done), mail.Stats().Acked, thumbs.Stats().Acked)
	// Output: <nil> 2 1 1
}

// Opening a queue that exists never changes its settings; SetSettings
// does, for every handle, recorded.
func ExampleQueue_SetSettings() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	if _, err := q.OpenQueue("exports", walq.QueueOptions{MaxInFlight: 4}); err != nil {
		log.Fatal(err)
	}

	// Another component opens it only to put into it: the cap stays.
	exports, err := q.OpenQueue("exports", walq.QueueOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exports.Settings().MaxInFlight)
	_, err = q.OpenQueue("exports", walq.QueueOptions{MaxInFlight: 8})
	fmt.Println(errors.Is(err, walq.ErrInvalid))

	s := exports.Settings()
	s.MaxInFlight = 8
	err = exports.SetSettings(s)
	fmt.Println(err, exports.Settings().MaxInFlight)
	// Output:
	// 4
	// true
	// <nil> 8
}

// A Prometheus collector covers every queue of the directory.
func ExampleNewCollector() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()
	q.Put(context.Background(), []byte("photo 42"))

	reg := prometheus.NewRegistry()
	reg.MustRegister(walq.NewCollector(q, "thumbnails"))

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "walq_put_total" {
			m := f.GetMetric()[0]
			for _, l := range m.GetLabel() {
				fmt.Printf("%s=%q ", l.GetName(), l.GetValue())
			}
			fmt.Println(m.GetCounter().GetValue())
		}
	}
	// Output: dir="thumbnails" queue="(default)" 1
}
