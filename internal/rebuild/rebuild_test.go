package rebuild_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walq/walq"
	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// queueDir builds a closed queue directory whose log was never truncated
// (one large segment) and which holds two snapshots: one at LSN first and
// the newest at LSN newest, with records after it.
func queueDir(t *testing.T) (dir string, first, newest uint64) {
	t.Helper()
	dir = t.TempDir()
	q, err := walq.Open(dir, walq.Options{DisableAutoCompact: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	round := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := q.Put(ctx, []byte("body")); err != nil {
				t.Fatal(err)
			}
		}
		m, ok, err := q.TryGet()
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
		if err := q.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	round(5)
	snaps, _ := wal.ListSnapshots(dir)
	saved, err := os.ReadFile(snaps[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	first = snaps[0].LSN
	round(5)
	for i := 0; i < 3; i++ {
		if _, err := q.Put(ctx, []byte("after")); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, wal.SnapshotName(first)), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	snaps, _ = wal.ListSnapshots(dir)
	if len(snaps) != 2 {
		t.Fatalf("%d snapshots, want 2", len(snaps))
	}
	return dir, first, snaps[0].LSN
}

// dirID reads the directory ID from a queue directory's marker.
func dirID(t *testing.T, dir string) wal.DirID {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, layout.MarkerName))
	if err != nil {
		t.Fatal(err)
	}
	id, err := wal.DecodeMarker(data)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func stateBytes(t *testing.T, st *state.State) []byte {
	t.Helper()
	b, err := st.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewestAndStateAt(t *testing.T) {
	dir, first, newest := queueDir(t)
	id := dirID(t, dir)
	base, err := rebuild.Newest(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if base.LSN != newest || base.File != wal.SnapshotName(newest) || len(base.Newer) != 0 {
		t.Fatalf("Newest = LSN %d file %s newer %v, want %d", base.LSN, base.File, base.Newer, newest)
	}
	end, err := rebuild.StateAt(dir, id, newest, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same state at the end, whatever it is built from.
	for _, from := range []uint64{0, first} {
		st, err := rebuild.StateAt(dir, id, from, end.LastLSN(), nil)
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		if !bytes.Equal(stateBytes(t, st), stateBytes(t, end)) {
			t.Fatalf("the state rebuilt from %d differs from the one rebuilt from %d", from, newest)
		}
	}
	// The state at the newest snapshot's LSN, built from the older one, is
	// the snapshot's.
	st, err := rebuild.StateAt(dir, id, first, newest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBytes(t, st), stateBytes(t, base.State)) {
		t.Fatal("replaying up to the newest snapshot does not give its state")
	}

	if _, err := rebuild.StateAt(dir, id, first, end.LastLSN()+5, nil); err == nil ||
		!strings.Contains(err.Error(), "replay reached LSN") {
		t.Fatalf("StateAt past the end = %v", err)
	}
	stop := errors.New("stop")
	var seen []uint64
	_, err = rebuild.StateAt(dir, id, first, 0, func(lsn uint64) error {
		seen = append(seen, lsn)
		return stop
	})
	if !errors.Is(err, stop) || len(seen) != 1 || seen[0] != first+1 {
		t.Fatalf("a stopping callback: err %v, saw %v", err, seen)
	}
}

func TestNewestPassesOverBadNewer(t *testing.T) {
	dir, first, newest := queueDir(t)
	path := filepath.Join(dir, wal.SnapshotName(newest))
	data, _ := os.ReadFile(path)
	data[len(data)-1] ^= 1
	os.WriteFile(path, data, 0o600)
	base, err := rebuild.Newest(dir, dirID(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if base.LSN != first || len(base.Newer) != 1 || base.Newer[0].File.LSN != newest ||
		!errors.Is(base.Newer[0].Err, wal.ErrCorrupt) {
		t.Fatalf("Newest = LSN %d newer %+v, want %d with %d passed over", base.LSN, base.Newer, first, newest)
	}
}

func TestReadSnapshotChecksItsName(t *testing.T) {
	dir, first, _ := queueDir(t)
	data, _ := os.ReadFile(filepath.Join(dir, wal.SnapshotName(first)))
	renamed := wal.SnapshotFile{Name: wal.SnapshotName(first + 1), Path: filepath.Join(dir, "renamed"), LSN: first + 1}
	os.WriteFile(renamed.Path, data, 0o600)
	_, err := rebuild.ReadSnapshot(dir, renamed, dirID(t, dir))
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || ce.File != renamed.Name || !strings.Contains(err.Error(), "the file name says") {
		t.Fatalf("ReadSnapshot of a renamed snapshot = %v", err)
	}
}

// TestReadSnapshotChecksTheDirectory: with want set, a format-2 snapshot of
// another directory and a format-1 snapshot are refused, each as a
// *wal.CorruptionError naming the file; with want zero (a directory of
// format 1) both are read.
func TestReadSnapshotChecksTheDirectory(t *testing.T) {
	dir, _, newest := queueDir(t)
	other, _, otherNewest := queueDir(t)
	id, otherID := dirID(t, dir), dirID(t, other)
	if id == otherID {
		t.Fatal("two queues got the same directory ID")
	}
	foreign, err := os.ReadFile(filepath.Join(other, wal.SnapshotName(otherNewest)))
	if err != nil {
		t.Fatal(err)
	}
	format1, err := os.ReadFile(filepath.Join("..", "..", "testdata", "format1", wal.SnapshotName(28)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data []byte
		lsn  uint64
		want string
	}{
		{"format 2 of another directory", foreign, otherNewest,
			"snapshot of directory " + otherID.String() + ", this directory is " + id.String()},
		{"format 1 in a directory of format 2", format1, 28, "a format-1 snapshot in a directory of format 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := wal.SnapshotFile{Name: wal.SnapshotName(tc.lsn), Path: filepath.Join(t.TempDir(), "copied"), LSN: tc.lsn}
			if err := os.WriteFile(f.Path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := rebuild.ReadSnapshot(dir, f, id)
			var ce *wal.CorruptionError
			if !errors.As(err, &ce) || ce.Dir != dir || ce.File != f.Name || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadSnapshot with want set = %v, want a *CorruptionError for %s with %q", err, f.Name, tc.want)
			}
			st, err := rebuild.ReadSnapshot(dir, f, wal.DirID{})
			if err != nil || st.LastLSN() != tc.lsn {
				t.Fatalf("ReadSnapshot with want zero = %v, want the state at %d", err, tc.lsn)
			}
		})
	}

	// Newest passes over a snapshot of another directory put in place of
	// the newest one, and falls back to the older one; without want it
	// would take it.
	if otherNewest != newest {
		t.Fatalf("the two queues' newest snapshots cover %d and %d", newest, otherNewest)
	}
	if err := os.WriteFile(filepath.Join(dir, wal.SnapshotName(newest)), foreign, 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := rebuild.Newest(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if base.LSN == newest || len(base.Newer) != 1 || !errors.Is(base.Newer[0].Err, wal.ErrCorrupt) ||
		!strings.Contains(base.Newer[0].Err.Error(), "snapshot of directory") {
		t.Fatalf("Newest with a foreign newest snapshot = LSN %d, passed over %+v", base.LSN, base.Newer)
	}
	if base, err = rebuild.Newest(dir, wal.DirID{}); err != nil || base.LSN != newest {
		t.Fatalf("Newest without want = LSN %d, %v; want %d", base.LSN, err, newest)
	}
	if _, err := rebuild.StateAt(dir, id, newest, 0, nil); !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("StateAt from a foreign snapshot = %v, want corruption", err)
	}
}

func TestApplyRefusal(t *testing.T) {
	body, err := state.Encode(nil, &state.Ack{Time: 1, Receipt: 99})
	if err != nil {
		t.Fatal(err)
	}
	pos := wal.Position{File: wal.SegmentName(1), Index: 1, Offset: 0}
	cases := []struct {
		name string
		rec  wal.Record
		want string
	}{
		{"ack of no lease", wal.Record{Type: state.TypeAck, LSN: 1, Body: body}, "replay ack record"},
		{"body that does not decode", wal.Record{Type: state.TypePut, LSN: 1, Body: []byte{0xc1}}, "replay put record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := rebuild.Apply(state.New(), "log", pos, tc.rec)
			var ce *wal.CorruptionError
			if !errors.As(err, &ce) || ce.Dir != "log" || ce.File != pos.File || ce.Index != 1 ||
				!strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply = %v, want a *CorruptionError at %+v with %q", err, pos, tc.want)
			}
		})
	}
}

// TestApplyRefusesNewerRecords: a record of a type this build does not know
// comes from a newer walq: ErrNewerFormat, never corruption (which would
// invite a cut). Type 0 was never written by any build, and a record of a
// queue that was never created cannot be: corruption.
func TestApplyRefusesNewerRecords(t *testing.T) {
	body, err := state.Encode(nil, &state.Ack{Time: 1, Receipt: 99})
	if err != nil {
		t.Fatal(err)
	}
	pos := wal.Position{File: wal.SegmentName(1), Index: 7}
	for _, tc := range []struct {
		name  string
		rec   wal.Record
		newer string // "" for corruption
	}{
		{"a queue that does not exist", wal.Record{Type: state.TypeAck, Queue: 3, LSN: 7, Body: body}, ""},
		{"the type after the last", wal.Record{Type: state.LastType + 1, LSN: 7, Body: body}, fmt.Sprintf("has type %d", state.LastType+1)},
		{"type 255", wal.Record{Type: 255, LSN: 7, Body: body}, "has type 255"},
		{"type 0", wal.Record{Type: 0, LSN: 7, Body: body}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rebuild.Apply(state.New(), "log", pos, tc.rec)
			switch {
			case tc.newer != "" && (!errors.Is(err, wal.ErrNewerFormat) || errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), tc.newer)):
				t.Fatalf("Apply = %v, want ErrNewerFormat saying %q", err, tc.newer)
			case tc.newer == "" && (!errors.Is(err, wal.ErrCorrupt) || errors.Is(err, wal.ErrNewerFormat)):
				t.Fatalf("Apply = %v, want corruption", err)
			}
		})
	}
}

// TestReplayRefusesMissingRecords: a log that starts after the state is
// missing records, even when every record it holds verifies.
func TestReplayRefusesMissingRecords(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{DisableAutoCompact: true, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		if _, err := q.Put(context.Background(), []byte("a body that fills segments")); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(dir, layout.LogDirName)
	segs, _, err := wal.ListSegments(logDir)
	if err != nil || len(segs) == 0 || segs[0].First == 1 {
		t.Fatalf("the compaction did not truncate the log: %v %v", segs, err)
	}
	_, err = rebuild.Replay(state.New(), logDir, 0, nil)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "replay needs index 1 but the log starts at") {
		t.Fatalf("Replay of a log that starts at %d = %v", segs[0].First, err)
	}
	id := dirID(t, dir)
	base, err := rebuild.Newest(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rebuild.StateAt(dir, id, base.LSN, 0, nil); err != nil {
		t.Fatalf("StateAt from the snapshot the log reaches: %v", err)
	}
}
