package fuzz

import (
	"bytes"
	"errors"
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
//   - Apply never panics, leaves the state exactly as it was when it refuses
//     a record, and keeps the state consistent when it accepts one.
//
// The input is tried twice: as an entry, and as type byte + body sealed in
// a valid envelope, so that the fuzzer reaches the body decoder without
// having to forge CRCs.
func FuzzRecord(f *testing.F) {
	for i, rec := range sampleRecords() {
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

// fixtureState is a state with an item in every status: ready (1, key
// "ka"), delayed (2, with a deadline), leased (3, receipt 2), dead (4) and
// ready (5, priority 2), at LSN 5.
func fixtureState(t testing.TB) *state.State {
	t.Helper()
	st := state.New()
	for i, rec := range []state.Record{
		&state.Put{Time: 100, Items: []state.NewItem{
			{Body: []byte("one"), Due: 100, Key: "ka"},
			{Body: []byte("two"), Due: 10_000, Deadline: 20_000},
			{Body: []byte("three"), Due: 100},
			{Body: []byte("four"), Due: 100, Key: "kd"},
			{Body: []byte("five"), Due: 100, Priority: 2},
		}},
		&state.Lease{Time: 200, ID: 3, LeaseEnd: 5000},
		&state.Lease{Time: 300, ID: 4, LeaseEnd: 5000},
		&state.End{Kind: state.TypeDeadLetter, Time: 400, Receipt: 3, Cause: "poison", Due: 400, Dead: true},
		&state.Extend{Time: 500, Receipt: 2, LeaseEnd: 6000},
	} {
		if err := st.Apply(uint64(i+1), rec); err != nil {
			t.Fatalf("fixture record %d: %v", i+1, err)
		}
	}
	return st
}

func checkApply(t *testing.T, r state.Record) {
	t.Helper()
	st := fixtureState(t)
	before := mustSnapshot(t, st)
	if err := st.Apply(st.LastLSN()+1, r); err != nil {
		if after := mustSnapshot(t, st); !bytes.Equal(before, after) {
			t.Fatalf("Apply refused %+v (%v) but changed the state", r, err)
		}
		return
	}
	if err := consistent(st); err != nil {
		t.Fatalf("after Apply(%+v): %v", r, err)
	}
	roundTrip(t, st)
}

func mustSnapshot(t *testing.T, st *state.State) []byte {
	t.Helper()
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
	if st.Gauges() != st2.Gauges() || st.Counters() != st2.Counters() {
		t.Fatalf("gauges or counters differ after a snapshot round trip:\n  %+v %+v\n  %+v %+v",
			st.Gauges(), st.Counters(), st2.Gauges(), st2.Counters())
	}
}

// consistent checks what holds of every state built by applying records
// from an empty one: each item in one place, the gauges adding up, items
// conserved.
func consistent(st *state.State) error {
	g, c := st.Gauges(), st.Counters()
	var waiting, leased, dead int
	var bytes int64
	var err error
	st.Each(func(it *state.Item) {
		bytes += int64(len(it.Body))
		switch it.Status {
		case state.Waiting:
			waiting++
		case state.Leased:
			leased++
			if st.Leased(it.Receipt) != it {
				err = errors.Join(err, errorf("leased item %d is not found by its receipt %d", it.ID, it.Receipt))
			}
		case state.Dead:
			dead++
		default:
			err = errors.Join(err, errorf("item %d has status %d", it.ID, it.Status))
		}
		if it.Key != "" {
			if id, held := st.KeyHolder(it.Key, st.LastTime(), 0); !held || id != it.ID {
				err = errors.Join(err, errorf("item %d: key %q held by %d (%v)", it.ID, it.Key, id, held))
			}
		}
	})
	if g.Ready+g.Delayed != waiting || g.Leased != leased || g.Dead != dead || g.Items != st.Len() || g.Bytes != bytes {
		err = errors.Join(err, errorf("gauges %+v, items: %d waiting %d leased %d dead %d bytes", g, waiting, leased, dead, bytes))
	}
	if c.Put != uint64(st.Len())+c.Acked+c.Discarded+c.Purged {
		err = errors.Join(err, errorf("not conserved: %+v with %d stored", c, st.Len()))
	}
	if n := len(st.DeadLetters(0)); n != dead {
		err = errors.Join(err, errorf("%d dead letters listed, %d dead items", n, dead))
	}
	return err
}
