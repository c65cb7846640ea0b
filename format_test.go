package walq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Every on-disk format that has landed keeps a queue directory written by it
// under testdata/, and today's code must open it with every item intact. A
// fixture is never regenerated: a format change is a new version with a new
// fixture beside the old ones.
//
// testdata/format1 was written by the build of "trust at the edges (1 of
// 2)" with WALQ_WRITE_FIXTURE=testdata/format1 go test -run
// TestWriteFormat1Fixture: log record envelope version 1, snapshot version 1.

// fixtureTime is the wall clock at which the fixtures were written.
var fixtureTime = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func fixtureOptions(clock Clock) Options {
	return Options{Clock: clock, SegmentSize: 4096, MaxAttempts: 2, KeyWindow: 24 * time.Hour,
		Backoff: func(int) time.Duration { return time.Minute }, DisableAutoCompact: true}
}

// fixtureFrame is a real, CRC-valid log record, put inside a body so that
// every fixture also holds a body that looks like a record.
func fixtureFrame() []byte {
	body, err := state.Encode(nil, &state.Ack{Time: fixtureTime.UnixNano(), Receipt: 7})
	if err != nil {
		panic(err)
	}
	rec := wal.AppendRecord(nil, state.TypeAck, 8, body)
	return binary.AppendUvarint(nil, uint64(len(rec))) // the tidwall length prefix
}

// largeBody is a 3,000-byte body, so that a fixture's log has several 4 KiB
// segments.
func largeBody(n int) string {
	b := []byte(fmt.Sprintf("large-%d:", n))
	for len(b) < 3000 {
		b = append(b, byte('a'+len(b)%26))
	}
	return string(b)
}

// fixtureItems is what a fixture holds once opened at fixtureTime plus two
// hours (delays passed, the lease open at the close expired): the bodies of
// the waiting items and of the dead letters, by key.
type fixtureWant struct {
	waiting map[string]string // body -> key ("" for none)
	dead    map[string]string // body -> last error
	keys    []string          // keys still held (waiting, dead, or acked inside the window)
}

func format1Want() fixtureWant {
	frame := string(append(append([]byte("frame:"), fixtureFrame()...), []byte("tail")...))
	return fixtureWant{
		waiting: map[string]string{
			"ready-0":             "",
			"ready-1 priority 1":  "",
			"ready-2 priority -1": "k-ready",
			"delayed-0":           "",
			"delayed-1 keyed":     "k-delayed",
			"leased at close":     "",
			"\x00\x01\xff binary": "",
			frame:                 "",
			"after snapshot-0":    "",
			"after snapshot-1":    "",
			"batch-0":             "",
			"batch-1":             "k-batch",
			"redriven":            "",
			largeBody(0):          "",
			largeBody(1):          "",
			largeBody(2):          "",
		},
		dead: map[string]string{
			"nacked out of attempts": "handler failed: 503",
			"dead-lettered":          "bad input",
		},
		keys: []string{"k-ready", "k-delayed", "k-batch", "k-acked"},
	}
}

// TestWriteFormat1Fixture writes testdata/format1 when WALQ_WRITE_FIXTURE
// names the directory; it is how the fixture was made, kept so that the
// history of every item in it can be read.
func TestWriteFormat1Fixture(t *testing.T) {
	dir := os.Getenv("WALQ_WRITE_FIXTURE")
	if dir == "" {
		t.Skip("writes a fixture only when WALQ_WRITE_FIXTURE names its directory")
	}
	clock := NewManualClock(fixtureTime)
	q, err := Open(dir, fixtureOptions(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(body string, opts ...PutOption) uint64 {
		t.Helper()
		id, err := q.Put(ctx, []byte(body), opts...)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
		return id
	}
	lease := func(want uint64) Message {
		t.Helper()
		m, ok, err := q.TryGet()
		if err != nil || !ok || m.ID != want {
			t.Fatalf("TryGet = %+v, %v, %v; want item %d", m, ok, err, want)
		}
		return m
	}
	acked := put("acked", WithKey("k-acked"))
	if err := q.Ack(lease(acked).Receipt); err != nil {
		t.Fatal(err)
	}
	nacked := put("nacked out of attempts")
	for range 2 {
		m := lease(nacked)
		if err := q.Nack(m.Receipt, errors.New("handler failed: 503")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	if err := q.DeadLetter(lease(put("dead-lettered")).Receipt, errors.New("bad input")); err != nil {
		t.Fatal(err)
	}
	redrive := put("redriven")
	if err := q.DeadLetter(lease(redrive).Receipt, errors.New("to redrive")); err != nil {
		t.Fatal(err)
	}
	if err := q.Redrive(redrive); err != nil {
		t.Fatal(err)
	}
	// The redriven item is ready again; lease it and let the lease expire
	// so it carries an expiry in its history, then it comes back.
	clock.Advance(time.Millisecond)
	lease(redrive)
	clock.Advance(2 * defaultVisibility)
	q.settle()
	clock.Advance(time.Minute)
	put("discarded at its deadline", WithDeadline(clock.Now().Add(time.Second)), WithDelay(500*time.Millisecond))
	clock.Advance(2 * time.Second)
	q.settle()
	put("ready-0")
	put("ready-1 priority 1", WithPriority(1))
	put("ready-2 priority -1", WithPriority(-1), WithKey("k-ready"))
	put("delayed-0", WithDelay(time.Hour))
	put("delayed-1 keyed", WithDelay(time.Hour), WithKey("k-delayed"))
	put("\x00\x01\xff binary")
	put(string(append(append([]byte("frame:"), fixtureFrame()...), []byte("tail")...)))
	put(largeBody(0)) // large bodies roll segments: the fixture has several
	put(largeBody(1))
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	put("after snapshot-0")
	put(largeBody(2))
	put("after snapshot-1")
	if _, err := q.PutBatch(ctx, []Item{{Body: []byte("batch-0")}, {Body: []byte("batch-1"), Key: "k-batch"}}); err != nil {
		t.Fatal(err)
	}
	// The ready item with the smallest priority is leased and left open at
	// the close: recovery ends that lease.
	id := put("leased at close", WithPriority(-5))
	lease(id)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// The reserve is 1 MiB of zeros and the lock file empty: both are made
	// again by Open, so the fixture does without them.
	os.Remove(filepath.Join(dir, "RESERVE"))
	os.Remove(filepath.Join(dir, "LOCK"))
}

// TestOpenFormat1Fixture opens a copy of testdata/format1 and finds every
// item and dead letter, byte for byte, with the keys still held.
func TestOpenFormat1Fixture(t *testing.T) {
	checkFixture(t, "testdata/format1", format1Want())
}

func checkFixture(t *testing.T, fixture string, want fixtureWant) {
	t.Helper()
	if _, err := os.Stat(fixture); err != nil {
		t.Fatalf("fixture missing: %v", err)
	}
	dir := copyDir(t, fixture)
	clock := NewManualClock(fixtureTime.Add(2 * time.Hour))
	q, err := Open(dir, fixtureOptions(clock))
	if err != nil {
		t.Fatalf("Open %s: %v", fixture, err)
	}
	defer q.Close()
	if r := q.Stats().Recovery; r.LeasesExpired != 1 || r.SnapshotLSN == 0 || r.Replayed == 0 {
		t.Fatalf("recovery %+v: want one lease expired, a snapshot and records replayed", r)
	}

	dead := map[string]string{}
	for _, d := range q.DeadLetters(0) {
		dead[string(d.Body)] = d.LastError
	}
	if fmt.Sprint(dead) != fmt.Sprint(want.dead) {
		t.Fatalf("dead letters %q, want %q", dead, want.dead)
	}
	clock.Advance(time.Hour) // the backoff of the expired lease
	q.settle()
	waiting := map[string]string{}
	var order []string
	for {
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		waiting[string(m.Body)] = m.Key
		order = append(order, string(m.Body))
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(waiting) != fmt.Sprint(want.waiting) {
		got, wantBodies := sortedKeys(waiting), sortedKeys(want.waiting)
		t.Fatalf("waiting items\n%q\nwant\n%q", got, wantBodies)
	}
	if order[0] != "leased at close" || order[1] != "ready-2 priority -1" || order[len(order)-1] != "ready-1 priority 1" {
		t.Fatalf("delivered in the order %q, want the smallest priority first", order)
	}
	for _, k := range want.keys {
		if _, err := q.Put(context.Background(), []byte("again"), WithKey(k)); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("Put with key %q: %v, want ErrDuplicate (the window is a day)", k, err)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
