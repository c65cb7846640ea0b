package jetstream_test

// One test per row of the README's table of differences from walq's own
// queue. Each name is TestDiff<Row>.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

func newQueue(t *testing.T, do walqjs.Options, qo walqjs.QueueOptions) *closingQueue {
	t.Helper()
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	q, err := openQueue(s.ClientURL(), "diff", "jobs", do, qo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func get(t *testing.T, q *closingQueue, within time.Duration) walq.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := q.Get(ctx)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return m
}

func noneWithin(t *testing.T, q *closingQueue, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := q.Get(ctx); err == nil {
		t.Fatalf("item %d (attempt %d) delivered, want none within %v", m.ID, m.Attempt, d)
	}
}

func put(t *testing.T, q *closingQueue, body string, opts ...walq.PutOption) uint64 {
	t.Helper()
	id, err := q.Put(context.Background(), []byte(body), opts...)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	return id
}

var zeroBackoff = func(int) time.Duration { return 0 }

// Row "clock": the queue runs on the system clock; no manual clock.
func TestDiffSystemClock(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	if _, ok := q.Clock().(*walq.ManualClock); ok {
		t.Fatal("a manual clock")
	}
	if d := time.Since(q.Clock().Now()); d < 0 || d > time.Second {
		t.Fatalf("Clock().Now() is %v from the system clock", d)
	}
	if caps.ManualClock {
		t.Fatal("the suite's capabilities declare a manual clock")
	}
}

// Row "fencing": the server does not fence. An ack sent with the reply
// subject of a delivery that has since been redelivered acks the current
// delivery; the adapter refuses the stale receipt and sends nothing.
func TestDiffServerDoesNotFence(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second, Backoff: zeroBackoff})
	id := put(t, q, "a")
	var first *nats.Msg
	m1 := get(t, q, 5*time.Second)
	time.Sleep(1200 * time.Millisecond) // past the AckWait
	m2 := get(t, q, 5*time.Second)
	if m2.ID != id || m2.Attempt != 2 {
		t.Fatalf("second delivery: item %d attempt %d", m2.ID, m2.Attempt)
	}
	// The adapter: the first receipt is stale.
	if err := q.Ack(m1.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("Ack with the first receipt: %v, want ErrLeaseLost", err)
	}
	// The server: an ack on the first delivery's reply subject, sent by
	// hand, acts on the second delivery (pending is keyed by the stream
	// sequence).
	first = replyOf(t, q, m1)
	if _, err := q.nc.Request(first.Reply, []byte("+ACK"), time.Second); err != nil {
		t.Fatal(err)
	}
	// The second lease runs out without an ack, and the item never comes
	// back: the stale ack removed it.
	time.Sleep(1500 * time.Millisecond)
	noneWithin(t, q, 500*time.Millisecond)
	if err := q.Ack(m2.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("Ack with the second, expired receipt: %v", err)
	}
}

// replyOf finds the reply subject a delivery had: the adapter does not
// expose it, so the test keeps a tap on the Dir's acks.
func replyOf(t *testing.T, q *closingQueue, m walq.Message) *nats.Msg {
	t.Helper()
	// The reply subject of delivery n of stream sequence s names them;
	// rebuild it from the consumer's info.
	info, err := q.js.Consumer(context.Background(), "WALQ_diff", consumerNameFor("jobs", 0))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := info.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>:
	// the server reads the stream sequence (and checks the consumer
	// sequence only against its range), so any delivered count, timestamp
	// and pending do.
	return &nats.Msg{Reply: fmt.Sprintf("$JS.ACK.WALQ_diff.%s.1.%d.%d.0.0", ci.Name, m.ID, ci.Delivered.Consumer-1)}
}

func consumerNameFor(queue string, prio int) string {
	// As the adapter names it; the test looks it up by listing instead of
	// copying the hash.
	return walqjs.ConsumerName(queue, prio)
}

// Row "fence margin": a lease ends on the client Fence before the server's
// AckWait; a call after that is refused even though the server would
// still take it, and the item comes back only at the AckWait.
func TestDiffFence(t *testing.T) {
	const vis, fence = 2 * time.Second, 500 * time.Millisecond
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: vis, Fence: fence})
	put(t, q, "a")
	before := time.Now()
	m := get(t, q, 5*time.Second)
	after := time.Now()
	if m.LeaseEnd.Before(before.Add(vis-fence)) || m.LeaseEnd.After(after.Add(vis-fence)) {
		t.Fatalf("LeaseEnd %v not within [%v, %v] + Visibility - Fence", m.LeaseEnd, before, after)
	}
	time.Sleep(time.Until(m.LeaseEnd) + 50*time.Millisecond)
	if err := q.Ack(m.Receipt); !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("Ack past LeaseEnd: %v, want ErrLeaseLost", err)
	}
	// Between the client's end and the server's, nothing is redelivered.
	noneWithin(t, q, time.Until(before.Add(vis))-100*time.Millisecond)
	m2 := get(t, q, 5*time.Second)
	if m2.Attempt != 2 || time.Since(before) < vis {
		t.Fatalf("redelivered %v after the lease began (attempt %d), want at least the AckWait %v", time.Since(before), m2.Attempt, vis)
	}
}

// Row "extend": Extend reaches at most the Visibility from now: InProgress
// restarts the consumer's AckWait and cannot extend by a chosen duration.
func TestDiffExtendAtMostVisibility(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second})
	put(t, q, "a")
	m := get(t, q, 5*time.Second)
	if err := q.Extend(m.Receipt, 2*time.Second); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "AckWait") {
		t.Fatalf("Extend past the Visibility: %v, want ErrInvalid saying why", err)
	}
	for range 4 {
		time.Sleep(500 * time.Millisecond)
		if err := q.Extend(m.Receipt, time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatalf("Ack after 2s of extensions of 1s: %v", err)
	}
}

// Row "expiry": an expired lease comes back after the AckWait alone; the
// Backoff applies to nacks.
func TestDiffExpiryNoBackoff(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second,
		Backoff: func(int) time.Duration { return time.Hour }})
	put(t, q, "a")
	start := time.Now()
	get(t, q, 5*time.Second)
	m := get(t, q, 5*time.Second)
	if m.Attempt != 2 || time.Since(start) > 3*time.Second {
		t.Fatalf("after an expiry: attempt %d, %v later; walq would wait the hour of backoff", m.Attempt, time.Since(start))
	}
	if err := q.Nack(m.Receipt, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	noneWithin(t, q, 2*time.Second) // the nack's hour
}

// Row "attempts": the server counts deliveries, and an attempt is any
// delivery, including one the adapter did not hand out: here a delayed
// item that arrives before its due time (a server whose clock is behind
// the client's) is sent back for the rest of its delay, and comes with
// attempt 2.
func TestDiffAttemptsCountedByServer(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 2 * time.Second})
	due := time.Now().Add(time.Second)
	h := nats.Header{}
	h.Set(walqjs.HeaderVersion, "1")
	h.Set(walqjs.HeaderDue, fmt.Sprint(due.UnixNano()))
	// Published ready, as a scheduler on a slow clock would fire it.
	if _, err := q.js.PublishMsg(context.Background(), &nats.Msg{Subject: "walq.diff.q.jobs.p0", Header: h, Data: []byte("early")}); err != nil {
		t.Fatal(err)
	}
	m := get(t, q, 5*time.Second)
	if time.Now().Before(due) {
		t.Fatalf("delivered before its due time")
	}
	if m.Attempt != 2 {
		t.Fatalf("attempt %d, want 2: the early delivery counts", m.Attempt)
	}
}

// Row "keys": a key is held for the Dir's KeyWindow from its put (the
// stream's duplicate window), not from the ack: an item still waiting
// past the window no longer holds it.
func TestDiffKeyWindowFromPut(t *testing.T) {
	q := newQueue(t, walqjs.Options{KeyWindow: time.Second}, walqjs.QueueOptions{})
	id := put(t, q, "first", walq.WithKey("k"))
	if got, err := q.Put(context.Background(), []byte("again"), walq.WithKey("k")); !errors.Is(err, walq.ErrDuplicate) || got != id {
		t.Fatalf("put within the window: %d, %v", got, err)
	}
	time.Sleep(1500 * time.Millisecond)
	id2, err := q.Put(context.Background(), []byte("after the window"), walq.WithKey("k"))
	if err != nil || id2 == id {
		t.Fatalf("put after the window, the first item still waiting: %d, %v (walq would refuse it)", id2, err)
	}
	// Keys are per queue, as in walq: another queue of the Dir takes the
	// same key.
	other, err := q.dir.OpenQueue(context.Background(), "other", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Put(context.Background(), []byte("x"), walq.WithKey("k")); err != nil {
		t.Fatalf("the same key in another queue: %v", err)
	}
	if _, err := walqjs.OpenDir(context.Background(), q.js, "short", walqjs.Options{KeyWindow: 50 * time.Millisecond}); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("a key window under 100ms: %v", err)
	}
}

// Row "priority": one subject per level; only the declared levels.
func TestDiffPriorityLevels(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Priorities: []int{0, 5}})
	if _, err := q.Put(context.Background(), []byte("x"), walq.WithPriority(3)); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("put with an undeclared priority: %v", err)
	}
	low := put(t, q, "low", walq.WithPriority(5))
	high := put(t, q, "high")
	for _, want := range []uint64{high, low} {
		m := get(t, q, 5*time.Second)
		if m.ID != want {
			t.Fatalf("got %d, want %d", m.ID, want)
		}
		q.Ack(m.Receipt)
	}
	names, err := q.js.Stream(context.Background(), "WALQ_diff")
	if err != nil {
		t.Fatal(err)
	}
	var consumers []string
	for n := range names.ConsumerNames(context.Background()).Name() {
		consumers = append(consumers, n)
	}
	if len(consumers) != 2 {
		t.Fatalf("consumers %v, want one per level", consumers)
	}
}

// Row "delays": the adapter writes the schedule's time to the nanosecond;
// nats.go's WithScheduleAt cuts it to the second, which fires early.
func TestDiffDelayScheduleAtTruncates(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 5 * time.Second})
	ctx := context.Background()
	// WithScheduleAt, at 0.9s into a second: the header says the second.
	for time.Now().Nanosecond() > 100e6 {
		time.Sleep(10 * time.Millisecond)
	}
	at := time.Now().Truncate(time.Second).Add(1900 * time.Millisecond)
	msg := &nats.Msg{Subject: "walq.diff.s.jobs.fact", Header: nats.Header{walqjs.HeaderVersion: {"1"}}, Data: []byte("fact")}
	if _, err := q.js.PublishMsg(ctx, msg, njs.WithScheduleAt(at), njs.WithScheduleTarget("walq.diff.q.jobs.p0")); err != nil {
		t.Fatal(err)
	}
	m := get(t, q, 5*time.Second)
	early := time.Until(at)
	t.Logf("WithScheduleAt(%v): the message came %v before that time", at.Format(time.StampMilli), early)
	if early <= 0 {
		t.Fatalf("WithScheduleAt was not early (%v): the fact the adapter works around no longer holds", early)
	}
	q.Ack(m.Receipt)
	// The adapter's delays: never early.
	for _, d := range []time.Duration{150 * time.Millisecond, 900 * time.Millisecond, 1100 * time.Millisecond} {
		start := time.Now()
		id := put(t, q, "delayed", walq.WithDelay(d))
		m := get(t, q, 5*time.Second)
		if m.ID != id || time.Since(start) < d {
			t.Fatalf("delay %v: item %d after %v", d, m.ID, time.Since(start))
		}
		t.Logf("delay %v: delivered %v after the put", d, time.Since(start))
		q.Ack(m.Receipt)
	}
}

// Row "history": the attempts of a live item are recorded by the clients
// that see them end (nack, expiry, dead letter) and go into the dead
// letter's headers.
func TestDiffHistory(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second, MaxAttempts: 3, Backoff: zeroBackoff})
	id := put(t, q, "a")
	m := get(t, q, 5*time.Second)
	q.Nack(m.Receipt, errors.New("boom 1"))
	get(t, q, 5*time.Second) // expires
	m = get(t, q, 5*time.Second)
	q.Nack(m.Receipt, errors.New("boom 3"))
	var dl []walq.DeadLetter
	deadline := time.Now().Add(5 * time.Second)
	for len(dl) == 0 && time.Now().Before(deadline) {
		dl, _ = q.DeadLetters(0)
		time.Sleep(10 * time.Millisecond)
	}
	if len(dl) != 1 || dl[0].ID != id {
		t.Fatalf("dead letters %v", dl)
	}
	var hows []string
	for _, a := range dl[0].History {
		hows = append(hows, a.How+":"+a.Error)
	}
	if got := strings.Join(hows, " "); got != "nack:boom 1 expire: nack:boom 3" {
		t.Fatalf("history %q", got)
	}
	// Redriven, it keeps its history and starts its attempts again.
	if err := q.Redrive(id); err != nil {
		t.Fatal(err)
	}
	m = get(t, q, 5*time.Second)
	if m.ID != id || m.Attempt != 1 || m.Deliveries != 4 {
		t.Fatalf("after the redrive: item %d attempt %d deliveries %d", m.ID, m.Attempt, m.Deliveries)
	}
	q.DeadLetter(m.Receipt, errors.New("poison"))
	dl, _ = q.DeadLetters(0)
	if len(dl) != 1 || len(dl[0].History) != 4 {
		t.Fatalf("after a second dead letter: %+v", dl)
	}
}

// Row "settings": the Visibility is the consumers' AckWait, so the last
// OpenQueue sets it for every process; MaxAttempts, Backoff and Fence are
// each client's.
func TestDiffSettingsLastOpenWins(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second})
	q2, err := q.dir.OpenQueue(context.Background(), "jobs", walqjs.QueueOptions{Visibility: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	c, err := q.js.Consumer(context.Background(), "WALQ_diff", walqjs.ConsumerName("jobs", 0))
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); ci.Config.AckWait != 3*time.Second {
		t.Fatalf("AckWait %v", ci.Config.AckWait)
	}
	// The first handle still fences at its own 1s (less its fence): safe,
	// since the server now waits longer.
	put(t, q, "a")
	m := get(t, q, 5*time.Second)
	if time.Until(m.LeaseEnd) > time.Second {
		t.Fatalf("LeaseEnd in %v", time.Until(m.LeaseEnd))
	}
}

// Row "not offered": what walq's Queue has that the adapter does not.
func TestDiffNotOffered(t *testing.T) {
	typ := reflect.TypeFor[*walqjs.Queue]()
	for _, name := range []string{"Pause", "Resume", "Delete", "PutBatch", "RedriveTo", "Stats", "Queues", "Work"} {
		if _, ok := typ.MethodByName(name); ok {
			t.Errorf("the adapter has %s: update the README's table", name)
		}
	}
	if _, ok := reflect.TypeFor[walqjs.QueueOptions]().FieldByName("MaxInFlight"); ok {
		t.Errorf("QueueOptions has MaxInFlight: update the README's table")
	}
}

// Row "watch": Watch signals every PollInterval, so WorkQueues serves
// JetStream queues.
func TestDiffWatchPolls(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{PollInterval: 20 * time.Millisecond})
	other, err := q.dir.OpenQueue(context.Background(), "other", walqjs.QueueOptions{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ch, stop := q.Watch()
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("no signal within a second")
	}
	stop()
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- walq.WorkQueues(ctx, []walq.WorkQueue{{Queue: q.Queue}, {Queue: other}}, 2, func(ctx context.Context, m walq.Message) error {
			mu.Lock()
			seen[m.Queue]++
			mu.Unlock()
			return nil
		}, walq.WorkOptions{})
	}()
	time.Sleep(100 * time.Millisecond)
	for i := range 10 {
		put(t, q, fmt.Sprint(i))
		if _, err := other.Put(context.Background(), []byte("o")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := seen["jobs"] + seen["other"]
		mu.Unlock()
		if n == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WorkQueues handled %v", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
