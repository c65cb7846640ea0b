package jetstream_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Names: two queues never share a consumer, and a Dir never takes another
// Dir's stream for one of its own.

// Two valid, distinct queue names whose legacy consumer names are the
// same: the legacy name replaced '.' by '_' and told names apart by
// FNV-32a alone, and these two (found by a birthday search over names that
// differ only in '.' and '_') have the same FNV-32a.
const (
	collideA = "a_a_a.a_a_a.a_a_a.a_a_a.a_a_a_a.a_a_a_a_a_a_a"
	collideB = "a.a.a_a.a.a_a.a.a.a.a.a_a.a.a.a_a.a_a_a_a_a_a"
)

// onlyOwn takes from q for a while and says what it got; each item is
// acked.
func onlyOwn(t *testing.T, q interface {
	TryGet() (walq.Message, bool, error)
	Ack(walq.Receipt) error
}) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(150 * time.Millisecond)
	for time.Now().Before(deadline) {
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		got = append(got, string(m.Body))
		q.Ack(m.Receipt)
	}
	return got
}

// TestQueueNamesNeverShareAConsumer: two queues of one Dir whose names
// the legacy consumer name could not tell apart each have a consumer of
// their own and each hands out only its own items; in a Dir where an older
// adapter made the first queue's consumer under the legacy name, that
// consumer is still found and used, and the second queue does not take it
// for its own (its filter subject is the first queue's). (Before, both
// queues used one consumer: the second handed out the first's items, and
// its own were never delivered.)
func TestQueueNamesNeverShareAConsumer(t *testing.T) {
	if collideA == collideB || walqjs.LegacyConsumerName(collideA, 0) != walqjs.LegacyConsumerName(collideB, 0) {
		t.Fatalf("precondition: the names must differ and share a legacy consumer name")
	}
	if walqjs.ConsumerName(collideA, 0) == walqjs.ConsumerName(collideB, 0) {
		t.Fatalf("ConsumerName(%q) = ConsumerName(%q) = %s", collideA, collideB, walqjs.ConsumerName(collideA, 0))
	}
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	both := func(dir *walqjs.Dir) {
		t.Helper()
		a, err := dir.OpenQueue(ctx, collideA, walqjs.QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := dir.OpenQueue(ctx, collideB, walqjs.QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if _, err := a.Put(ctx, []byte("item of A")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Put(ctx, []byte("item of B")); err != nil {
			t.Fatal(err)
		}
		if got := onlyOwn(t, b); !reflect.DeepEqual(got, []string{"item of B"}) {
			t.Fatalf("queue B handed out %q; want only its own item", got)
		}
		if got := onlyOwn(t, a); !reflect.DeepEqual(got, []string{"item of A"}) {
			t.Fatalf("queue A handed out %q; want only its own item", got)
		}
	}
	both(q.dir)

	// A Dir where an older adapter made queue A, its consumer under the
	// legacy name.
	old, err := walqjs.OpenDir(ctx, q.js, "older", walqjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	legacy := walqjs.LegacyConsumerName(collideA, 0)
	if _, err := q.js.CreateConsumer(ctx, "WALQ_older", njs.ConsumerConfig{
		Durable: legacy, FilterSubject: "walq.older.q." + collideA + ".p0",
		AckPolicy: njs.AckExplicitPolicy, AckWait: 7 * time.Second, MaxDeliver: -1, MaxAckPending: -1,
		Metadata: map[string]string{"walq.queue": collideA, "walq.max_attempts": "3", "walq.priorities": "0"},
	}); err != nil {
		t.Fatal(err)
	}
	both(old)
	a, err := old.OpenQueue(ctx, collideA, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if s := a.Settings(); s.Visibility != 7*time.Second || s.MaxAttempts != 3 {
		t.Fatalf("queue A of the older Dir opened with %+v; want the legacy consumer's 7s and 3 attempts", s)
	}
	var names []string
	for n := range (func() njs.Stream {
		st, err := q.js.Stream(ctx, "WALQ_older")
		if err != nil {
			t.Fatal(err)
		}
		return st
	})().ConsumerNames(ctx).Name() {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{walqjs.ConsumerName(collideB, 0), legacy}
	slices.Sort(want)
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("the older Dir's consumers: %q; want A's legacy one and B's own: %q", names, want)
	}
}

// TestDirNamedLikeADeadLetterStreamRefused: a Dir name ending in "_DLQ"
// or "_HIST" (the suffixes of a Dir's dead-letter stream and history
// bucket) is ErrInvalid; where an older adapter made a Dir "app_DLQ"
// (whose work stream is named as Dir "app"'s dead-letter stream),
// OpenDir("app") is ErrInvalid naming the stream, creates nothing and
// leaves the stream as it was; a Dir "app" without it works. (Before,
// OpenDir("app") took the other Dir's work stream for its dead letters:
// DeadLetter failed and the item could never be dead-lettered.)
func TestDirNamedLikeADeadLetterStreamRefused(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	ctx := context.Background()
	for _, name := range []string{"app_DLQ", "app_HIST"} {
		if _, err := walqjs.OpenDir(ctx, js, name, walqjs.Options{}); !errors.Is(err, walq.ErrInvalid) {
			t.Fatalf("OpenDir(%q) = %v, want ErrInvalid", name, err)
		}
	}
	// The work stream an older adapter made for its Dir "app_DLQ".
	st, err := js.CreateStream(ctx, njs.StreamConfig{Name: "WALQ_app_DLQ", Subjects: []string{"walq.app_DLQ.>"},
		Retention: njs.WorkQueuePolicy, Storage: njs.FileStorage, AllowMsgSchedules: true, AllowMsgTTL: true})
	if err != nil {
		t.Fatal(err)
	}
	before := st.CachedInfo().Config
	_, err = walqjs.OpenDir(ctx, js, "app", walqjs.Options{})
	if !errors.Is(err, walq.ErrInvalid) || !errContains(err, "WALQ_app_DLQ") {
		t.Fatalf("OpenDir(\"app\") beside an older Dir \"app_DLQ\" = %v; want ErrInvalid naming WALQ_app_DLQ", err)
	}
	if _, err := js.Stream(ctx, "WALQ_app"); !errors.Is(err, njs.ErrStreamNotFound) {
		t.Fatalf("the refused OpenDir created the work stream WALQ_app: %v", err)
	}
	st, err = js.Stream(ctx, "WALQ_app_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if after := st.CachedInfo().Config; !reflect.DeepEqual(after.Subjects, before.Subjects) || after.AllowAtomicPublish != before.AllowAtomicPublish ||
		after.MaxMsgsPerSubject != before.MaxMsgsPerSubject {
		t.Fatalf("the other Dir's stream changed: %+v, was %+v", after, before)
	}
	if err := js.DeleteStream(ctx, "WALQ_app_DLQ"); err != nil {
		t.Fatal(err)
	}
	q, err := openQueue(s.ClientURL(), "app", "jobs", walqjs.Options{}, walqjs.QueueOptions{Visibility: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	id := put(t, q, "poison")
	m := get(t, q, 2*time.Second)
	derr := q.DeadLetter(m.Receipt, errors.New("bad input"))
	dead, lerr := q.DeadLetters(0)
	if derr != nil || lerr != nil || len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("DeadLetter(item %d) = %v; DeadLetters = %d, %v", id, derr, len(dead), lerr)
	}
}

// TestOpenDirNeverChangesAnotherDirsStream: OpenDir("x_DLQ") is
// ErrInvalid and leaves Dir x's dead-letter stream as it was; a stream
// under a Dir's work stream name that does not hold the Dir's subjects (not
// walq's) is refused, unchanged. (Before, OpenDir("x_DLQ") took x's
// dead-letter stream for its work stream and turned on message schedules,
// TTLs, rollups and atomic publish in it.)
func TestOpenDirNeverChangesAnotherDirsStream(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	x, err := openQueue(s.ClientURL(), "x", "jobs", walqjs.Options{}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	cfgOf := func(name string) njs.StreamConfig {
		st, err := x.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	before := cfgOf("WALQ_x_DLQ")
	if _, err := walqjs.OpenDir(ctx, x.js, "x_DLQ", walqjs.Options{}); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("OpenDir(\"x_DLQ\") = %v, want ErrInvalid", err)
	}
	if after := cfgOf("WALQ_x_DLQ"); !reflect.DeepEqual(after, before) {
		t.Fatalf("Dir x's dead-letter stream changed: %+v, was %+v", after, before)
	}
	// A stream that is not walq's under the name of Dir y's work stream.
	if _, err := x.js.CreateStream(ctx, njs.StreamConfig{Name: "WALQ_y", Subjects: []string{"other.>"}, Storage: njs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	before = cfgOf("WALQ_y")
	if _, err := walqjs.OpenDir(ctx, x.js, "y", walqjs.Options{}); !errors.Is(err, walq.ErrInvalid) || !errContains(err, "WALQ_y") {
		t.Fatalf("OpenDir(\"y\") over a stream WALQ_y of subjects other.> = %v, want ErrInvalid naming it", err)
	}
	if after := cfgOf("WALQ_y"); !reflect.DeepEqual(after, before) {
		t.Fatalf("the stream WALQ_y changed: %+v, was %+v", after, before)
	}
}

func errContains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestOlderDirNamedWithReservedSuffixStillOpens: an older adapter let a Dir
// be named "orders_HIST"; its streams (WALQ_orders_HIST,
// WALQ_orders_HIST_DLQ, KV_WALQ_orders_HIST_HIST) collide with no other
// Dir's (Dir "orders"'s bucket is the stream KV_WALQ_orders_HIST). It opens
// beside Dir "orders", and its item is delivered; a new Dir of such a name
// is still refused (TestDirNamedLikeADeadLetterStreamRefused). (Before,
// OpenDir("orders_HIST") was ErrInvalid by its name alone: the Dir and its
// items were out of reach after the upgrade.)
func TestOlderDirNamedWithReservedSuffixStillOpens(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	ctx := context.Background()
	// What an older adapter made for its Dir "orders_HIST", with an item.
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "WALQ_orders_HIST", Subjects: []string{"walq.orders_HIST.>"},
		Retention: njs.WorkQueuePolicy, Storage: njs.FileStorage, AllowMsgSchedules: true, AllowMsgTTL: true}); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(walqjs.HeaderVersion, "1")
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "walq.orders_HIST.q.jobs.p0", Header: h, Data: []byte("an order")}); err != nil {
		t.Fatal(err)
	}
	if _, err := walqjs.OpenDir(ctx, js, "orders", walqjs.Options{}); err != nil {
		t.Fatalf("OpenDir(\"orders\") beside the older Dir \"orders_HIST\": %v", err)
	}
	d, err := walqjs.OpenDir(ctx, js, "orders_HIST", walqjs.Options{})
	if err != nil {
		t.Fatalf("OpenDir(\"orders_HIST\"), a Dir an older adapter made = %v; want it opened", err)
	}
	q, err := d.OpenQueue(ctx, "jobs", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m, ok, err := q.TryGet()
	if err != nil || !ok || string(m.Body) != "an order" {
		t.Fatalf("the older Dir's item: %q, %v, %v", m.Body, ok, err)
	}
}
