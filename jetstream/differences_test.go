package jetstream_test

// One test per row of the README's table of differences from walq's own
// queue. Each name is TestDiff<Row>.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// Row "attempts": attempts are counted in the item's record, at each
// lease handed out; a delivery the adapter did not hand out (here a
// delayed item that arrives before its due time, from a server whose
// clock is behind the client's, sent back for the rest of its delay) is
// no attempt, though it counts in Deliveries.
func TestDiffAttemptsCountedInRecord(t *testing.T) {
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
	if m.Attempt != 1 || m.Deliveries != 2 {
		t.Fatalf("attempt %d, deliveries %d; want attempt 1 (the early delivery is none), deliveries 2", m.Attempt, m.Deliveries)
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

// Row "settings": a queue's Visibility, MaxAttempts and Priorities are
// recorded in its consumers; opening keeps them (a zero field takes them, a
// differing one is refused) and only SetSettings changes them.
func TestDiffSettingsRecorded(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: time.Second, MaxAttempts: 2, Priorities: []int{0, 1}})
	ackWait := func() time.Duration {
		t.Helper()
		c, err := q.js.Consumer(ctx, "WALQ_diff", walqjs.ConsumerName("jobs", 0))
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Config.AckWait
	}
	for _, qo := range []walqjs.QueueOptions{
		{Visibility: 3 * time.Second},
		{MaxAttempts: 9},
		{Priorities: []int{0, 2}},
		{Visibility: -time.Second},
	} {
		if _, err := q.dir.OpenQueue(ctx, "jobs", qo); !errors.Is(err, walq.ErrInvalid) {
			t.Fatalf("OpenQueue(%+v) = %v, want ErrInvalid", qo, err)
		}
	}
	if got := ackWait(); got != time.Second {
		t.Fatalf("after refused opens the AckWait is %v, want 1s", got)
	}
	q2, err := q.dir.OpenQueue(ctx, "jobs", walqjs.QueueOptions{Priorities: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if s := q2.Settings(); s.Visibility != time.Second || s.MaxAttempts != 2 || !slices.Equal(s.Priorities, []int{0, 1}) {
		t.Fatalf("a second handle opened with zero settings has %+v", s)
	}
	// SetSettings lengthens the Visibility for every delivery at once; it
	// refuses to shorten it or to change the levels.
	s := q2.Settings()
	s.Visibility, s.MaxAttempts = 3*time.Second, 4
	if err := q2.SetSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := ackWait(); got != 3*time.Second {
		t.Fatalf("after SetSettings the AckWait is %v, want 3s", got)
	}
	for _, bad := range []walqjs.QueueOptions{{Visibility: 2 * time.Second}, {Visibility: 3 * time.Second, Priorities: []int{0, 1, 2}}} {
		if err := q2.SetSettings(ctx, bad); !errors.Is(err, walq.ErrInvalid) {
			t.Fatalf("SetSettings(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	q3, err := q.dir.OpenQueue(ctx, "jobs", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer q3.Close()
	if s := q3.Settings(); s.Visibility != 3*time.Second || s.MaxAttempts != 4 {
		t.Fatalf("a handle opened after SetSettings has %+v", s)
	}
	// The first handle fences at its own 1s (less its fence) until it is
	// opened again: safe, since the server now waits longer.
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

// Row "watch": after a TryGet that found nothing, Watch signals when an
// item becomes ready, put by any handle (the watch holds a waiting pull
// request), so WorkQueues serves JetStream queues without polling them.
func TestDiffWatchWaits(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	other, err := q.dir.OpenQueue(context.Background(), "other", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	elsewhere, err := q.dir.OpenQueue(context.Background(), "jobs", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Close()
	ch, stop := q.Watch()
	if _, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("TryGet on an empty queue = %v, %v", ok, err)
	}
	if _, err := elsewhere.Put(context.Background(), []byte("from another handle")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal within 5 s of a put by another handle")
	}
	m, ok, err := q.TryGet()
	if !ok || err != nil || string(m.Body) != "from another handle" {
		t.Fatalf("TryGet after the signal = %q, %v, %v", m.Body, ok, err)
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
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

// Row "queue names": a '.' separates tokens in a NATS subject, so a name
// with ".." or a trailing '.' (walq takes both) is refused; a '.' between
// two tokens is taken.
func TestDiffQueueNameDots(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	for _, name := range []string{"a..b", "a."} {
		if _, err := q.dir.OpenQueue(context.Background(), name, walqjs.QueueOptions{}); !errors.Is(err, walq.ErrInvalid) {
			t.Errorf("OpenQueue(%q) = %v, want ErrInvalid", name, err)
		}
	}
	q2, err := q.dir.OpenQueue(context.Background(), "mail.v2", walqjs.QueueOptions{})
	if err != nil {
		t.Fatalf("OpenQueue(mail.v2): %v", err)
	}
	q2.Close()
}
