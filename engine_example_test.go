package walq_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/walq/walq"
)

// countingEngine is an Engine of its own making: it passes every call on
// to a walq Queue and counts the acks that succeeded. Work runs on any
// type with Engine's methods; see package walqtest for the behaviours such
// a type must show.
type countingEngine struct {
	walq.Engine
	acks atomic.Int64
}

func (e *countingEngine) Ack(r walq.Receipt) error {
	err := e.Engine.Ack(r)
	if err == nil {
		e.acks.Add(1)
	}
	return err
}

// Work runs handlers on an Engine: here a wrapper of a Queue.
func ExampleWork() {
	dir, _ := os.MkdirTemp("", "walq-example")
	defer os.RemoveAll(dir)
	q, _ := walq.Open(dir, walq.Options{})
	defer q.Close()

	ctx, stop := context.WithCancel(context.Background())
	for _, job := range []string{"a", "b", "c"} {
		q.Put(ctx, []byte(job))
	}
	e := &countingEngine{Engine: q}
	var handled atomic.Int64
	err := walq.Work(ctx, e, 2, func(ctx context.Context, m walq.Message) error {
		if handled.Add(1) == 3 {
			stop() // all three handled: stop taking items
		}
		return nil // ack
	}, walq.WorkOptions{Timeout: time.Minute})
	fmt.Println(err, e.acks.Load())
	// Output: <nil> 3
}
