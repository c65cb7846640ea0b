package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// The tests of the fence: every delivery a caller is handed is written
// into the item's record with compare-and-swap, and every call on a lease
// acts only if the record is still that lease's.

// fenceQueues opens the queue "jobs" of the Dir "fence" twice, on two
// connections (two processes, as far as the server can tell).
func fenceQueues(t *testing.T, qo walqjs.QueueOptions) (a, b *closingQueue, url string) {
	t.Helper()
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	var err error
	if a, err = openQueue(s.ClientURL(), "fence", "jobs", walqjs.Options{}, qo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = openQueue(s.ClientURL(), "fence", "jobs", walqjs.Options{}, qo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b, s.ClientURL()
}

// tryGetWithin calls Get with a timeout and says what it got: ok false
// when the timeout ended it.
func tryGetWithin(t *testing.T, q *closingQueue, within time.Duration) (walq.Message, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := q.Get(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return walq.Message{}, false
	}
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return m, true
}

// waitGone waits until the stream holds no message on the queue's ready
// subject of priority 0 (an acked or terminated message is removed
// asynchronously, after the call returned).
func waitGone(t *testing.T, q *closingQueue, dir string) {
	t.Helper()
	st, err := q.js.Stream(context.Background(), "WALQ_"+dir)
	if err != nil {
		t.Fatal(err)
	}
	subj := "walq." + dir + ".q.jobs.p0"
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := st.Info(context.Background(), njs.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Subjects[subj] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages left on %s", info.State.Subjects[subj], subj)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForgottenDeliveryNotHandedOut: the server forgets a delivery while
// its lease holds (as an R1 server's crash loses the consumer state it had
// not flushed, or a consumer deleted and created again): it delivers the
// item again at once, as delivery 1. Before, that was handed out as
// attempt 1 while the holder's lease had most of its time left, and the
// holder's Ack then acted on the second delivery. Now the delivery finds
// the record held and goes back; the holder's Ack acts; the item is gone
// and ran once.
func TestForgottenDeliveryNotHandedOut(t *testing.T) {
	a, b, _ := fenceQueues(t, walqjs.QueueOptions{Visibility: 20 * time.Second, MaxAttempts: 2})
	ctx := context.Background()
	id := put(t, a, "x")
	m := get(t, a, 5*time.Second)
	if m.ID != id || m.Attempt != 1 {
		t.Fatalf("got %d attempt %d", m.ID, m.Attempt)
	}
	// The server forgets the delivery: its consumer goes and comes back.
	if err := a.js.DeleteConsumer(ctx, "WALQ_fence", walqjs.ConsumerName("jobs", 0)); err != nil {
		t.Fatal(err)
	}
	c, err := openQueue(b.nc.ConnectedUrl(), "fence", "jobs", walqjs.Options{}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, ok := tryGetWithin(t, c, 700*time.Millisecond); ok {
		t.Fatalf("the forgotten delivery was handed out again as attempt %d while its lease held", got.Attempt)
	}
	if err := a.Ack(m.Receipt); err != nil {
		t.Fatalf("the holder's Ack: %v", err)
	}
	waitGone(t, a, "fence")
}

// TestStaleNackActsOnNoLaterLease: a Nak that reaches the server late (a
// retry after a lost answer, a client paused between its check and its
// send) acts on the next delivery, which the server finds by stream
// sequence. Before, that made the server deliver the item again while the
// second worker's lease held, and a third worker ran it beside the
// second. Now the record decides: the third delivery finds it held and
// goes back, and the second worker's Ack acts.
func TestStaleNackActsOnNoLaterLease(t *testing.T) {
	a, b, _ := fenceQueues(t, walqjs.QueueOptions{Visibility: 20 * time.Second, MaxAttempts: 5, Backoff: zeroBackoff})
	put(t, a, "x")
	m1 := get(t, a, 5*time.Second)
	reply := a.Queue.ReplyOf(m1.Receipt)
	if err := a.Nack(m1.Receipt, errors.New("first")); err != nil {
		t.Fatal(err)
	}
	m2 := get(t, b, 5*time.Second)
	if m2.Attempt != 2 {
		t.Fatalf("second lease: attempt %d", m2.Attempt)
	}
	// The first Nak again, late: on the first delivery's reply subject.
	if _, err := a.nc.Request(reply, []byte("-NAK"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, ok := tryGetWithin(t, a, 700*time.Millisecond); ok {
		t.Fatalf("a stale Nak handed the item out again (attempt %d) while the second lease held", got.Attempt)
	}
	if err := b.Ack(m2.Receipt); err != nil {
		t.Fatalf("the second lease's Ack: %v", err)
	}
	waitGone(t, a, "fence")
}

// TestStaleAckOnALaterLeaseRefused: the first holder's lease ran out and
// the item went to another worker; the first holder's Ack is refused
// (walq.ErrLeaseLost) and the second lease goes on.
func TestStaleAckOnALaterLeaseRefused(t *testing.T) {
	a, b, _ := fenceQueues(t, walqjs.QueueOptions{Visibility: 600 * time.Millisecond, MaxAttempts: 5})
	put(t, a, "x")
	m1 := get(t, a, 5*time.Second)
	m2 := get(t, b, 5*time.Second) // after m1's lease ran out
	if m2.Attempt != 2 {
		t.Fatalf("second lease: attempt %d", m2.Attempt)
	}
	if err := a.Ack(m1.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("the first lease's Ack after the item went to another: %v", err)
	}
	if err := b.Ack(m2.Receipt); err != nil {
		t.Fatalf("the second lease's Ack: %v", err)
	}
	waitGone(t, a, "fence")
}

// TestDeadLetterCrashBeforeTermRunsNothing: the holder dead-letters an
// item before its last attempt and goes away between the dead letter's
// publish and the Term of its message. Before, the message came back
// after the visibility and ran again although it was a dead letter too,
// and a redrive ran finished work a third time. Now its record says dead:
// the next delivery terminates it without running it, the dead letter is
// there once, and a redrive runs the item once.
func TestDeadLetterCrashBeforeTermRunsNothing(t *testing.T) {
	a, b, _ := fenceQueues(t, walqjs.QueueOptions{Visibility: 600 * time.Millisecond, MaxAttempts: 5})
	id := put(t, a, "x")
	m := get(t, a, 5*time.Second)
	walqjs.SetDeadLetterStored(func() { a.nc.Close() }) // the holder's process dies here
	defer walqjs.SetDeadLetterStored(nil)
	a.DeadLetter(m.Receipt, errors.New("poison"))
	walqjs.SetDeadLetterStored(nil)
	if got, ok := tryGetWithin(t, b, 1200*time.Millisecond); ok {
		t.Fatalf("a dead-lettered item ran again (attempt %d)", got.Attempt)
	}
	waitGone(t, b, "fence")
	dl, err := b.DeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].ID != id || dl[0].LastError != "poison" {
		t.Fatalf("dead letters %+v; want the one", dl)
	}
}
