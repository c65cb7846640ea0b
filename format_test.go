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

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Every on-disk format that has landed keeps a queue directory written by it
// under testdata/, and today's code must open it with every item intact. A
// fixture is never regenerated: a format change is a new version with a new
// fixture beside the old ones.
//
// testdata/format1 was written by the build of "trust at the edges (1 of
// 2)" (4fb10c1) with WALQ_WRITE_FIXTURE=testdata/format1 go test -run
// TestWriteFormat1Fixture: tidwall/wal segments, log record envelope
// version 1, snapshot version 1, no marker. Opening it carries it forward.
//
// testdata/format2 was written by the build that introduced format 2 with
// WALQ_WRITE_FIXTURE=testdata/format2 go test -run TestWriteFixture: marker
// version 2, segments of MAC'd frames, snapshot version 2. Its body that
// holds a copy of a real frame of the same queue is kept beside it, in
// testdata/format2.frame, since the segment it was copied from is gone.

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
	// expired is how many leases the open must find open; 1 in a fixture,
	// 0 once a first open ended the lease.
	expired int
	// noReplay: the open may replay nothing (a snapshot covers the log).
	noReplay bool
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
		keys:    []string{"k-ready", "k-delayed", "k-batch", "k-acked"},
		expired: 1,
	}
}

// TestWriteFixture writes a fixture of the current format when
// WALQ_WRITE_FIXTURE names the directory; it is how the fixtures were made
// (testdata/format1 by the build of format 1, testdata/format2 by the build
// of format 2), kept so that the history of every item in them can be read.
func TestWriteFixture(t *testing.T) {
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
	// A body holding a copy of a real frame of this queue, with its MAC.
	frame := firstFrame(t, dir)
	must(t, os.WriteFile(filepath.Clean(dir)+".frame", frame, 0o644))
	put(string(append(append([]byte("frame:"), frame...), []byte("tail")...)))
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
	// The reserve is 1 MiB of zeros, made again by Open, so the fixture
	// does without it. The lock file stays: every queue directory of
	// format 2 has one, and 82292fa, which refuses the directory, would
	// create one where there is none.
	os.Remove(filepath.Join(dir, "RESERVE"))
}

// firstFrame copies the first frame of the oldest segment in a queue
// directory.
func firstFrame(t *testing.T, dir string) []byte {
	t.Helper()
	segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	data, err := os.ReadFile(segs[0].Path)
	must(t, err)
	h := data[wal.SegmentHeaderSize:]
	if len(h) < wal.FrameHeaderSize {
		t.Fatalf("no frame in %s", segs[0].Name)
	}
	n := wal.FrameHeaderSize + int(binary.BigEndian.Uint32(h[24:]))
	return append([]byte(nil), h[:n]...)
}

// format2Want is what testdata/format2 holds: the same items as format 1,
// with a copy of a real format-2 frame in place of the format-1 record.
func format2Want(t *testing.T) fixtureWant {
	w := format1Want()
	frame, err := os.ReadFile("testdata/format2.frame")
	must(t, err)
	delete(w.waiting, string(append(append([]byte("frame:"), fixtureFrame()...), []byte("tail")...)))
	w.waiting[string(append(append([]byte("frame:"), frame...), []byte("tail")...))] = ""
	return w
}

// TestOpenFormat2Fixture opens a copy of testdata/format2.
func TestOpenFormat2Fixture(t *testing.T) {
	r := checkFixture(t, "testdata/format2", format2Want(t))
	if r.Migration != nil {
		t.Fatalf("format 2 migrated: %+v", r.Migration)
	}
}

// TestFormat1Migration: opening testdata/format1 carries it forward to
// format 2 once: a marker, a format-2 snapshot and log, no format-1 file
// left; the next open finds a directory of format 2 with every item.
func TestFormat1Migration(t *testing.T) {
	dir := copyDir(t, "testdata/format1")
	q, err := Open(dir, fixtureOptions(NewManualClock(fixtureTime.Add(2*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	m := q.Stats().Recovery.Migration
	must(t, q.Close())
	if m == nil || m.FromVersion != 1 || m.Replayed == 0 || m.Removed < 4 {
		t.Fatalf("migration %+v", m)
	}
	entries := listNames(t, dir)
	for _, name := range entries {
		if k := layout.ClassifyLog(filepath.Base(name)); filepath.Dir(name) == "log" && k == layout.Format1 {
			t.Fatalf("format-1 file %s left after the migration: %q", name, entries)
		}
	}
	if id := dirIDOf(t, dir); id.IsZero() {
		t.Fatal("no directory id")
	}
	w := format1Want()
	w.expired = 0
	w.noReplay = true // the compaction after the bodies went into the log wrote a snapshot of all
	r := checkFixture(t, dir, w)
	if r.Migration != nil {
		t.Fatalf("migrated twice: %+v", r.Migration)
	}
}

// listNames lists a directory tree, relative names.
func listNames(t *testing.T, dir string) []string {
	var out []string
	must(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	}))
	return out
}

// TestOpenFormat1Fixture opens a copy of testdata/format1 and finds every
// item and dead letter, byte for byte, with the keys still held.
func TestOpenFormat1Fixture(t *testing.T) {
	r := checkFixture(t, "testdata/format1", format1Want())
	if r.Migration == nil || r.Migration.Replayed == 0 {
		t.Fatalf("format 1 opened without a migration that replayed records: %+v", r.Migration)
	}
}

func checkFixture(t *testing.T, fixture string, want fixtureWant) RecoveryStats {
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
	r := q.Stats().Recovery
	if r.LeasesExpired != want.expired || r.SnapshotLSN == 0 || (r.Replayed == 0 && r.Migration == nil && !want.noReplay) {
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
	return r
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestFormat1MigrationInterrupted: a migration stopped after it wrote the
// format-2 snapshot and the empty format-2 segment, before the marker (a
// crash there), is done again from the start by the next Open, which finds
// every item.
func TestFormat1MigrationInterrupted(t *testing.T) {
	dir := copyDir(t, "testdata/format1")
	// What the interrupted attempt left: a format-2 snapshot of its own
	// directory ID at the format-1 log's last LSN, and an empty segment.
	st, err := rebuild.StateAt(dir, wal.DirID{}, 28, 0, nil)
	must(t, err)
	body, err := st.MarshalSnapshotInline()
	must(t, err)
	other := wal.DirID{9, 9, 9}
	_, err = wal.WriteSnapshotSection(nil, dir, other, st.LastLSN(), wal.SectionDirState, body, 0o600)
	must(t, err)
	seg := wal.EncodeSegment(other, [16]byte{1}, st.LastLSN()+1, nil)
	must(t, os.WriteFile(filepath.Join(dir, "log", wal.SegmentName(st.LastLSN()+1)), seg, 0o600))
	r := checkFixture(t, dir, format1Want())
	if r.Migration == nil || r.Migration.LastLSN <= st.LastLSN() || r.Migration.Replayed == 0 {
		t.Fatalf("migration %+v", r.Migration)
	}
}
