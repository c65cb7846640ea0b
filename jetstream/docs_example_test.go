package jetstream_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// The examples in this file are the Go code of README.md: each block there
// is copied from the body of one of them. They need a server (and a
// directory) of their own, so they are compiled, not run.

// The handler and the calls on the queue are the same on both engines.
func handler(ctx context.Context, m walq.Message) error { return nil }

// walq: one machine, a directory.
func Example_walq() {
	ctx := context.Background()
	body := []byte(`{"resize":42}`)

	dir, err := walq.Open("/var/lib/myapp/queue", walq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dir.Close()
	mail, err := dir.OpenQueue("mail", walq.QueueOptions{Visibility: time.Minute, MaxAttempts: 10})
	if err != nil {
		log.Fatal(err)
	}

	id, err := mail.Put(ctx, body, walq.WithKey("resize-42"), walq.WithDelay(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	err = walq.Work(ctx, mail, 10, handler, walq.WorkOptions{Timeout: 2 * time.Minute})
	log.Println(id, err)
}

// JetStream: any number of machines, a NATS account.
func Example_jetStream() {
	ctx := context.Background()
	body := []byte(`{"resize":42}`)
	url := nats.DefaultURL

	nc, err := nats.Connect(url) // github.com/nats-io/nats.go
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc) // github.com/nats-io/nats.go/jetstream
	if err != nil {
		log.Fatal(err)
	}
	dir, err := walqjs.OpenDir(ctx, js, "myapp", walqjs.Options{Replicas: 3})
	if err != nil {
		log.Fatal(err)
	}
	mail, err := dir.OpenQueue(ctx, "mail", walqjs.QueueOptions{Visibility: time.Minute, MaxAttempts: 10})
	if err != nil {
		log.Fatal(err)
	}
	defer mail.Close()

	id, err := mail.Put(ctx, body, walq.WithKey("resize-42"), walq.WithDelay(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	err = walq.Work(ctx, mail, 10, handler, walq.WorkOptions{Timeout: 2 * time.Minute})
	log.Println(id, err)
}
