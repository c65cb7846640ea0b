package walq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// compactedDir builds a queue directory with a snapshot, a truncated log
// and records after the snapshot, closed cleanly. Its records are written
// under SyncAlways; the fsyncs themselves are skipped (noSyncFS): the
// directory is read back by this process.
func compactedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	q, err := Open(dir, Options{Clock: clock, SegmentSize: 4096, DisableAutoCompact: true, fs: noSyncOS()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		for i := 0; i < 200; i++ {
			if _, err := q.Put(ctx, []byte("item body that takes some room")); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				m := mustTryGet(t, q)
				if err := q.Ack(m.Receipt); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := q.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 160; i++ {
		mustPut(t, q, "after the snapshot, several segments of it")
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func snapshots(t *testing.T, dir string) []wal.SnapshotFile {
	t.Helper()
	snaps, err := wal.ListSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	return snaps
}

func segments(t *testing.T, dir string) []wal.Segment {
	t.Helper()
	segs, _, err := wal.ListSegments(filepath.Join(dir, layout.LogDirName))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].First < segs[j].First })
	return segs
}

// TestDirectoryCorruption: damage to snapshots and to the directory as a
// whole (the log's own table of torn and corrupt records is in wal/) is
// refused with an error that names the place, and nothing is changed.
// Each case damages a copy of one directory; two cases take a file from a
// second queue's.
func TestDirectoryCorruption(t *testing.T) {
	fixture, other := compactedDir(t), compactedDir(t)
	cases := []struct {
		name     string
		damage   func(t *testing.T, dir string)
		wantFile string // the file the error must name
	}{
		{"truncated snapshot, log no longer reaches back", func(t *testing.T, dir string) {
			s := snapshots(t, dir)[0]
			if err := os.Truncate(s.Path, s.Size/2); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"bad newest snapshot after a truncation", func(t *testing.T, dir string) {
			s := snapshots(t, dir)[0]
			data, _ := os.ReadFile(s.Path)
			data[len(data)-3] ^= 0x40
			os.WriteFile(s.Path, data, 0o600)
		}, ""},
		{"snapshot newer than the log", func(t *testing.T, dir string) {
			// Keep only the first segment, emptied to its header: the log
			// now ends before the snapshot's LSN.
			segs := segments(t, dir)
			for _, s := range segs[1:] {
				os.Remove(s.Path)
			}
			must(t, os.Truncate(segs[0].Path, wal.SegmentHeaderSize))
		}, ""},
		{"missing first segment, no snapshot", func(t *testing.T, dir string) {
			for _, s := range snapshots(t, dir) {
				os.Remove(s.Path)
			}
			os.Remove(segments(t, dir)[0].Path)
		}, ""},
		{"missing middle segment", func(t *testing.T, dir string) {
			segs := segments(t, dir)
			if len(segs) < 4 {
				t.Fatalf("layout: %d segments, want at least 4", len(segs))
			}
			os.Remove(segs[2].Path)
		}, ""},
		{"torn tail and a snapshot beyond the log's end", func(t *testing.T, dir string) {
			segs := segments(t, dir)
			for _, s := range segs[1 : len(segs)-1] {
				os.Remove(s.Path)
			}
			// The remaining tail segment no longer follows: drop it too,
			// empty the first to its header and tear a frame after it.
			os.Remove(segs[len(segs)-1].Path)
			must(t, os.Truncate(segs[0].Path, wal.SegmentHeaderSize))
			f, _ := os.OpenFile(segs[0].Path, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte{30, 1, 2, 3})
			f.Close()
		}, ""},
		{"a bit flipped in the marker", func(t *testing.T, dir string) {
			flipBit(t, filepath.Join(dir, layout.MarkerName), 20)
		}, layout.MarkerName},
		{"marker cut short", func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, layout.MarkerName), 20))
		}, layout.MarkerName},
		{"marker removed", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, layout.MarkerName)))
		}, layout.MarkerName},
		{"a bit flipped in the salt of the newest segment", func(t *testing.T, dir string) {
			segs := segments(t, dir)
			flipBit(t, segs[len(segs)-1].Path, 40)
		}, ""},
		{"a bit flipped in the directory id of a segment", func(t *testing.T, dir string) {
			flipBit(t, segments(t, dir)[0].Path, 14)
		}, ""},
		{"the newest segment copied from another queue", func(t *testing.T, dir string) {
			segs, theirs := segments(t, dir), segments(t, other)
			data, err := os.ReadFile(theirs[len(theirs)-1].Path)
			must(t, err)
			must(t, os.WriteFile(segs[len(segs)-1].Path, data, 0o600))
			must(t, os.Rename(segs[len(segs)-1].Path, filepath.Join(filepath.Dir(segs[0].Path), theirs[len(theirs)-1].Name)))
		}, ""},
		{"the marker copied from another queue", func(t *testing.T, dir string) {
			data, err := os.ReadFile(filepath.Join(other, layout.MarkerName))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, layout.MarkerName), data, 0o600))
		}, ""},
		{"a bit flipped in a promised record's body", func(t *testing.T, dir string) {
			// Close fsynced everything, and SyncAlways frames state it.
			segs := segments(t, dir)
			last := segs[len(segs)-1]
			flipBit(t, last.Path, wal.SegmentHeaderSize+int64(wal.FrameOverhead(1))+3)
		}, ""},
		{"every segment removed", func(t *testing.T, dir string) {
			for _, s := range segments(t, dir) {
				os.Remove(s.Path)
			}
		}, ""},
		{"no snapshot left, log truncated", func(t *testing.T, dir string) {
			for _, s := range snapshots(t, dir) {
				os.Remove(s.Path)
			}
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, fixture)
			tc.damage(t, dir)
			before := dirListing(t, dir)
			q, err := Open(dir, Options{})
			if err == nil {
				q.Close()
				t.Fatalf("Open succeeded on a damaged directory")
			}
			var ce *CorruptionError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("Open = %v, want a *CorruptionError", err)
			}
			if tc.wantFile != "" && ce.File != tc.wantFile {
				t.Fatalf("error names %q, want %q: %v", ce.File, tc.wantFile, err)
			}
			t.Logf("refused: %v", err)
			if after := dirListing(t, dir); after != before {
				t.Fatalf("refused open changed the directory:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestBadNewestSnapshotFallsBackWhileLogReaches: a newest snapshot that
// does not verify is passed over when the log still holds everything since
// the previous one, and nothing is lost.
func TestBadNewestSnapshotFallsBackWhileLogReaches(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	opts := Options{Clock: clock, DisableAutoCompact: true} // one big segment: never truncated
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		mustPut(t, q, "x")
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		mustPut(t, q, "y")
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	want := q.stateBytes()
	q.Close()
	s := snapshots(t, dir)[0]
	data, _ := os.ReadFile(s.Path)
	data[len(data)-1] ^= 1
	os.WriteFile(s.Path, data, 0o600)
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer q.Close()
	if string(q.stateBytes()) != string(want) {
		t.Fatal("state differs after falling back to the log")
	}
}

// TestTornTailRepairedThroughQueue: a torn tail is cut on open, kept in a
// .broken file, reported in Stats, and the queue serves what was whole.
func TestTornTailRepairedThroughQueue(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	q, err := Open(dir, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		mustPut(t, q, "whole")
	}
	q.Close()
	segs := segments(t, dir)
	tail := segs[len(segs)-1]
	f, _ := os.OpenFile(tail.Path, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{40, 1, 0, 0, 0, 0, 0, 0}) // a record cut short by a crash
	f.Close()
	q, err = Open(dir, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer q.Close()
	st := q.Stats()
	if st.Items != 5 || st.Recovery.TailCutBytes != 8 || st.Recovery.BrokenFile == "" {
		t.Fatalf("stats %+v", st)
	}
}

func dirListing(t *testing.T, dir string) string {
	t.Helper()
	var out string
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		// LOCK is opened by every Open and RESERVE put back after a
		// refusal; neither holds data.
		if err == nil && !info.IsDir() && info.Name() != layout.LockName && info.Name() != layout.ReserveName {
			rel, _ := filepath.Rel(dir, path)
			out += rel + ":" + info.ModTime().Format(time.RFC3339Nano) + ":" + string(rune('0'+info.Size()%10)) + " "
		}
		return nil
	})
	return out
}

// flipBit flips the lowest bit of the byte at off in the file at path.
func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	if off >= int64(len(data)) {
		t.Fatalf("%s has %d bytes, no byte at %d", path, len(data), off)
	}
	data[off] ^= 1
	must(t, os.WriteFile(path, data, 0o600))
}
