// Package jetstream runs walq's handlers on NATS JetStream: a Queue is a
// walq.Engine (and a walq.Source) whose items are messages of a JetStream
// stream, so that walq.Work and walq.WorkQueues run the same handlers
// across several machines, on a replicated stream.
//
//	nc, _ := nats.Connect(url)
//	js, _ := jetstream.New(nc) // github.com/nats-io/nats.go/jetstream
//	dir, _ := walqjs.OpenDir(ctx, js, "myapp", walqjs.Options{Replicas: 3})
//	mail, _ := dir.OpenQueue(ctx, "mail", walqjs.QueueOptions{Visibility: time.Minute})
//	mail.Put(ctx, body)
//	err := walq.Work(ctx, mail, 10, handler, walq.WorkOptions{})
//
// A Dir is one work stream (subjects walq.<dir>.>), one dead-letter stream
// (walqdlq.<dir>.>) and one key-value bucket of attempt histories. A queue
// is a subject per priority level (walq.<dir>.q.<queue>.<level>), each with
// a durable pull consumer whose AckWait is the queue's Visibility.
//
// The adapter fences on the client: JetStream does not (an ack, InProgress
// or Nak sent with the reply subject of a delivery that has been
// redelivered acts on the current delivery). Each lease is timed from the
// moment its pull request was sent, one request of one message per Get, so
// no message waits in a client buffer while its AckWait runs; a call with
// the receipt of a lease that has ended returns walq.ErrLeaseLost and sends
// nothing. The README of this module lists every difference from walq's
// own queue, each with the test that shows it.
package jetstream
