package walq_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/walq/walq"
)

// Named queues share the directory's log and group commit; each has its
// own items, settings and dead letters.
func ExampleQueue_OpenQueue() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close() // closes the directory, with every queue in it

	mail, _ := q.OpenQueue("mail", walq.QueueOptions{Visibility: time.Minute, MaxAttempts: 10})
	thumbs, _ := q.OpenQueue("thumbnails", walq.QueueOptions{MaxInFlight: 2})

	ctx := context.Background()
	mail.Put(ctx, []byte("welcome alice@example.com"))
	thumbs.Put(ctx, []byte("photo 42"))

	m, _ := mail.Get(ctx)
	fmt.Printf("%s: %s\n", m.Queue, m.Body)
	mail.Ack(m.Receipt)

	infos, _ := q.Queues()
	for _, info := range infos[1:] { // the default queue comes first
		fmt.Printf("%s: %d stored\n", info.Name, info.Stats.Items)
	}
	// Output:
	// mail: welcome alice@example.com
	// mail: 0 stored
	// thumbnails: 1 stored
}

// One pool of workers serves several queues: each queue's reserved workers
// serve it alone, and the shared workers go to the queues by weight.
func ExampleWorkQueues() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()
	urgent, _ := q.OpenQueue("urgent", walq.QueueOptions{})
	bulk, _ := q.OpenQueue("bulk", walq.QueueOptions{})

	ctx, cancel := context.WithCancel(context.Background())
	for i := range 3 {
		urgent.Put(ctx, []byte(fmt.Sprint("page ", i)))
		bulk.Put(ctx, []byte(fmt.Sprint("report ", i)))
	}
	var mu sync.Mutex
	var done []string
	handler := func(_ context.Context, m walq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, m.Queue+": "+string(m.Body))
		if len(done) == 6 {
			cancel()
		}
		return nil
	}
	err := walq.WorkQueues(ctx, []walq.WorkQueue{
		{Queue: urgent, Reserved: 1, Weight: 3},
		{Queue: bulk, Weight: 1},
	}, 2, handler, walq.WorkOptions{})
	fmt.Println("work:", err)
	sort.Strings(done)
	for _, d := range done {
		fmt.Println(d)
	}
	// Output:
	// work: <nil>
	// bulk: report 0
	// bulk: report 1
	// bulk: report 2
	// urgent: page 0
	// urgent: page 1
	// urgent: page 2
}
