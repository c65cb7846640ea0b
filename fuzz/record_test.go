package fuzz

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// FuzzRecord feeds bytes to the record decoders the way replay does:
// wal.DecodeRecord on the entry, then state.Decode on its body, then
// state.Apply on a small state with an item in every status. It checks
//
//   - the envelope decoder never panics, returns ErrCorrupt for every
//     refusal, and never accepts an entry whose CRC does not match;
//   - an accepted entry re-encodes to the same bytes, and any single bit
//     flipped in it is refused;
//   - the body decoder never panics, and what it accepts re-encodes to a
//     body that decodes to the same record;
//   - ApplyTo never panics, leaves the state exactly as it was when it
//     refuses a record, and keeps the state consistent when it accepts one;
//     the record is tried in the log of each queue of the fixture (the
//     default queue, a named one, a deleted one, which refuses everything).
//
// The input is tried twice: as an entry, and as type byte + body sealed in
// a valid envelope, so that the fuzzer reaches the body decoder without
// having to forge CRCs.
func FuzzRecord(f *testing.F) {
	historyState(f) // the seeds are a history that applies
	for i, q := range sampleHistory() {
		rec := q.rec
		body, err := state.Encode(nil, rec)
		if err != nil {
			f.Fatal(err)
		}
		entry := wal.AppendRecord(nil, rec.Type(), uint64(i+1), body)
		f.Add(entry)
		f.Add(append([]byte{rec.Type()}, body...))
		bad := bytes.Clone(entry)
		bad[len(bad)-1] ^= 0x40
		f.Add(bad)
	}
	for _, rec := range fixtureRecords() {
		body, err := state.Encode(nil, rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{rec.Type()}, body...))
	}
	// Tagged fields: optional ones (skipped) on a record and an item, and
	// a required one (refused).
	for _, fr := range []struct {
		rec    state.Record
		fields state.Fields
		items  []state.Fields
	}{
		{&state.Ack{Time: 1500, Receipt: 8}, state.Fields{{Tag: 2, Value: []byte{0xa1, 'x'}}}, nil},
		{&state.Put{Time: 1500, Items: []state.NewItem{{Body: []byte("m"), Due: 1500}}},
			state.Fields{{Tag: 6, Value: []byte{0xc3}}, {Tag: 8, Value: []byte{0x81, 0x01, 0x02}}}, []state.Fields{{{Tag: 4, Value: []byte{0x92, 0x01, 0xc0}}}}},
		{&state.End{Kind: state.TypeNack, Time: 1500, Receipt: 8, Cause: "x", Due: 1600}, state.Fields{{Tag: 3, Value: []byte{0x00}}}, nil},
	} {
		body, err := state.EncodeWithFields(nil, fr.rec, fr.fields, fr.items)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{fr.rec.Type()}, body...))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkEntry(t, data)
		if len(data) < 2 || data[0] == 0 {
			return
		}
		sealed := wal.AppendRecord(nil, data[0], 7, data[1:])
		if !checkEntry(t, sealed) {
			t.Fatalf("a freshly sealed record does not decode: % x", sealed)
		}
		for bit := range len(sealed) * 8 {
			flipped := bytes.Clone(sealed)
			flipped[bit/8] ^= 1 << (bit % 8)
			if _, err := wal.DecodeRecord(flipped); err == nil {
				t.Fatalf("bit %d flipped in a sealed record and it still decodes", bit)
			}
		}
	})
}

// checkEntry runs one entry through every decoder and reports whether the
// envelope was accepted.
func checkEntry(t *testing.T, entry []byte) bool {
	t.Helper()
	rec, err := wal.DecodeRecord(entry)
	if err != nil {
		if !errors.Is(err, wal.ErrCorrupt) {
			t.Fatalf("DecodeRecord refused with %v, which is not ErrCorrupt", err)
		}
		return false
	}
	if !envelopeCRCOK(entry) {
		t.Fatalf("DecodeRecord accepted an entry whose CRC does not match: % x", entry)
	}
	if rec.Type == 0 || len(rec.Body) == 0 {
		t.Fatalf("DecodeRecord accepted type %d with a %d-byte body", rec.Type, len(rec.Body))
	}
	if again := wal.AppendRecord(nil, rec.Type, rec.LSN, rec.Body); !bytes.Equal(again, entry) {
		t.Fatalf("re-encoding a decoded entry changes it:\n  in  % x\n  out % x", entry, again)
	}
	r, err := state.Decode(rec.Type, rec.Body)
	if err != nil {
		return true
	}
	if r.Type() != rec.Type {
		t.Fatalf("state.Decode(type %d) returned a %T of type %d", rec.Type, r, r.Type())
	}
	body, err := state.Encode(nil, r)
	if err != nil {
		t.Fatalf("a decoded %T does not encode: %v", r, err)
	}
	r2, err := state.Decode(rec.Type, body)
	if err != nil || !reflect.DeepEqual(r, r2) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", r, r2, err)
	}
	checkApply(t, r)
	return true
}

// fixtureState is a state with an item in every status in the default
// queue: ready (1, key "ka"), delayed (2, with a deadline), leased (3,
// receipt 2), dead (4) and ready (5, priority 2); the same in the named
// queue "jobs" (queue 6, MaxInFlight 2, paused until 3000): ready (6, key
// "ka"), delayed (7, with a deadline), leased (8, receipt 8), dead (9, key
// "kd"); and queue 11, deleted with its item 10; at LSN 14.
func fixtureState(t testing.TB) *state.State {
	t.Helper()
	st := state.New()
	for i, r := range []queued{
		{0, &state.Put{Time: 100, Items: []state.NewItem{
			{Body: []byte("one"), Due: 100, Key: "ka"},
			{Body: []byte("two"), Due: 10_000, Deadline: 20_000},
			{Body: []byte("three"), Due: 100},
			{Body: []byte("four"), Due: 100, Key: "kd"},
			{Body: []byte("five"), Due: 100, Priority: 2},
		}}},
		{0, &state.Lease{Time: 200, ID: 3, LeaseEnd: 5000}},
		{0, &state.Lease{Time: 300, ID: 4, LeaseEnd: 5000}},
		{0, &state.End{Kind: state.TypeDeadLetter, Time: 400, Receipt: 3, Cause: "poison", Due: 400, Dead: true}},
		{0, &state.Extend{Time: 500, Receipt: 2, LeaseEnd: 6000}},
		{0, &state.CreateQueue{Time: 600, Name: "jobs", Settings: state.Settings{Visibility: 1000, MaxAttempts: 3, MaxInFlight: 2}}},
		{fixtureJobs, &state.Put{Time: 700, Items: []state.NewItem{
			{Body: []byte("six"), Due: 700, Key: "ka"},
			{Body: []byte("seven"), Due: 10_000, Deadline: 20_000},
			{Body: []byte("eight"), Due: 700},
			{Body: []byte("nine"), Due: 700, Key: "kd"},
		}}},
		{fixtureJobs, &state.Lease{Time: 800, ID: 8, LeaseEnd: 5000}},
		{fixtureJobs, &state.Lease{Time: 900, ID: 9, LeaseEnd: 5000}},
		{fixtureJobs, &state.End{Kind: state.TypeDeadLetter, Time: 1000, Receipt: 9, Cause: longCause, Due: 1000, Dead: true}},
		{0, &state.CreateQueue{Time: 1100, Name: "gone", Settings: state.Settings{Visibility: 1000, MaxAttempts: 1}}},
		{fixtureGone, &state.Put{Time: 1200, Items: []state.NewItem{{Body: []byte("ten"), Due: 1200, Key: "ka"}}}},
		{fixtureGone, &state.DeleteQueue{Time: 1300, Force: true}},
		{fixtureJobs, &state.PauseQueue{Time: 1400, Until: 3000}},
	} {
		if err := st.ApplyAt(uint64(i+1), r.queue, r.rec, 4096); err != nil {
			t.Fatalf("fixture record %d: %v", i+1, err)
		}
	}
	return st
}

// fixtureRecords are records about the named queues of fixtureState, some
// of which it takes in the log of a queue and some it refuses: seeds that
// put the fuzzer near the rules of pauses, caps, moves and deletes.
func fixtureRecords() []state.Record {
	return []state.Record{
		&state.Lease{Time: 2999, ID: 6, LeaseEnd: 4000},                       // jobs is paused until 3000
		&state.Lease{Time: 3000, ID: 6, LeaseEnd: 4000},                       // and no longer
		&state.Move{Time: 1500, Target: state.DefaultQueue, IDs: []uint64{9}}, // "kd" is held by item 4 there
		&state.Move{Time: 1500, Target: fixtureJobs, IDs: []uint64{4}},        // "kd" is held by item 9 there
		&state.Move{Time: 1500, Target: fixtureGone, IDs: []uint64{4}},        // deleted
		&state.Redrive{Time: 1500, IDs: []uint64{9}},                          // a dead letter of jobs only
		&state.SetQueue{Time: 1500, Settings: state.Settings{Visibility: 1, MaxAttempts: 1, MaxInFlight: 1}},
		&state.PauseQueue{Time: 1500, Until: math.MaxInt64},
		&state.PauseQueue{Time: 1500},
		&state.DeleteQueue{Time: 1500},              // a lease is open in each queue
		&state.DeleteQueue{Time: 1500, Force: true}, // refused for the default queue only
		&state.CreateQueue{Time: 1500, Name: "gone", Settings: state.Settings{Visibility: 5, MaxAttempts: 2}},
		&state.CreateQueue{Time: 1500, Name: "jobs", Settings: state.Settings{Visibility: 5, MaxAttempts: 2}},
		&state.Ack{Time: 1500, Receipt: 8},                                     // the lease of jobs
		&state.Put{Time: 1500, Items: []state.NewItem{{Due: 1500, Key: "ka"}}}, // "ka" is taken in both queues
	}
}

// The named queues of fixtureState.
const (
	fixtureJobs = 6  // exists
	fixtureGone = 11 // deleted
)

func checkApply(t *testing.T, r state.Record) {
	t.Helper()
	for _, queue := range []uint64{state.DefaultQueue, fixtureJobs, fixtureGone} {
		st := fixtureState(t)
		before := mustSnapshot(t, st)
		if err := st.ApplyAt(st.LastLSN()+1, queue, r, 4096); err != nil {
			if !errors.Is(err, state.ErrInvalid) {
				t.Fatalf("ApplyTo refused %+v in queue %d with %v, which is not ErrInvalid", r, queue, err)
			}
			if after := mustSnapshot(t, st); !bytes.Equal(before, after) {
				t.Fatalf("ApplyTo refused %+v in queue %d (%v) but changed the state", r, queue, err)
			}
			continue
		}
		if queue == fixtureGone {
			t.Fatalf("a deleted queue took %T %+v", r, r)
		}
		if err := consistent(st, true); err != nil {
			t.Fatalf("after ApplyTo(queue %d, %+v): %v", queue, r, err)
		}
		roundTrip(t, st)
	}
}

func mustSnapshot(t *testing.T, st *state.State) []byte {
	t.Helper()
	// The bodies a snapshot of version 1 or 2 held go into the log first,
	// as Open copies them.
	if ids := st.InlineIDs(); len(ids) > 0 {
		rec := &state.Relocate{Time: st.LastTime()}
		for _, id := range ids {
			b, _ := st.Inline(id)
			rec.Items = append(rec.Items, state.Relocated{ID: id, Body: b})
		}
		if err := st.ApplyAt(st.LastLSN()+1, state.DefaultQueue, rec, 4096); err != nil {
			t.Fatalf("relocate the bodies of an old snapshot: %v", err)
		}
	}
	b, err := st.MarshalSnapshot()
	if err != nil {
		t.Fatalf("MarshalSnapshot: %v", err)
	}
	return b
}

// roundTrip checks that a state survives its snapshot encoding.
func roundTrip(t *testing.T, st *state.State) {
	t.Helper()
	b := mustSnapshot(t, st)
	st2, err := state.UnmarshalSnapshot(b)
	if err != nil {
		t.Fatalf("UnmarshalSnapshot(MarshalSnapshot(state)): %v", err)
	}
	if b2 := mustSnapshot(t, st2); !bytes.Equal(b, b2) {
		t.Fatalf("a snapshot of the decoded snapshot differs")
	}
	qs, qs2 := st.Queues(), st2.Queues()
	if len(qs) != len(qs2) {
		t.Fatalf("%d queues, %d after a snapshot round trip", len(qs), len(qs2))
	}
	for i, q := range qs {
		q2 := qs2[i]
		if q.ID() != q2.ID() || q.Name() != q2.Name() || q.Settings() != q2.Settings() || q.PausedUntil() != q2.PausedUntil() ||
			q.Gauges() != q2.Gauges() || q.Counters() != q2.Counters() {
			t.Fatalf("queue %d differs after a snapshot round trip:\n  %+v %+v\n  %+v %+v",
				q.ID(), q.Gauges(), q.Counters(), q2.Gauges(), q2.Counters())
		}
	}
}

// consistent checks what holds of every state built by applying records
// from an empty one: each item in one place and in a queue that exists,
// the gauges of each queue adding up, each attempt history within its
// bounds and, if conserved is set (not for a state from a fuzzed
// snapshot, whose counters are arbitrary), items conserved in each queue.
func consistent(st *state.State, conserved bool) error {
	type tally struct {
		waiting, leased, dead, n int
		bytes                    int64
	}
	tallies := make(map[uint64]*tally)
	for _, q := range st.Queues() {
		tallies[q.ID()] = &tally{}
	}
	var err error
	total := 0
	st.Each(func(it *state.Item) {
		total++
		q, tl := st.Queue(it.Queue), tallies[it.Queue]
		if q == nil {
			err = errors.Join(err, errorf("item %d is in queue %d, which does not exist", it.ID, it.Queue))
			return
		}
		tl.n++
		tl.bytes += int64(it.Body.Len)
		switch it.Status {
		case state.Waiting:
			tl.waiting++
		case state.Leased:
			tl.leased++
			if l := st.Leased(it.Receipt); l == nil || l.ID != it.ID {
				err = errors.Join(err, errorf("leased item %d is not found by its receipt %d", it.ID, it.Receipt))
			}
		case state.Dead:
			tl.dead++
		default:
			err = errors.Join(err, errorf("item %d has status %d", it.ID, it.Status))
		}
		if it.Key() != "" {
			if id, held := q.KeyHolder(it.Key(), st.LastTime(), 0); !held || id != it.ID {
				err = errors.Join(err, errorf("item %d: key %q held by %d (%v) in queue %d", it.ID, it.Key(), id, held, it.Queue))
			}
		}
		if len(it.History()) > state.HistoryLen {
			err = errors.Join(err, errorf("item %d has %d attempts in its history", it.ID, len(it.History())))
		}
		for _, a := range it.History() {
			if len(a.Error) > state.MaxAttemptError {
				err = errors.Join(err, errorf("item %d has an attempt error of %d bytes", it.ID, len(a.Error)))
			}
		}
	})
	if total != st.TotalLen() {
		err = errors.Join(err, errorf("Each visits %d items, TotalLen is %d", total, st.TotalLen()))
	}
	var bytes int64
	for _, q := range st.Queues() {
		bytes += q.Bytes()
	}
	if bytes != st.TotalBytes() {
		err = errors.Join(err, errorf("the queues hold %d bytes, TotalBytes is %d", bytes, st.TotalBytes()))
	}
	for _, q := range st.Queues() {
		g, c, tl := q.Gauges(), q.Counters(), tallies[q.ID()]
		if g.Ready+g.Delayed != tl.waiting || g.Leased != tl.leased || g.Dead != tl.dead || g.Items != tl.n || g.Items != q.Len() || g.Bytes != tl.bytes {
			err = errors.Join(err, errorf("queue %d: gauges %+v, items: %+v", q.ID(), g, *tl))
		}
		if conserved && c.Put+c.MovedIn != uint64(q.Len())+c.Acked+c.Discarded+c.Purged+c.MovedOut {
			err = errors.Join(err, errorf("queue %d: not conserved: %+v with %d stored", q.ID(), c, q.Len()))
		}
		if n := len(q.DeadLetters(0)); n != tl.dead {
			err = errors.Join(err, errorf("queue %d: %d dead letters listed, %d dead items", q.ID(), n, tl.dead))
		}
	}
	return err
}
