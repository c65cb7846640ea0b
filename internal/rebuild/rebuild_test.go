package rebuild_test

import (
	"bytes"
	"context"
	"errors"
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
	base, err := rebuild.Newest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if base.LSN != newest || base.File != wal.SnapshotName(newest) || len(base.Newer) != 0 {
		t.Fatalf("Newest = LSN %d file %s newer %v, want %d", base.LSN, base.File, base.Newer, newest)
	}
	end, err := rebuild.StateAt(dir, newest, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same state at the end, whatever it is built from.
	for _, from := range []uint64{0, first} {
		st, err := rebuild.StateAt(dir, from, end.LastLSN(), nil)
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		if !bytes.Equal(stateBytes(t, st), stateBytes(t, end)) {
			t.Fatalf("the state rebuilt from %d differs from the one rebuilt from %d", from, newest)
		}
	}
	// The state at the newest snapshot's LSN, built from the older one, is
	// the snapshot's.
	st, err := rebuild.StateAt(dir, first, newest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBytes(t, st), stateBytes(t, base.State)) {
		t.Fatal("replaying up to the newest snapshot does not give its state")
	}

	if _, err := rebuild.StateAt(dir, first, end.LastLSN()+5, nil); err == nil ||
		!strings.Contains(err.Error(), "replay reached LSN") {
		t.Fatalf("StateAt past the end = %v", err)
	}
	stop := errors.New("stop")
	var seen []uint64
	_, err = rebuild.StateAt(dir, first, 0, func(lsn uint64) error {
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
	base, err := rebuild.Newest(dir)
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
	_, err := rebuild.ReadSnapshot(dir, renamed)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || ce.File != renamed.Name || !strings.Contains(err.Error(), "the file name says") {
		t.Fatalf("ReadSnapshot of a renamed snapshot = %v", err)
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
	base, err := rebuild.Newest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rebuild.StateAt(dir, base.LSN, 0, nil); err != nil {
		t.Fatalf("StateAt from the snapshot the log reaches: %v", err)
	}
}
