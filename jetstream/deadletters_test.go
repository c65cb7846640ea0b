package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// killAll leases every ready item of q and dead-letters it.
func killAll(t *testing.T, q *closingQueue, n int) []uint64 {
	t.Helper()
	var ids []uint64
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := q.Get(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.DeadLetter(m.Receipt, errors.New("poison")); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func deadSet(t *testing.T, q *closingQueue) map[uint64]bool {
	t.Helper()
	dl, err := q.DeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[uint64]bool)
	for _, d := range dl {
		out[d.ID] = true
	}
	return out
}

// TestDeadLetterCallsAllOrNothing: Redrive and PurgeDeadLetters with an
// ID that is no dead letter change nothing and answer ErrNotFound (before,
// they acted on the others and then answered ErrNotFound, so a retry of
// the call failed on the ones already done), and PurgeDeadLetters with no
// IDs purges them all, as a walq queue's does (before, it did nothing).
func TestDeadLetterCallsAllOrNothing(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	put(t, q, "a")
	put(t, q, "b")
	put(t, q, "c")
	ids := killAll(t, q, 3)
	const unknown = 1 << 40

	if err := q.PurgeDeadLetters(ids[0], unknown); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("PurgeDeadLetters(%d, unknown) = %v, want ErrNotFound", ids[0], err)
	}
	if got := deadSet(t, q); len(got) != 3 {
		t.Fatalf("after a refused purge: dead letters %v, want all 3", got)
	}
	if err := q.Redrive(ids[1], unknown); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("Redrive(%d, unknown) = %v, want ErrNotFound", ids[1], err)
	}
	if got := deadSet(t, q); len(got) != 3 {
		t.Fatalf("after a refused redrive: dead letters %v, want all 3", got)
	}
	if m, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("after a refused redrive: TryGet = %d, %v, %v; want nothing ready", m.ID, ok, err)
	}

	if err := q.Redrive(ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := deadSet(t, q); got[ids[1]] || len(got) != 2 {
		t.Fatalf("after Redrive(%d): dead letters %v", ids[1], got)
	}
	if err := q.PurgeDeadLetters(); err != nil {
		t.Fatal(err)
	}
	if got := deadSet(t, q); len(got) != 0 {
		t.Fatalf("after PurgeDeadLetters(): dead letters %v, want none", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := q.Get(ctx); err != nil || m.ID != ids[1] {
		t.Fatalf("the redriven item: %d, %v; want %d", m.ID, err, ids[1])
	}
}

// TestRedriveAllOrNothing: a Redrive one of whose puts the server refuses
// (here a stream limit the operator set) changes nothing: every dead
// letter stays and no item is back; once the limit is lifted, the same
// Redrive puts both back. (Before, Redrive put the items back one by one:
// the IDs before the refused one were redriven, the rest not.)
func TestRedriveAllOrNothing(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	small := put(t, q, "small")
	large := put(t, q, strings.Repeat("L", 2000))
	killAll(t, q, 2)
	st, err := q.js.Stream(ctx, "WALQ_diff")
	if err != nil {
		t.Fatal(err)
	}
	setMax := func(n int32) {
		cfg := st.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := q.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMax(1000)
	if err := q.Redrive(small, large); err == nil {
		t.Fatal("Redrive of an item over the stream's MaxMsgSize: nil")
	}
	if got := deadSet(t, q); !got[small] || !got[large] || len(got) != 2 {
		t.Fatalf("after a refused Redrive(%d, %d): dead letters %v, want both", small, large, got)
	}
	if m, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("after a refused Redrive: TryGet = %d, %v, %v; want nothing back", m.ID, ok, err)
	}
	setMax(-1)
	if err := q.Redrive(small, large); err != nil {
		t.Fatal(err)
	}
	if got := deadSet(t, q); len(got) != 0 {
		t.Fatalf("after Redrive: dead letters %v", got)
	}
	var back []uint64
	for range 2 {
		m := get(t, q, 2*time.Second)
		back = append(back, m.ID)
		q.Ack(m.Receipt)
	}
	slices.Sort(back)
	if !slices.Equal(back, []uint64{small, large}) {
		t.Fatalf("back after Redrive: %v, want %d and %d", back, small, large)
	}
}

// TestRedriveRepeatedIDRefused: Redrive and PurgeDeadLetters with an ID
// named twice are ErrInvalid and change nothing, as on walq; a dead letter
// deleted meanwhile by another process (the server's "no message found",
// err_code 10057) is no error to the delete that finds it gone. (Before,
// the adapter redrove the item and then failed to delete its dead letter a
// second time, with the server's error.)
func TestRedriveRepeatedIDRefused(t *testing.T) {
	ctx := context.Background()
	wq, err := walq.Open(t.TempDir(), walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wq.Close()
	if _, err := wq.Put(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	wm, err := wq.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := wq.DeadLetter(wm.Receipt, errors.New("bad")); err != nil {
		t.Fatal(err)
	}
	if err := wq.Redrive(wm.ID, wm.ID); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("walq's Redrive(%d, %d) = %v", wm.ID, wm.ID, err)
	}
	if err := wq.PurgeDeadLetters(wm.ID, wm.ID); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("walq's PurgeDeadLetters(%d, %d) = %v", wm.ID, wm.ID, err)
	}

	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	put(t, q, "x")
	id := killAll(t, q, 1)[0]
	if err := q.Redrive(id, id); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("Redrive(%d, %d) = %v, want ErrInvalid", id, id, err)
	}
	if err := q.PurgeDeadLetters(id, id); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("PurgeDeadLetters(%d, %d) = %v, want ErrInvalid", id, id, err)
	}
	if got := deadSet(t, q); !got[id] || len(got) != 1 {
		t.Fatalf("after the refused calls: dead letters %v, want %d", got, id)
	}
	if m, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("after the refused calls: TryGet = %d, %v, %v; want nothing back", m.ID, ok, err)
	}
	// Another process deletes the dead letter first.
	dlq, err := q.js.Stream(ctx, "WALQ_diff_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.GetLastMsgForSubject(ctx, "walqdlq.diff.jobs.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := dlq.DeleteMsg(ctx, m.Sequence); err != nil {
		t.Fatal(err)
	}
	if err := q.dir.DeleteDead(ctx, m.Sequence); err != nil {
		t.Fatalf("deleting a dead letter another process deleted: %v, want nil", err)
	}
}

// fakeDead stores n dead letters of q's queue "jobs" in Dir dir, as
// moveToDead writes them (IDs from first), faster than n Gets and
// DeadLetters.
func fakeDead(t *testing.T, q *closingQueue, dir string, first uint64, n int) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ids []uint64
	for i := range n {
		id := first + uint64(i)
		h := nats.Header{}
		h.Set(walqjs.HeaderVersion, "1")
		h.Set(walqjs.HeaderID, strconv.FormatUint(id, 10))
		h.Set(walqjs.HeaderQueue, "jobs")
		h.Set(walqjs.HeaderPriority, "0")
		h.Set(walqjs.HeaderError, "poison")
		h.Set(walqjs.HeaderAttempts, "5")
		h.Set(walqjs.HeaderPut, strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := q.js.PublishMsgAsync(&nats.Msg{Subject: fmt.Sprintf("walqdlq.%s.jobs.%d", dir, id), Header: h, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	select {
	case <-q.js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("dead letters not stored")
	}
	if dl, err := q.DeadLetters(0); err != nil || len(dl) != n {
		t.Fatalf("precondition: %d dead letters, %v; want %d", len(dl), err, n)
	}
	return ids
}

// TestRedriveUnderServerMaxBatchSize: on a server whose operator set
// jetstream limits max_batch_size (here 100), a Redrive of 101 dead
// letters puts them all back, in batches the server takes (its refusal
// names its limit), and deletes their dead letters. (Before, the adapter
// always sent batches of up to 1000: every Redrive of more than 100 IDs
// was refused, for good.)
func TestRedriveUnderServerMaxBatchSize(t *testing.T) {
	s := startServerWith(t, t.TempDir(), 0, func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 100 })
	t.Cleanup(s.Shutdown)
	q, err := openQueue(s.ClientURL(), "mbs", "jobs", walqjs.Options{}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ids := fakeDead(t, q, "mbs", 1<<40, 101)
	if err := q.Redrive(ids...); err != nil {
		t.Fatalf("Redrive of %d dead letters on a server with max_batch_size 100: %v; want them back", len(ids), err)
	}
	if dl, err := q.DeadLetters(0); err != nil || len(dl) != 0 {
		t.Fatalf("after the Redrive: %d dead letters, %v; want none", len(dl), err)
	}
	st, err := q.js.Stream(context.Background(), "WALQ_mbs")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), njs.WithSubjectFilter("walq.mbs.q.jobs.p0"))
	if err != nil || info.State.Subjects["walq.mbs.q.jobs.p0"] != 101 {
		t.Fatalf("ready items after the Redrive: %v, %v; want 101", info.State.Subjects, err)
	}
}
