package walq

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// testdata/format2-fields and testdata/format2-fields-required were written
// by the build that made records extensible (state/fields.go), with
// WALQ_WRITE_FIXTURE=1 go test -run TestWriteFieldsFixtures: a directory
// of today's layout in which a newer walq then appended records that carry
// tagged fields, optional ones (even tags) in the first, and also one
// required field (an odd tag) in the second; and whose snapshot carries an
// optional section beside the index. testdata/format2-fields.want lists
// every item the first holds.

// fieldsFixtureItem is one item a fixture holds, as its .want file says.
type fieldsFixtureItem struct {
	Queue string
	ID    uint64
	State string
	Body  string
	Key   string
}

// TestWriteFieldsFixtures writes the two fixtures (only with
// WALQ_WRITE_FIXTURE=1; they are committed, and never written again).
func TestWriteFieldsFixtures(t *testing.T) {
	if os.Getenv("WALQ_WRITE_FIXTURE") != "1" {
		t.Skip("writes testdata/format2-fields*: WALQ_WRITE_FIXTURE=1")
	}
	for _, required := range []bool{false, true} {
		name := "testdata/format2-fields"
		if required {
			name += "-required"
		}
		dir := filepath.Join(t.TempDir(), "q")
		want := writeFieldsFixture(t, dir, required)
		must(t, os.RemoveAll(name))
		must(t, os.CopyFS(name, os.DirFS(dir)))
		os.Remove(filepath.Join(name, "RESERVE")) // Open makes it again: 1 MiB of nothing
		os.Remove(filepath.Join(name, "LOCK"))
		must(t, os.WriteFile(filepath.Join(name, "LOCK"), nil, 0o600))
		if !required {
			b, err := json.MarshalIndent(want, "", "  ")
			must(t, err)
			must(t, os.WriteFile(name+".want", append(b, '\n'), 0o644))
		}
	}
}

// writeFieldsFixture writes the directory and returns the items it holds.
func writeFieldsFixture(t *testing.T, dir string, required bool) []fieldsFixtureItem {
	clock := NewManualClock(fixtureTime)
	q, err := Open(dir, fixtureOptions(clock))
	must(t, err)
	jobs, err := q.OpenQueue("jobs", QueueOptions{MaxAttempts: 2})
	must(t, err)
	ctx := context.Background()
	put := func(h *Queue, body string, opts ...PutOption) uint64 {
		id, err := h.Put(ctx, []byte(body), opts...)
		must(t, err)
		return id
	}
	d1 := put(q, "d1", WithKey("kd1"))
	d2 := put(q, "d2", WithDelay(time.Hour))
	d3 := put(q, "d3")
	j1 := put(jobs, "j1")
	j2 := put(jobs, "j2", WithKey("kj2"))
	j3 := put(jobs, "j3")
	m, ok, err := jobs.TryGet()
	if err != nil || !ok || m.ID != j1 {
		t.Fatalf("TryGet jobs: %+v %v %v", m, ok, err)
	}
	must(t, jobs.DeadLetter(m.Receipt, errors.New("bad input")))
	m, ok, err = q.TryGet()
	if err != nil || !ok || m.ID != d1 {
		t.Fatalf("TryGet: %+v %v %v", m, ok, err)
	}
	must(t, q.Ack(m.Receipt))
	must(t, q.Compact())
	d4 := put(q, "d4")
	jobsID := jobs.rt.id
	jobsSettings := q.st.Queue(jobsID).Settings()
	must(t, q.Close())

	// What a newer walq appends: records with tagged fields.
	l, _, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Dir: dirIDOf(t, dir)}, 0, nil)
	must(t, err)
	str := func(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) } // a msgpack fixstr (under 32 bytes)
	at := clock.Now().UnixNano()
	appendRec := func(queue uint64, rec state.Record, fields state.Fields, items ...state.Fields) uint64 {
		body, err := state.EncodeWithFields(nil, rec, fields, items)
		must(t, err)
		lsn, c := l.AppendQueue(queue, rec.Type(), func(b []byte) []byte { return append(b, body...) })
		must(t, c.Wait())
		return lsn
	}
	// Tags from 2^40 up are never given to a feature (format-next.md):
	// the fixture stays a test of skipping and refusing whatever lands.
	const t0 = 1 << 40
	meta := state.Fields{{Tag: t0, Value: str("traceparent=00-4bf92f35")}}
	appendRec(0, &state.Put{Time: at, Items: []state.NewItem{
		{Body: []byte("f1"), Due: at},
		{Body: []byte("f2"), Due: at, Key: "kf2"},
	}}, state.Fields{{Tag: t0 + 2, Value: str("cursor")}}, meta, state.Fields{{Tag: t0 + 4, Value: []byte{0x92, 0x01, 0xc3}}})
	f1, f2 := d4+1, d4+2
	appendRec(jobsID, &state.Put{Time: at, Items: []state.NewItem{{Body: []byte("f3"), Due: at}}}, nil, meta)
	f3 := d4 + 3
	lease := appendRec(0, &state.Lease{Time: at, ID: d3, LeaseEnd: at + int64(time.Hour)}, meta)
	appendRec(0, &state.Ack{Time: at, Receipt: lease}, state.Fields{{Tag: t0 + 6, Value: str("outcome: ok")}})
	appendRec(jobsID, &state.SetQueue{Time: at, Settings: jobsSettings}, state.Fields{{Tag: t0 + 8, Value: []byte{0x05}}})
	if required {
		appendRec(0, &state.Put{Time: at, Items: []state.NewItem{{Body: []byte("r1"), Due: at}}}, nil, state.Fields{{Tag: t0 + 1, Value: []byte{0x10}}})
	}
	must(t, l.Close())

	// The snapshot gains an optional section beside the index.
	snaps, err := wal.ListSnapshots(dir)
	must(t, err)
	if len(snaps) != 1 {
		t.Fatalf("snapshots %+v", snaps)
	}
	snap, err := wal.ReadSnapshot(snaps[0].Path)
	must(t, err)
	file := wal.EncodeSnapshotSections(snap.Dir, snap.LSN,
		wal.Section{Kind: snap.Kind, Data: snap.Body},
		wal.Section{Kind: wal.SectionOptional + 1, Queue: jobsID, Data: []byte("history of a newer walq")})
	must(t, os.WriteFile(snaps[0].Path, file, 0o600))

	want := []fieldsFixtureItem{
		{"", d2, "delayed", "d2", ""},
		{"", d4, "ready", "d4", ""},
		{"", f1, "ready", "f1", ""},
		{"", f2, "ready", "f2", "kf2"},
		{"jobs", j1, "dead", "j1", ""},
		{"jobs", j2, "ready", "j2", "kj2"},
		{"jobs", j3, "ready", "j3", ""},
		{"jobs", f3, "ready", "f3", ""},
	}
	return want
}

// fixtureItems lists every item of every queue of q.
func fixtureItems(t *testing.T, q *Queue) []fieldsFixtureItem {
	t.Helper()
	infos, err := q.Queues()
	must(t, err)
	var out []fieldsFixtureItem
	for _, in := range infos {
		h := q
		if in.Name != "" {
			h, err = q.OpenQueue(in.Name, QueueOptions{})
			must(t, err)
		}
		page, err := h.ListItems(ListOptions{Limit: MaxListLimit})
		must(t, err)
		for _, it := range page.Items {
			body, err := h.ItemBody(it.ID)
			must(t, err)
			out = append(out, fieldsFixtureItem{in.Name, it.ID, it.State, string(body), it.Key})
		}
	}
	return out
}

// TestOpenFieldsFixture: a directory where a newer walq wrote records with
// optional tagged fields (on puts, their items, a lease, an ack, a
// queue's settings) and an optional snapshot section opens with every
// item intact: the fields and the section are skipped, the keys they came
// with are held, and the queue goes on (a compaction, a reopen).
func TestOpenFieldsFixture(t *testing.T) {
	var want []fieldsFixtureItem
	b, err := os.ReadFile("testdata/format2-fields.want")
	must(t, err)
	must(t, json.Unmarshal(b, &want))
	dir := copyDir(t, "testdata/format2-fields")
	clock := NewManualClock(fixtureTime.Add(time.Minute))
	q, err := Open(dir, fixtureOptions(clock))
	must(t, err)
	if r := q.Stats().Recovery; r.SnapshotLSN == 0 || r.Replayed < 5 {
		t.Fatalf("recovery %+v: want the snapshot and the records after it", r)
	}
	if got := fixtureItems(t, q); !slices.Equal(got, want) {
		t.Fatalf("items\n got %+v\nwant %+v", got, want)
	}
	if _, err := q.Put(context.Background(), []byte("again"), WithKey("kf2")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("a put with the key a fielded record brought: %v, want ErrDuplicate", err)
	}
	must(t, q.Compact())
	must(t, q.Close())
	q, err = Open(dir, fixtureOptions(clock))
	must(t, err)
	defer q.Close()
	if got := fixtureItems(t, q); !slices.Equal(got, want) {
		t.Fatalf("after a compaction and a reopen\n got %+v\nwant %+v", got, want)
	}
}

// TestFieldsFixtureRequiredRefused: the same directory with one record
// that carries a required field this build does not know: Open refuses it
// with ErrNewerFormat, naming the record and the tag, and changes nothing.
func TestFieldsFixtureRequiredRefused(t *testing.T) {
	dir := copyDir(t, "testdata/format2-fields-required")
	before := dirListing(t, dir)
	_, err := Open(dir, fixtureOptions(NewManualClock(fixtureTime.Add(time.Minute))))
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrNewerFormat", err)
	}
	if after := dirListing(t, dir); after != before {
		t.Fatalf("the refused open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}
