package walq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// testdata/format2-queues was written by the build that introduced named
// queues with WALQ_WRITE_QUEUES_FIXTURE=testdata/format2-queues go test
// -run TestWriteQueuesFixture: format 2 with the record types of named
// queues (create, set, pause, delete, move) on both sides of a snapshot
// whose state section is of kind 2 (every queue, attempt histories), and a
// queue deleted and created again.

// queuesFixtureOptions are the named queues' options in the fixture.
var queuesFixtureOptions = map[string]QueueOptions{
	"mail":    {Visibility: time.Minute, MaxAttempts: 2, Backoff: func(int) time.Duration { return time.Minute }, KeyWindow: 24 * time.Hour, MaxInFlight: 3},
	"held":    {MaxItems: 100},
	"reborn":  {},
	"archive": {MaxBytes: 1 << 20},
}

func TestWriteQueuesFixture(t *testing.T) {
	dir := os.Getenv("WALQ_WRITE_QUEUES_FIXTURE")
	if dir == "" {
		t.Skip("writes a fixture only when WALQ_WRITE_QUEUES_FIXTURE names its directory")
	}
	clock := NewManualClock(fixtureTime)
	q, err := Open(dir, fixtureOptions(clock))
	must(t, err)
	ctx := context.Background()
	open := func(name string) *Queue {
		h, err := q.OpenQueue(name, queuesFixtureOptions[name])
		must(t, err)
		return h
	}
	put := func(h *Queue, body string, opts ...PutOption) uint64 {
		t.Helper()
		id, err := h.Put(ctx, []byte(body), opts...)
		must(t, err)
		clock.Advance(time.Millisecond)
		return id
	}
	lease := func(h *Queue, want uint64) Message {
		t.Helper()
		m, ok, err := h.TryGet()
		if err != nil || !ok || m.ID != want {
			t.Fatalf("TryGet on %s = %+v, %v, %v; want item %d", h.Name(), m, ok, err, want)
		}
		return m
	}
	mail, held, reborn := open("mail"), open("held"), open("reborn")
	put(q, "default-0")
	failing := put(mail, "mail fails twice")
	for range 2 {
		must(t, mail.Nack(lease(mail, failing).Receipt, errors.New("smtp 451")))
		clock.Advance(time.Minute)
	}
	put(mail, "mail-0", WithKey("k-mail"))
	put(held, "held-0")
	must(t, held.Pause(time.Time{}))
	put(held, "held-1 put while paused", WithKey("k-held"))
	lease(reborn, put(reborn, "of the first incarnation", WithKey("k-reborn")))
	must(t, reborn.Delete(true))
	must(t, q.Compact()) // the snapshot: every queue, one of them paused, a history
	reborn = open("reborn")
	put(reborn, "of the second incarnation", WithKey("k-reborn"))
	archive := open("archive")
	dead := put(mail, "mail dead-lettered", WithPriority(-1))
	must(t, mail.DeadLetter(lease(mail, dead).Receipt, errors.New("mailbox gone")))
	must(t, mail.RedriveTo(archive, dead))
	o := queuesFixtureOptions["mail"]
	o.MaxInFlight = 5 // a settings record after the snapshot
	must(t, mail.SetSettings(o))
	put(mail, "mail-1 after the snapshot")
	must(t, q.Close())
	os.Remove(filepath.Join(dir, "RESERVE"))
}

// TestOpenQueuesFixture opens a copy of testdata/format2-queues and finds
// each queue with its settings, pause, items, keys and dead letters, and
// nothing of the deleted incarnation.
func TestOpenQueuesFixture(t *testing.T) {
	dir := copyDir(t, "testdata/format2-queues")
	clock := NewManualClock(fixtureTime.Add(2 * time.Hour))
	q, err := Open(dir, fixtureOptions(clock))
	must(t, err)
	defer q.Close()
	r := q.Stats().Recovery
	if r.SnapshotLSN == 0 || r.Replayed == 0 {
		t.Fatalf("recovery %+v: want a snapshot and records after it", r)
	}
	infos, err := q.Queues()
	must(t, err)
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	if got := strings.Join(names, ","); got != ",mail,held,reborn,archive" {
		t.Fatalf("queues %q", got)
	}
	if in := infos[1]; in.Options.Visibility != time.Minute || in.Options.MaxAttempts != 2 || in.Options.MaxInFlight != 5 || in.Options.KeyWindow != 24*time.Hour {
		t.Fatalf("mail's settings %+v", in.Options)
	}
	if in := infos[2]; !in.Paused || !in.PausedUntil.IsZero() || in.Options.MaxItems != 100 {
		t.Fatalf("held %+v", in)
	}
	if infos[3].ID <= r.SnapshotLSN {
		t.Fatalf("reborn's incarnation %d is not the one made after the snapshot at %d", infos[3].ID, r.SnapshotLSN)
	}
	drain := func(h *Queue) []string {
		var out []string
		for {
			m, ok, err := h.TryGet()
			must(t, err)
			if !ok {
				break
			}
			out = append(out, string(m.Body))
			must(t, h.Ack(m.Receipt))
		}
		sort.Strings(out)
		return out
	}
	// mail's MaxInFlight is 5 since a settings record after the snapshot;
	// opening with what it was created with (3) would be refused.
	mail, held, reborn, archive := mustOpenQueue(t, q, "mail", QueueOptions{Backoff: queuesFixtureOptions["mail"].Backoff}), mustOpenQueue(t, q, "held", QueueOptions{MaxItems: 100}),
		mustOpenQueue(t, q, "reborn", QueueOptions{}), mustOpenQueue(t, q, "archive", QueueOptions{MaxBytes: 1 << 20})
	dl := mail.DeadLetters(0)
	if len(dl) != 1 || string(dl[0].Body) != "mail fails twice" || dl[0].LastError != "smtp 451" ||
		len(dl[0].History) != 2 || dl[0].History[1].How != "nack" || dl[0].History[1].Error != "smtp 451" {
		t.Fatalf("mail's dead letters %+v", dl)
	}
	for _, tc := range []struct {
		h    *Queue
		want string
		keys []string
	}{
		{q, "[default-0]", nil},
		{mail, "[mail-0 mail-1 after the snapshot]", []string{"k-mail"}},
		{reborn, "[of the second incarnation]", []string{"k-reborn"}},
		{archive, "[mail dead-lettered]", nil},
	} {
		if got := fmt.Sprint(drain(tc.h)); got != tc.want {
			t.Errorf("%q holds %s, want %s", tc.h.Name(), got, tc.want)
		}
		for _, k := range tc.keys {
			if _, err := tc.h.Put(context.Background(), nil, WithKey(k)); !errors.Is(err, ErrDuplicate) {
				t.Errorf("%q: key %q not held: %v", tc.h.Name(), k, err)
			}
		}
	}
	if got := drain(held); len(got) != 0 {
		t.Fatalf("the paused queue delivered %q", got)
	}
	must(t, held.Resume())
	if got := fmt.Sprint(drain(held)); got != "[held-0 held-1 put while paused]" {
		t.Fatalf("held holds %s", got)
	}
}
