package fuzz

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

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
	for _, st := range []*state.State{fixtureState(f), historyState(f)} {
		body, err := st.MarshalSnapshot()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(snapshotFile(st.LastLSN(), body))
		f.Add(wal.EncodeSnapshot(fuzzDir, st.LastLSN(), body))
		f.Add(body)
	}
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
	checkSnapshotPieces(t, file, snap, err)
	if err != nil {
		if !errors.Is(err, wal.ErrCorrupt) && !errors.Is(err, wal.ErrNewerFormat) {
			t.Fatalf("DecodeSnapshot refused with %v, which is neither ErrCorrupt nor ErrNewerFormat", err)
		}
		return nil, false
	}
	lsn, body := snap.LSN, snap.Body
	again := snapshotFile(lsn, body)
	if snap.Version == 2 {
		again = wal.EncodeSnapshotSection(snap.Dir, lsn, snap.Kind, body)
	}
	if !bytes.Equal(again, file) {
		t.Fatalf("DecodeSnapshot accepted a file that its own framing would not produce (bad CRC or length): % x", file)
	}
	st, err := state.UnmarshalSnapshot(body)
	// Read in pieces of any size, the body decodes to the same state, or
	// is refused as well.
	pieces, _, perr := state.ReadSnapshot(iotest.OneByteReader(bytes.NewReader(body)), int64(len(body)))
	switch {
	case (err == nil) != (perr == nil):
		t.Fatalf("UnmarshalSnapshot: %v; ReadSnapshot in pieces: %v", err, perr)
	case err == nil && !bytes.Equal(mustSnapshot(t, st), mustSnapshot(t, pieces)):
		t.Fatalf("read in pieces, the snapshot decodes to another state")
	}
	if err != nil {
		return body, true
	}
	useState(t, st)
	return body, true
}

// checkSnapshotPieces checks that reading the file in pieces
// (wal.OpenSnapshot) accepts and refuses what DecodeSnapshot does, with
// the same body, given DecodeSnapshot's verdict snap, err.
func checkSnapshotPieces(t *testing.T, file []byte, snap wal.Snapshot, err error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), wal.SnapshotName(1))
	if werr := os.WriteFile(path, file, 0o600); werr != nil {
		t.Fatal(werr)
	}
	var body []byte
	r, oerr := wal.OpenSnapshot(path)
	if oerr == nil {
		body, oerr = io.ReadAll(iotest.HalfReader(r))
		if cerr := r.Close(); oerr == nil {
			oerr = cerr
		}
	}
	switch {
	case (err == nil) != (oerr == nil):
		t.Fatalf("DecodeSnapshot: %v; OpenSnapshot and reading in pieces: %v", err, oerr)
	case oerr != nil && !errors.Is(oerr, wal.ErrCorrupt) && !errors.Is(oerr, wal.ErrNewerFormat):
		t.Fatalf("OpenSnapshot refused with %v, which is neither ErrCorrupt nor ErrNewerFormat", oerr)
	case err == nil && (!bytes.Equal(body, snap.Body) || r.LSN != snap.LSN || r.Kind != snap.Kind || r.Dir != snap.Dir || r.Version != snap.Version):
		t.Fatalf("read in pieces, the file gives another snapshot")
	}
}

// useState drives a decoded state through what the queue would do with it:
// recovery ends every open lease, paused queues are resumed, deadlines
// discard, and each ready item of each queue is leased and acked (or, in
// a queue with a cap of one, leased and failed into the dead letters);
// dead letters are moved between queues, which may be refused (a key held
// in the target) without a change; named queues are deleted and created
// again. Nothing may panic and every other step must apply.
func useState(t *testing.T, st *state.State) {
	t.Helper()
	roundTrip(t, st)
	st.Gauges()
	st.DeadLetters(0)
	lsn := st.LastLSN()
	apply := func(queue uint64, r state.Record) {
		t.Helper()
		if lsn == math.MaxUint64 {
			return
		}
		lsn++
		if err := st.ApplyAt(lsn, queue, r, 4096); err != nil {
			t.Fatalf("a state from an accepted snapshot refuses %T %+v in queue %d: %v", r, r, queue, err)
		}
	}
	// try applies a record that may be refused, but only without a change.
	try := func(queue uint64, r state.Record) {
		t.Helper()
		if lsn == math.MaxUint64 {
			return
		}
		before := mustSnapshot(t, st)
		if err := st.ApplyAt(lsn+1, queue, r, 4096); err != nil {
			if after := mustSnapshot(t, st); !bytes.Equal(before, after) {
				t.Fatalf("a state from an accepted snapshot refused %T %+v in queue %d (%v) but changed", r, r, queue, err)
			}
			return
		}
		lsn++
	}
	now := max(st.LastTime(), 0)
	if now > math.MaxInt64/2 {
		return // times near the end of int64: a lease end would overflow
	}
	for _, it := range st.OpenLeases() {
		apply(it.Queue, &state.End{Kind: state.TypeExpire, Time: now, Receipt: it.Receipt, Cause: "recovery", Due: now, Dead: true})
	}
	for range 1 << 12 {
		passed := st.PassedDeadlines(now, 16)
		if len(passed) > 0 {
			queue := passed[0].Queue
			var ids []uint64
			for _, it := range passed {
				if it.Queue == queue {
					ids = append(ids, it.ID)
				}
			}
			apply(queue, &state.Discard{Time: now, IDs: ids})
			continue
		}
		break
	}
	for _, q := range st.Queues() {
		if q.Paused(now) {
			apply(q.ID(), &state.PauseQueue{Time: now})
		}
		for range 64 {
			q.Promote(now)
			it := q.NextReady()
			if it == nil {
				break
			}
			apply(q.ID(), &state.Lease{Time: now, ID: it.ID, LeaseEnd: now + 1})
			if q.Settings().MaxInFlight == 1 {
				apply(q.ID(), &state.End{Kind: state.TypeDeadLetter, Time: now, Receipt: lsn, Cause: longCause, Due: now, Dead: true})
			} else {
				apply(q.ID(), &state.Ack{Time: now, Receipt: lsn})
			}
		}
	}
	queues := st.Queues()
	for i, q := range queues {
		to := queues[(i+1)%len(queues)]
		if dead := q.DeadLetters(4); len(dead) > 0 && to != q {
			ids := make([]uint64, len(dead))
			for j := range dead {
				ids[j] = dead[j].ID
			}
			try(q.ID(), &state.Move{Time: now, Target: to.ID(), IDs: ids})
		}
	}
	if err := consistent(st, false); err != nil {
		t.Fatalf("a state from an accepted snapshot, used: %v", err)
	}
	for _, q := range st.Queues() {
		if q.ID() != state.DefaultQueue {
			name := q.Name()
			apply(q.ID(), &state.DeleteQueue{Time: now})
			apply(state.DefaultQueue, &state.CreateQueue{Time: now, Name: name, Settings: state.Settings{Visibility: 1, MaxAttempts: 1}})
		}
	}
	roundTrip(t, st)
}
