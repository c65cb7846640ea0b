package fuzz

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// FuzzSnapshot feeds bytes to the snapshot decoders the way recovery does:
// wal.DecodeSnapshot on the file, then state.UnmarshalSnapshot on its body.
// It checks that neither panics, that the file decoder refuses with
// ErrCorrupt (or ErrNewerFormat for a later version or section kind) and
// never accepts a file whose CRC does not match, and that a
// state UnmarshalSnapshot accepts survives being used: every lease can be
// ended, every item leased and acked, and its snapshot round-trips.
//
// The input is tried twice: as a whole file, and as a body framed in a
// valid header, so that the fuzzer reaches the body decoder.
func FuzzSnapshot(f *testing.F) {
	st := fixtureState(f)
	body, err := st.MarshalSnapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(snapshotFile(st.LastLSN(), body))
	f.Add(wal.EncodeSnapshot(fuzzDir, st.LastLSN(), body))
	f.Add(body)
	empty, _ := state.New().MarshalSnapshot()
	f.Add(snapshotFile(0, empty))
	f.Add(wal.EncodeSnapshot(fuzzDir, 0, empty))
	f.Add(empty)
	f.Add([]byte("WALQSNAP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSnapshotFile(t, data)
		if body, ok := checkSnapshotFile(t, snapshotFile(42, data)); !ok || !bytes.Equal(body, data) {
			t.Fatalf("a freshly framed format-1 snapshot does not decode to its body")
		}
		if body, ok := checkSnapshotFile(t, wal.EncodeSnapshot(fuzzDir, 42, data)); !ok || !bytes.Equal(body, data) {
			t.Fatalf("a freshly framed format-2 snapshot does not decode to its body")
		}
	})
}

func checkSnapshotFile(t *testing.T, file []byte) ([]byte, bool) {
	t.Helper()
	snap, err := wal.DecodeSnapshot(file)
	if err != nil {
		if !errors.Is(err, wal.ErrCorrupt) && !errors.Is(err, wal.ErrNewerFormat) {
			t.Fatalf("DecodeSnapshot refused with %v, which is neither ErrCorrupt nor ErrNewerFormat", err)
		}
		return nil, false
	}
	lsn, body := snap.LSN, snap.Body
	again := snapshotFile(lsn, body)
	if snap.Version == 2 {
		again = wal.EncodeSnapshot(snap.Dir, lsn, body)
	}
	if !bytes.Equal(again, file) {
		t.Fatalf("DecodeSnapshot accepted a file that its own framing would not produce (bad CRC or length): % x", file)
	}
	st, err := state.UnmarshalSnapshot(body)
	if err != nil {
		return body, true
	}
	useState(t, st)
	return body, true
}

// useState drives a decoded state through what the queue would do with it:
// recovery ends every open lease, deadlines discard, and each ready item is
// leased and acked. Nothing may panic and every step must apply.
func useState(t *testing.T, st *state.State) {
	t.Helper()
	roundTrip(t, st)
	st.Gauges()
	st.DeadLetters(0)
	lsn := st.LastLSN()
	apply := func(r state.Record) {
		t.Helper()
		if lsn == math.MaxUint64 {
			return
		}
		lsn++
		if err := st.Apply(lsn, r); err != nil {
			t.Fatalf("a state from an accepted snapshot refuses %T %+v: %v", r, r, err)
		}
	}
	now := max(st.LastTime(), 0)
	if now > math.MaxInt64/2 {
		return // times near the end of int64: a lease end would overflow
	}
	for _, it := range st.OpenLeases() {
		apply(&state.End{Kind: state.TypeExpire, Time: now, Receipt: it.Receipt, Cause: "recovery", Due: now, Dead: true})
	}
	for range 64 {
		passed := st.PassedDeadlines(now, 16)
		if len(passed) > 0 {
			ids := make([]uint64, len(passed))
			for i, it := range passed {
				ids[i] = it.ID
			}
			apply(&state.Discard{Time: now, IDs: ids})
			continue
		}
		st.Promote(now)
		it := st.NextReady()
		if it == nil {
			break
		}
		apply(&state.Lease{Time: now, ID: it.ID, LeaseEnd: now + 1})
		apply(&state.Ack{Time: now, Receipt: lsn})
	}
	roundTrip(t, st)
}
