package walq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// testdata/format2-index was written by the build of "state: items as
// 80-byte pointer-free entries in the ID index's chunks, heaps of IDs,
// leases apart" (3ce1cfd) with WALQ_WRITE_INDEX_FIXTURE=testdata/format2-index
// go test -run TestWriteIndexFixture: format 2 with bodies on disk. Its
// snapshot is an index (section kind 3, snapshot body version 3) that names
// each body by record LSN, offset, length and CRC; the compaction that wrote
// it kept the dense segments in bodies/ (named <first>-<last>.seg) and
// copied the few live bodies of a sparse one forward in a relocate record,
// and records after the snapshot replay. It holds the default queue and
// the named queues jobs (a key window) and bulk (paused): ready, delayed
// and dead items, a lease open at the close, a redriven item, held and
// released keys, deadlines, and bodies of 0 bytes to 10 KiB, some of them
// copies of the directory's own frames and lookalike records and segments.
// The frames one body copies are kept beside it, in
// testdata/format2-index.frame, since the body is all that says what they
// were.
//
// testdata/format2-index4 was written the same way by the build that
// writes snapshots in pieces (snapshot body version 4 in section kind 4,
// whose keys list holds the released keys only).

// indexFixtureOptions are the named queues' options in the index fixture.
var indexFixtureOptions = map[string]QueueOptions{
	"jobs": {Visibility: time.Minute, MaxAttempts: 3, KeyWindow: 6 * time.Hour},
	"bulk": {},
}

// indexFixtureSalt is the salt of the lookalike segment one body of the
// index fixture is made of.
var indexFixtureSalt = [16]byte{'l', 'o', 'o', 'k', 'a', 'l', 'i', 'k', 'e'}

// filled returns a body of n bytes that starts with name.
func filled(name string, n int) []byte {
	b := []byte(name + ":")
	for len(b) < n {
		b = append(b, byte('a'+len(b)%26))
	}
	return b[:n]
}

// lookalikeSegment is a whole format-2 segment of the directory id, with a
// salt of its own, whose frames hold real records (a put of a keyed item,
// a lease, an ack) at the LSNs from first on: a body that looks like the
// directory's own log in every field but the MAC.
func lookalikeSegment(id wal.DirID, first uint64) []byte {
	now := fixtureTime.UnixNano()
	var recs []wal.Record
	for _, rec := range []state.Record{
		&state.Put{Time: now, Items: []state.NewItem{{Body: []byte("forged put"), Due: now, Priority: -9, Key: "k-forged"}}},
		&state.Lease{Time: now, ID: first, LeaseEnd: now + int64(time.Minute)},
		&state.Ack{Time: now, Receipt: first + 1},
	} {
		body, err := state.Encode(nil, rec)
		if err != nil {
			panic(err)
		}
		recs = append(recs, wal.Record{Type: rec.Type(), Body: body})
	}
	return wal.EncodeSegment(id, indexFixtureSalt, first, []wal.Batch{{Watermark: first + 2, Records: recs}})
}

// TestWriteIndexFixture writes the index fixture when
// WALQ_WRITE_INDEX_FIXTURE names its directory.
func TestWriteIndexFixture(t *testing.T) {
	dir := os.Getenv("WALQ_WRITE_INDEX_FIXTURE")
	if dir == "" {
		t.Skip("writes a fixture only when WALQ_WRITE_INDEX_FIXTURE names its directory")
	}
	clock := NewManualClock(fixtureTime)
	opts := fixtureOptions(clock)
	opts.noCloseSnapshot = true
	q, err := Open(dir, opts)
	must(t, err)
	ctx := context.Background()
	open := func(name string) *Queue {
		h, err := q.OpenQueue(name, indexFixtureOptions[name])
		must(t, err)
		return h
	}
	ids, bodies := map[string]uint64{}, map[string][]byte{}
	put := func(h *Queue, name string, body []byte, opts ...PutOption) uint64 {
		t.Helper()
		id, err := h.Put(ctx, body, opts...)
		must(t, err)
		ids[name], bodies[name] = id, body
		clock.Advance(time.Millisecond)
		return id
	}
	lease := func(h *Queue, want uint64) Message {
		t.Helper()
		m, ok, err := h.TryGet()
		if err != nil || !ok || m.ID != want {
			t.Fatalf("TryGet on %q = %+v, %v, %v; want item %d", h.Name(), m.ID, ok, err, want)
		}
		return m
	}
	jobs, bulk := open("jobs"), open("bulk")
	must(t, bulk.Pause(time.Time{}))

	// The dense part of the log: bodies that stay, a segment's worth.
	put(bulk, "bulk-10k", filled("bulk-10k", 10<<10))
	put(bulk, "bulk-0", filled("bulk-0", 1200), WithPriority(-1)) // acked after the compaction
	put(bulk, "bulk-1", filled("bulk-1", 1200))
	put(bulk, "bulk-2", filled("bulk-2", 1200))

	// Keys: one released by an ack (inside the window when opened), one
	// held by its item.
	must(t, jobs.Ack(lease(jobs, put(jobs, "jobs-acked", []byte("acked, key released"), WithKey("k-released"))).Receipt))
	put(jobs, "jobs-keyed", []byte("keyed, key held"), WithKey("k-held"))

	// A dead letter by a nack, then a dead-letter call.
	dl := put(q, "dead", []byte("nacked, then dead-lettered"), WithKey("k-dead"))
	must(t, q.Nack(lease(q, dl).Receipt, errors.New("temporary: 503")))
	clock.Advance(time.Minute)
	must(t, q.DeadLetter(lease(q, dl).Receipt, errors.New("permanent: bad payload")))

	// A dead letter of jobs, nacked out of its three attempts.
	out := put(jobs, "jobs-dead", []byte("nacked out of attempts"), WithPriority(-1))
	for _, e := range []string{"try 1 failed", "try 2 failed", "try 3 failed"} {
		must(t, jobs.Nack(lease(jobs, out).Receipt, errors.New(e)))
		clock.Advance(time.Minute)
	}

	// To be redriven after the compaction.
	rd := put(q, "redriven", []byte("redriven after two deliveries"))
	must(t, q.Nack(lease(q, rd).Receipt, errors.New("first failure")))
	clock.Advance(time.Minute)
	must(t, q.DeadLetter(lease(q, rd).Receipt, errors.New("to redrive")))

	// The sparse part: churn acked around one item that stays.
	churn := func(n int) {
		for i := range n {
			id := put(q, "churn", filled("churn", 300+i), WithPriority(-2))
			must(t, q.Ack(lease(q, id).Receipt))
		}
	}
	churn(6)
	put(q, "sparse", []byte("a small body among acked ones"), WithPriority(1))
	churn(6)

	// Bodies of several sizes and bodies that look like records.
	put(q, "empty", nil)
	put(q, "one-byte", []byte{0})
	put(q, "binary", []byte("\x00\x01\xff\xfe binary\x00"))
	put(q, "large", filled("large", 3000))
	frames := firstFrames(t, dir)
	must(t, os.WriteFile(filepath.Clean(dir)+".frame", frames, 0o644))
	put(q, "frames", append(append([]byte("frames:"), frames...), "tail"...))
	put(q, "format1-record", append(append([]byte("record:"), fixtureFrame()...), "tail"...))
	next := q.Stats().LastLSN + 1
	put(q, "lookalike", lookalikeSegment(dirIDOf(t, dir), next))

	// Deadlines: one far off, one that passes after the open, soon after
	// its delayed item is due.
	put(jobs, "deadline-far", []byte("deadline in two days"), WithDeadline(fixtureTime.Add(48*time.Hour)))
	put(jobs, "deadline-passes", []byte("discarded at its deadline"), WithDelay(140*time.Minute), WithDeadline(fixtureTime.Add(150*time.Minute)))
	churn(6)

	must(t, q.Compact()) // an index snapshot, a relocate record, segments kept

	// After the compaction: records that replay.
	must(t, q.Redrive(rd))
	put(q, "delayed", []byte("delayed past the open"), WithDelay(3*time.Hour), WithPriority(2))
	put(jobs, "jobs-after", filled("jobs-after", 5000), WithKey("k-after"))
	put(q, "after-10k", filled("after-10k", 10<<10))
	must(t, bulk.Resume())
	must(t, bulk.Ack(lease(bulk, ids["bulk-0"]).Receipt)) // acked: its body lies in a kept segment
	must(t, bulk.Pause(time.Time{}))
	lease(q, put(q, "leased", []byte("leased at close"), WithPriority(-5)))
	must(t, q.Close())
	os.Remove(filepath.Join(dir, "RESERVE"))
	// What TestOpenIndexFixture expects is what was put.
	for _, w := range indexFixtureItems(frames, dirIDOf(t, dir)) {
		if ids[w.name] != w.id || string(bodies[w.name]) != string(w.body) {
			t.Errorf("%s: item %d of %d bytes, the table says item %d of %d bytes", w.name, ids[w.name], len(bodies[w.name]), w.id, len(w.body))
		}
	}
}

// firstFrames copies the first frames of the oldest segment in a queue
// directory, back to back, up to 1 KiB of them.
func firstFrames(t *testing.T, dir string) []byte {
	t.Helper()
	segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	data, err := os.ReadFile(segs[0].Path)
	must(t, err)
	var out []byte
	for h := data[wal.SegmentHeaderSize:]; len(h) >= wal.FrameHeaderSize; {
		n := wal.FrameHeaderSize + int(binary.BigEndian.Uint32(h[24:]))
		if len(out)+n > 1024 {
			break
		}
		out, h = append(out, h[:n]...), h[n:]
	}
	return out
}

// indexItem is one item of the index fixture as a copy of it is opened at
// fixtureTime plus two hours, after recovery ended the lease open at the
// close.
type indexItem struct {
	name                 string // what the writer calls it
	id                   uint64
	queue                string
	body                 []byte
	status               state.Status
	delayed              bool // waiting and not yet due when opened
	attempts, deliveries int32
	priority             int64
	key                  string
	deadline             time.Time
	lastError            string
	history              []string // how and error of each attempt kept, oldest first
	// where its body lies: "kept" (a segment in bodies/), "relocated" (the
	// relocate record after the snapshot) or "log" (a record of the log).
	where string
}

// indexFixtureItems are the stored items of testdata/format2-index, whose
// directory ID is id; frames is testdata/format2-index.frame.
func indexFixtureItems(frames []byte, id wal.DirID) []indexItem {
	return []indexItem{
		{name: "bulk-10k", id: 1, queue: "bulk", body: filled("bulk-10k", 10<<10), status: state.Waiting, where: "kept"},
		{name: "bulk-1", id: 3, queue: "bulk", body: filled("bulk-1", 1200), status: state.Waiting, where: "kept"},
		{name: "bulk-2", id: 4, queue: "bulk", body: filled("bulk-2", 1200), status: state.Waiting, where: "kept"},
		{name: "jobs-keyed", id: 6, queue: "jobs", body: []byte("keyed, key held"), status: state.Waiting, key: "k-held", where: "relocated"},
		{name: "dead", id: 7, queue: "", body: []byte("nacked, then dead-lettered"), status: state.Dead, attempts: 2, deliveries: 2, key: "k-dead",
			lastError: "permanent: bad payload", history: []string{"nack: temporary: 503", "deadletter: permanent: bad payload"}, where: "relocated"},
		{name: "jobs-dead", id: 8, queue: "jobs", body: []byte("nacked out of attempts"), status: state.Dead, attempts: 3, deliveries: 3, priority: -1,
			lastError: "try 3 failed", history: []string{"nack: try 1 failed", "nack: try 2 failed", "nack: try 3 failed"}, where: "relocated"},
		{name: "redriven", id: 9, queue: "", body: []byte("redriven after two deliveries"), status: state.Waiting, attempts: 0, deliveries: 2,
			lastError: "to redrive", history: []string{"nack: first failure", "deadletter: to redrive"}, where: "relocated"},
		{name: "sparse", id: 16, queue: "", body: []byte("a small body among acked ones"), status: state.Waiting, priority: 1, where: "relocated"},
		{name: "empty", id: 23, queue: "", body: []byte{}, status: state.Waiting, where: "none"},
		{name: "one-byte", id: 24, queue: "", body: []byte{0}, status: state.Waiting, where: "kept"},
		{name: "binary", id: 25, queue: "", body: []byte("\x00\x01\xff\xfe binary\x00"), status: state.Waiting, where: "kept"},
		{name: "large", id: 26, queue: "", body: filled("large", 3000), status: state.Waiting, where: "kept"},
		{name: "frames", id: 27, queue: "", body: append(append([]byte("frames:"), frames...), "tail"...), status: state.Waiting, where: "kept"},
		{name: "format1-record", id: 28, queue: "", body: append(append([]byte("record:"), fixtureFrame()...), "tail"...), status: state.Waiting, where: "kept"},
		// A lookalike of the directory's own log at the LSN of its own put.
		{name: "lookalike", id: 29, queue: "", body: lookalikeSegment(id, 72), status: state.Waiting, where: "kept"},
		{name: "deadline-far", id: 30, queue: "jobs", body: []byte("deadline in two days"), status: state.Waiting, deadline: fixtureTime.Add(48 * time.Hour), where: "log"},
		{name: "deadline-passes", id: 31, queue: "jobs", body: []byte("discarded at its deadline"), status: state.Waiting, delayed: true, deadline: fixtureTime.Add(150 * time.Minute), where: "log"},
		{name: "delayed", id: 38, queue: "", body: []byte("delayed past the open"), status: state.Waiting, delayed: true, priority: 2, where: "log"},
		{name: "jobs-after", id: 39, queue: "jobs", body: filled("jobs-after", 5000), status: state.Waiting, key: "k-after", where: "log"},
		{name: "after-10k", id: 40, queue: "", body: filled("after-10k", 10<<10), status: state.Waiting, where: "log"},
		{name: "leased", id: 41, queue: "", body: []byte("leased at close"), status: state.Waiting, delayed: true, attempts: 1, deliveries: 1, priority: -5,
			lastError: "lease open at recovery", history: []string{"expire: lease open at recovery"}, where: "log"},
	}
}

// TestOpenIndexFixture opens a copy of testdata/format2-index and finds
// every item where the fixture left it, byte for byte, with its counts,
// history, key and deadline; the lease open at the close ends at the open
// and the item comes back; the keys are held; and once everything is
// drained nothing else comes out.
func TestOpenIndexFixture(t *testing.T) {
	t.Run("version 3", func(t *testing.T) { openIndexFixture(t, "testdata/format2-index", wal.SectionDirIndex, 3) })
	t.Run("version 4", func(t *testing.T) { openIndexFixture(t, "testdata/format2-index4", wal.SectionDirIndex4, 4) })
}

func openIndexFixture(t *testing.T, fixture string, kind byte, version int) {
	if _, err := os.Stat(fixture); err != nil {
		t.Fatalf("fixture missing: %v", err)
	}
	// The layout it was written for: an index snapshot (section kind 3,
	// body version 3), kept segments, a relocate record after the snapshot.
	snaps, err := wal.ListSnapshots(fixture)
	must(t, err)
	if len(snaps) != 1 {
		t.Fatalf("snapshots %+v, want one", snaps)
	}
	snap, err := wal.ReadSnapshot(snaps[0].Path)
	must(t, err)
	if snap.Kind != kind || state.SnapshotVersion(snap.Body) != version {
		t.Fatalf("snapshot of section kind %d, body version %d; want %d and %d", snap.Kind, state.SnapshotVersion(snap.Body), kind, version)
	}
	keptNames, err := filepath.Glob(filepath.Join(fixture, "bodies", "*-*.seg"))
	must(t, err)
	if len(keptNames) < 2 {
		t.Fatalf("kept segments %q, want several", keptNames)
	}
	var relocateLSN uint64
	relocated := map[uint64][]byte{}
	_, err = wal.Scan(filepath.Join(fixture, "log"), snap.LSN+1, 0, func(p wal.Position, r wal.Record) error {
		if r.Type != state.TypeRelocate {
			return nil
		}
		rec, err := state.Decode(r.Type, r.Body)
		if err != nil {
			return err
		}
		relocateLSN = p.Index
		for _, it := range rec.(*state.Relocate).Items {
			relocated[it.ID] = it.Body
		}
		return nil
	})
	must(t, err)
	if relocateLSN == 0 {
		t.Fatal("no relocate record after the snapshot")
	}

	frames, err := os.ReadFile(fixture + ".frame")
	must(t, err)
	items := indexFixtureItems(frames, dirIDOf(t, fixture))
	byID := map[uint64]indexItem{}
	for _, w := range items {
		byID[w.id] = w
		if w.where == "relocated" && string(relocated[w.id]) != string(w.body) {
			t.Errorf("item %d: relocated body %q, want %q", w.id, relocated[w.id], w.body)
		}
		delete(relocated, w.id)
	}
	if len(relocated) != 0 {
		t.Errorf("the relocate record copies bodies of items %v that the fixture does not hold", relocated)
	}

	dir := copyDir(t, fixture)
	clock := NewManualClock(fixtureTime.Add(2 * time.Hour))
	q, err := Open(dir, fixtureOptions(clock))
	if err != nil {
		t.Fatalf("Open %s: %v", fixture, err)
	}
	defer q.Close()
	r := q.Stats().Recovery
	if r.SnapshotLSN != snap.LSN || r.Replayed == 0 || r.LeasesExpired != 1 || r.Migration != nil || r.BodiesRelocated != 0 || r.TailCutBytes != 0 {
		t.Fatalf("recovery %+v: want the snapshot at %d, records replayed after it, one lease expired", r, snap.LSN)
	}
	infos, err := q.Queues()
	must(t, err)
	queueID := map[string]uint64{}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
		queueID[in.Name] = in.ID
	}
	if got := strings.Join(names, ","); got != ",jobs,bulk" {
		t.Fatalf("queues %q", got)
	}
	if in := infos[1]; in.Options.Visibility != time.Minute || in.Options.MaxAttempts != 3 || in.Options.KeyWindow != 6*time.Hour {
		t.Fatalf("jobs' settings %+v", in.Options)
	}
	if in := infos[2]; !in.Paused || !in.PausedUntil.IsZero() {
		t.Fatalf("bulk %+v: want paused until resumed", in)
	}
	handles := map[string]*Queue{"": q}
	for _, name := range []string{"jobs", "bulk"} {
		handles[name] = mustOpenQueue(t, q, name, indexFixtureOptions[name])
	}

	// Every stored item, as the state holds it.
	kept, err := q.log.Kept()
	must(t, err)
	firstLog := q.log.Segments()[0].First
	inKept := func(lsn uint64) bool {
		for _, k := range kept {
			if k.First <= lsn && lsn <= k.Last {
				return true
			}
		}
		return false
	}
	q.mu.Lock()
	if n := q.st.TotalLen(); n != len(items) {
		t.Errorf("%d items stored, want %d", n, len(items))
	}
	for _, w := range items {
		it := q.st.Item(w.id)
		if it == nil {
			t.Errorf("item %d missing", w.id)
			continue
		}
		var hist []string
		for _, a := range it.History() {
			hist = append(hist, state.TypeName(a.How)+": "+a.Error)
		}
		var deadline int64
		if !w.deadline.IsZero() {
			deadline = w.deadline.UnixNano()
		}
		now := clock.Now().UnixNano()
		if it.Queue != queueID[w.queue] || it.Status != w.status || (it.Status == state.Waiting && (it.Due > now) != w.delayed) ||
			it.Attempts != w.attempts || it.Deliveries != w.deliveries || it.Priority != w.priority || it.Key() != w.key ||
			it.Deadline() != deadline || it.LastError() != w.lastError || strings.Join(hist, "|") != strings.Join(w.history, "|") ||
			it.Body.Len != uint32(len(w.body)) {
			t.Errorf("item %d: queue %d, %v, due %v, attempts %d, deliveries %d, priority %d, key %q, deadline %d, last error %q, history %q, %d bytes;\nwant %+v",
				w.id, it.Queue, it.Status, time.Unix(0, it.Due).UTC(), it.Attempts, it.Deliveries, it.Priority, it.Key(), it.Deadline(), it.LastError(), hist, it.Body.Len, w)
		}
		var where string
		switch lsn := it.Body.LSN; {
		case it.Body.Len == 0:
			where = "none"
		case lsn == relocateLSN:
			where = "relocated"
		case inKept(lsn):
			where = "kept"
		case lsn >= firstLog:
			where = "log"
		}
		if where != w.where {
			t.Errorf("item %d: body at LSN %d (%s), want it %s", w.id, it.Body.LSN, where, w.where)
		}
	}
	q.mu.Unlock()

	// Each queue's figures, once the due items are promoted to ready (as a
	// Get would promote them; Stats counts an item due but not yet
	// promoted as delayed, past due).
	promote := func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, qs := range q.st.Queues() {
			qs.Promote(q.qt.now())
		}
	}
	promote()
	for name, h := range handles {
		var want Stats
		for _, w := range items {
			if w.queue != name {
				continue
			}
			want.Items++
			want.Bytes += int64(len(w.body))
			switch {
			case w.status == state.Dead:
				want.Dead++
			case w.status == state.Leased:
				want.Leased++
			case w.delayed:
				want.Delayed++
			default:
				want.Ready++
			}
		}
		counters := map[string][8]uint64{ // put, delivered, acked, nacked, expired, dead-lettered, discarded, redriven
			"":     {31, 23, 18, 2, 1, 2, 0, 1},
			"jobs": {6, 4, 1, 3, 0, 1, 0, 0},
			"bulk": {4, 1, 1, 0, 0, 0, 0, 0},
		}[name]
		keys := map[string]int{"": 1, "jobs": 3, "bulk": 0}[name]
		s := h.Stats()
		if s.Items != want.Items || s.Bytes != want.Bytes || s.Ready != want.Ready || s.Delayed != want.Delayed || s.Leased != want.Leased || s.Dead != want.Dead || s.Keys != keys ||
			[8]uint64{s.Put, s.Delivered, s.Acked, s.Nacked, s.Expired, s.DeadLettered, s.Discarded, s.Redriven} != counters {
			t.Errorf("queue %q: stats %+v;\nwant items %d, %d bytes, ready %d, delayed %d, leased %d, dead %d, keys %d, counters %v",
				name, s, want.Items, want.Bytes, want.Ready, want.Delayed, want.Leased, want.Dead, keys, counters)
		}
	}
	if s := q.DirStats(); s.KeptSegments != len(keptNames) {
		t.Errorf("%d kept segments in Stats, %d in bodies/", s.KeptSegments, len(keptNames))
	}

	// The dead letters, with their histories.
	for name, h := range handles {
		var want []indexItem
		for _, w := range items {
			if w.queue == name && w.status == state.Dead {
				want = append(want, w)
			}
		}
		got := h.DeadLetters(0)
		if len(got) != len(want) {
			t.Fatalf("queue %q: %d dead letters, want %d", name, len(got), len(want))
		}
		for i, d := range got {
			w := want[i]
			var hist []string
			for _, a := range d.History {
				hist = append(hist, a.How+": "+a.Error)
			}
			if d.ID != w.id || string(d.Body) != string(w.body) || d.BodyError != "" || d.Key != w.key || d.Attempts != int(w.attempts) ||
				d.Deliveries != int(w.deliveries) || d.LastError != w.lastError || strings.Join(hist, "|") != strings.Join(w.history, "|") {
				t.Errorf("queue %q: dead letter %+v, want %+v", name, d, w)
			}
		}
	}

	// The keys: held by stored items, and released but inside the window.
	ctx := context.Background()
	for _, k := range []struct {
		queue, key string
		holder     uint64
	}{{"jobs", "k-held", 6}, {"jobs", "k-after", 39}, {"jobs", "k-released", 5}, {"", "k-dead", 7}} {
		id, err := handles[k.queue].Put(ctx, []byte("again"), WithKey(k.key))
		if !errors.Is(err, ErrDuplicate) || id != k.holder {
			t.Errorf("queue %q: Put with key %q = %d, %v; want ErrDuplicate and item %d", k.queue, k.key, id, err, k.holder)
		}
	}

	// Drain: every delivery is checked against the item it is of.
	delivered := map[uint64]int{}
	drain := func(h *Queue) []uint64 {
		t.Helper()
		var ids []uint64
		for {
			m, ok, err := h.TryGet()
			must(t, err)
			if !ok {
				return ids
			}
			w, known := byID[m.ID]
			if !known {
				t.Fatalf("queue %q delivered item %d %q, which the fixture does not hold", h.Name(), m.ID, m.Body)
			}
			// A dead letter is delivered once redriven: its attempts start over.
			attempts := w.attempts
			if w.status == state.Dead {
				attempts = 0
			}
			if m.Queue != w.queue || string(m.Body) != string(w.body) || m.Attempt != int(attempts)+1 ||
				m.Deliveries != int(w.deliveries)+1 || m.Priority != int(w.priority) || m.Key != w.key {
				t.Errorf("delivered %d: queue %q, %d bytes, attempt %d, deliveries %d, priority %d, key %q; want %+v",
					m.ID, m.Queue, len(m.Body), m.Attempt, m.Deliveries, m.Priority, m.Key, w)
			}
			delivered[m.ID]++
			ids = append(ids, m.ID)
			must(t, h.Ack(m.Receipt))
		}
	}
	advanceTo := func(at time.Time) { clock.Advance(at.Sub(clock.Now())) }
	wantIDs := func(ids ...uint64) []uint64 { return ids }
	check := func(what string, got, want []uint64) {
		t.Helper()
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: delivered %v, want %v", what, got, want)
		}
	}
	check("ready at the open", append(drain(q), drain(handles["jobs"])...), wantIDs(6, 9, 16, 23, 24, 25, 26, 27, 28, 29, 30, 39, 40))
	if got := drain(handles["bulk"]); len(got) != 0 {
		t.Fatalf("the paused queue delivered %v", got)
	}
	clock.Advance(2 * time.Minute) // the backoff after the expired lease
	q.settle()
	check("after the backoff", drain(q), wantIDs(41))
	advanceTo(fixtureTime.Add(146 * time.Minute)) // item 31 due, its deadline not yet passed
	q.settle()
	promote()
	if s := handles["jobs"].Stats(); s.Ready != 1 || s.Discarded != 0 {
		t.Fatalf("jobs at 2h26m: %+v, want item 31 ready", s)
	}
	advanceTo(fixtureTime.Add(151 * time.Minute)) // its deadline passed
	q.settle()
	if s := handles["jobs"].Stats(); s.Ready != 0 || s.Discarded != 1 || s.Items != 1 {
		t.Fatalf("jobs at 2h31m: %+v, want item 31 discarded", s)
	}
	check("discarded at its deadline", drain(handles["jobs"]), nil)
	advanceTo(fixtureTime.Add(190 * time.Minute))
	q.settle()
	check("delayed past the open", drain(q), wantIDs(38))
	must(t, handles["bulk"].Resume())
	check("bulk once resumed", drain(handles["bulk"]), wantIDs(1, 3, 4))
	must(t, q.Redrive(7))
	must(t, handles["jobs"].Redrive(8))
	check("dead letters redriven", append(drain(q), drain(handles["jobs"])...), wantIDs(7, 8))

	for _, w := range items {
		if want := map[bool]int{true: 0, false: 1}[w.id == 31]; delivered[w.id] != want {
			t.Errorf("item %d delivered %d times, want %d", w.id, delivered[w.id], want)
		}
	}
	clock.Advance(24 * time.Hour)
	q.settle()
	for name, h := range handles {
		if got := drain(h); len(got) != 0 {
			t.Errorf("queue %q delivered %v after the drain", name, got)
		}
	}
	if s := q.DirStats(); s.Items != 0 || s.Dead != 0 {
		t.Errorf("after the drain: %+v", s)
	}
}
