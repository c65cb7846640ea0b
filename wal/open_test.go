package wal

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// readOpenCounter counts the read-only opens of each file.
type readOpenCounter struct {
	FS
	mu    sync.Mutex
	opens map[string]int
}

func (c *readOpenCounter) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag == os.O_RDONLY {
		c.mu.Lock()
		if c.opens == nil {
			c.opens = map[string]int{}
		}
		c.opens[filepath.Base(name)]++
		c.mu.Unlock()
	}
	return c.FS.OpenFile(name, flag, perm)
}

// TestOpenReadsOnceFromWhereReplayStarts opens the base log with from in
// each place: segments wholly before from are covered and never read, the
// others are read exactly once, and the records from from on are replayed.
func TestOpenReadsOnceFromWhereReplayStarts(t *testing.T) {
	template, ll := baseLog(t, "always", testDir)
	second, tail := ll.segs[1].First, ll.tail().First
	cases := []struct {
		name        string
		from        uint64
		covered     int
		coveredLast uint64
	}{
		{"from_zero_reads_all", 0, 0, 0},
		{"from_first", 1, 0, 0},
		{"from_inside_the_first_segment", second - 1, 0, 0},
		{"from_first_of_the_second_segment", second, 1, second - 1},
		{"from_inside_the_second_segment", second + 2, 1, second - 1},
		{"from_inside_the_tail", tail + 1, 2, tail - 1},
		{"from_after_the_last", ll.last + 1, 2, tail - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			fsys := &readOpenCounter{FS: OSFS()}
			var r replayed
			l, info, err := Open(dir, withDir(Options{FS: fsys}), tc.from, r.apply)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			checkRecords(t, r.recs, max(tc.from, 1), ll.last)
			if info.Covered != tc.covered || info.CoveredLast != tc.coveredLast || info.First != 1 || info.Last != ll.last || info.Segments != 3 {
				t.Fatalf("info %+v, want %d covered up to %d", info, tc.covered, tc.coveredLast)
			}
			for i, seg := range ll.segs {
				want := 1
				if i < tc.covered {
					want = 0
				}
				if got := fsys.opens[seg.Name]; got != want {
					t.Errorf("segment %s read %d times, want %d", seg.Name, got, want)
				}
			}
			// TruncateFront(CoveredLast+1) removes exactly the covered ones.
			if err := l.TruncateFront(info.CoveredLast + 1); err != nil {
				t.Fatal(err)
			}
			if got := len(l.Segments()); got != 3-tc.covered {
				t.Fatalf("%d segments after removing the covered ones", got)
			}
		})
	}
}

// TestOpenIgnoresDamageInCoveredSegments flips a bit in each segment in
// turn and opens with from inside the second segment: damage in the first
// (covered by the caller's snapshot) does not refuse the open; damage in
// the second (even before from) or in a promised frame of the tail does,
// and changes nothing, even when the tail is also torn.
func TestOpenIgnoresDamageInCoveredSegments(t *testing.T) {
	template, ll := baseLog(t, "always", testDir)
	from := ll.segs[1].First + 2
	cases := []struct {
		name    string
		lsn     uint64 // the record whose body's last byte is flipped
		torn    bool   // also leave a torn frame at the end of the tail
		refused bool
	}{
		{"covered_segment_first_record", 1, false, false},
		{"covered_segment_last_record", ll.segs[1].First - 1, false, false},
		{"covered_segment_and_torn_tail", 2, true, false},
		{"segment_of_from_before_from", ll.segs[1].First, false, true},
		{"segment_of_from_at_from", from, false, true},
		{"tail_segment_mid", ll.tail().First + 1, false, true},
		{"tail_segment_mid_and_torn_tail", ll.tail().First + 1, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			f := ll.frameOf(tc.lsn)
			path := filepath.Join(dir, f.Seg)
			at := f.Bodies[tc.lsn-f.First] + int64(len(testBody(tc.lsn))) - 1
			flipBit(t, path, at, 5)
			var torn []byte
			if tc.torn {
				torn = newSealer(ll.tail().Hdr).frame(ll.last+1, 2, ll.last)[:70]
				tailPath := filepath.Join(dir, ll.tail().Name)
				writeFileT(t, tailPath, append(readFileT(t, tailPath), torn...))
			}
			before := dirContents(t, dir)
			var r replayed
			l, info, err := Open(dir, withDir(Options{}), from, r.apply)
			if tc.refused {
				ce := asCorruption(t, "open", err)
				if ce.File != f.Seg || ce.Index != tc.lsn || ce.Offset != f.Off {
					t.Fatalf("got %v, want a *CorruptionError at %s index %d offset %d", err, f.Seg, tc.lsn, f.Off)
				}
				if d := diffContents(before, dirContents(t, dir)); d != "" {
					t.Fatalf("refused open changed the directory: %s", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			checkRecords(t, r.recs, from, ll.last)
			if info.Covered != 1 || info.CutBytes != int64(len(torn)) {
				t.Fatalf("info %+v", info)
			}
		})
	}
}

// TestOpenReadsSegmentsFromDisk checks that Open fsyncs every segment it
// reads and drops its cached pages before the read, and that neither an
// fsync error nor a failed drop there stops the open (they are logged).
func TestOpenReadsSegmentsFromDisk(t *testing.T) {
	template, ll := baseLog(t, "always", testDir)
	cases := []struct {
		name    string
		from    uint64
		fail    string // operation failed once during the open, "" none
		reads   int    // segments Open reads
		warning string
	}{
		{"all_segments", 0, "", 3, ""},
		{"covered_segment_skipped", ll.segs[1].First + 1, "", 2, ""},
		{"fsync_error_logged", 0, "file.sync", 3, "fsync before recovery read failed"},
		{"drop_error_logged", 0, "dropcache", 3, "could not drop cached pages"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			ffs := NewFaultFS(OSFS(), 0)
			if tc.fail != "" {
				ffs.FailNextWith(tc.fail, syscall.EIO)
			}
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			var r replayed
			l, _, err := Open(dir, withDir(Options{FS: ffs, Logger: logger}), tc.from, r.apply)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			checkRecords(t, r.recs, max(tc.from, 1), ll.last)
			drops, syncs := ffs.OpCount("dropcache"), ffs.OpCount("file.sync")
			l.Close()
			if drops != tc.reads || syncs != tc.reads {
				t.Fatalf("%d cache drops and %d fsyncs for %d segments read", drops, syncs, tc.reads)
			}
			if tc.warning != "" && !strings.Contains(logs.String(), tc.warning) {
				t.Fatalf("no warning %q in the log:\n%s", tc.warning, logs.String())
			}
		})
	}
	// A read error fails the open, and changes nothing.
	dir := copyDir(t, template)
	before := dirContents(t, dir)
	ffs := NewFaultFS(OSFS(), 0)
	ffs.FailNextWith("file.read", syscall.EIO)
	if _, _, err := Open(dir, withDir(Options{FS: ffs}), 0, nil); !errors.Is(err, syscall.EIO) {
		t.Fatalf("open with a read error: %v", err)
	}
	if d := diffContents(before, dirContents(t, dir)); d != "" {
		t.Fatalf("a failed open changed the directory: %s", d)
	}
}

func TestOSFSDropCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	writeFileT(t, path, bytes.Repeat([]byte("page"), 4096))
	f, err := OSFS().OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := OSFS().(CacheDropper).DropCache(f); err != nil {
		t.Fatalf("drop cache: %v", err)
	}
	if got, err := readAll(f); err != nil || len(got) != 4*4096 {
		t.Fatalf("read after drop: %d bytes, %v", len(got), err)
	}
	// FaultFS passes it on, unwrapping its own file.
	ffs := NewFaultFS(OSFS(), 0)
	ff, err := ffs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	if err := ffs.DropCache(ff); err != nil || ffs.OpCount("dropcache") != 1 {
		t.Fatalf("FaultFS drop cache: %v", err)
	}
}

// TestOpenRemovesInterruptedSegmentCreation: a roll interrupted before its
// rename leaves "<segment>.seg.tmp"; Open removes it (and fsyncs the
// directory) before it reads anything, and reports it. A failure to remove
// it fails the open.
func TestOpenRemovesInterruptedSegmentCreation(t *testing.T) {
	template, ll := baseLog(t, "never", testDir)
	tmp := segmentTmpName(ll.last + 1)
	for _, n := range []int{0, 20, SegmentHeaderSize} {
		dir := copyDir(t, template)
		h := appendSegmentHeader(nil, segmentHeader{dir: testDir, first: ll.last + 1})
		writeFileT(t, filepath.Join(dir, tmp), h[:n])
		ffs := NewFaultFS(OSFS(), 0)
		var r replayed
		l, info, err := Open(dir, withDir(Options{FS: ffs}), 0, r.apply)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.LeftoversCleaned) != 1 || info.LeftoversCleaned[0] != tmp || fileExists(filepath.Join(dir, tmp)) {
			t.Fatalf("leftovers %v", info.LeftoversCleaned)
		}
		if ffs.OpCount("syncdir") != 1 || info.Segments != 3 || info.CutBytes != 0 {
			t.Fatalf("%d directory fsyncs, info %+v", ffs.OpCount("syncdir"), info)
		}
		checkRecords(t, r.recs, 1, ll.last)
		l.Close()
	}
	if !IsSegmentTemp(tmp) || IsSegmentTemp(SegmentName(3)) || IsSegmentTemp("notes.tmp") {
		t.Fatal("IsSegmentTemp")
	}
	dir := copyDir(t, template)
	writeFileT(t, filepath.Join(dir, tmp), nil)
	ffs := NewFaultFS(OSFS(), 0)
	ffs.FailNext("remove")
	if _, _, err := Open(dir, withDir(Options{FS: ffs}), 0, nil); !errors.Is(err, ErrInjected) {
		t.Fatalf("open with a failed remove: %v", err)
	}
	// Scan only reads: it ignores the temp file.
	if res, err := Scan(dir, 0, 0, nil); err != nil || res.Last != ll.last {
		t.Fatalf("scan: %+v %v", res, err)
	}
}

func TestOpenOptions(t *testing.T) {
	t.Run("no_directory_id", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "q")
		if _, _, err := Open(dir, Options{}, 0, nil); err == nil || !strings.Contains(err.Error(), "no directory id") {
			t.Fatalf("got %v", err)
		}
		if fileExists(dir) {
			t.Fatal("a refused open made the directory")
		}
	})
	t.Run("fresh_log_at_from", func(t *testing.T) {
		dir := t.TempDir()
		l, info, err := Open(dir, withDir(Options{}), 100, nil)
		if err != nil || info.First != 100 || info.Last != 99 || info.Segments != 1 {
			t.Fatalf("info %+v %v", info, err)
		}
		if lsn, c := l.Append(1, testBody(100)); lsn != 100 || c.Wait() != nil {
			t.Fatalf("first append: %d", lsn)
		}
		l.Close()
		if !fileExists(filepath.Join(dir, SegmentName(100))) {
			t.Fatal("no segment 100")
		}
		var r replayed
		l, info, err = Open(dir, withDir(Options{}), 0, r.apply)
		if err != nil || info.First != 100 || info.Last != 100 {
			t.Fatalf("reopen: %+v %v", info, err)
		}
		l.Close()
		checkRecords(t, r.recs, 100, 100)
	})
	t.Run("fresh_log_must_reach", func(t *testing.T) {
		dir := t.TempDir()
		_, _, err := Open(dir, withDir(Options{MustReach: 5}), 0, nil)
		ce := asCorruption(t, "open", err)
		if ce.Index != 5 || !strings.Contains(ce.Err.Error(), "log ends at 0 before 5, which it must reach") {
			t.Fatalf("got %v", err)
		}
		if segs, _, _ := ListSegments(dir); len(segs) != 0 {
			t.Fatal("a refused open made a segment")
		}
	})
	t.Run("wrong_directory_id", func(t *testing.T) {
		dir := t.TempDir()
		writeLog(t, dir, Options{}, 3)
		before := dirContents(t, dir)
		_, _, err := Open(dir, Options{Dir: foreignDir}, 0, nil)
		ce := asCorruption(t, "open", err)
		if ce.File != SegmentName(1) || !strings.Contains(ce.Err.Error(), "segment belongs to directory") {
			t.Fatalf("got %v", err)
		}
		if d := diffContents(before, dirContents(t, dir)); d != "" {
			t.Fatal(d)
		}
	})
	t.Run("apply_error_stops_the_open", func(t *testing.T) {
		dir := t.TempDir()
		writeLog(t, dir, Options{}, 5)
		stop := errors.New("refused by the state")
		_, info, err := Open(dir, withDir(Options{}), 0, func(_ Position, rec Record) error {
			if rec.LSN == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || !strings.Contains(err.Error(), "replay record 3") || info.Replayed != 2 {
			t.Fatalf("got %v, info %+v", err, info)
		}
	})
}

// TestTruncateFrontCrashGapInCoveredSegments: TruncateFront removes the
// oldest segments first, but a crash before its directory fsync may keep
// any subset of the removals. Every removed segment lay wholly before the
// index, which the owner's snapshot covers, so a gap there is among the
// covered segments, which Open (from the snapshot) and Scan (from there)
// never read: no refusal. Only a replay from before the gap sees it.
func TestTruncateFrontCrashGapInCoveredSegments(t *testing.T) {
	template, ll := baseLog(t, "never", testDir)
	dir := copyDir(t, template)
	// TruncateFront(tail.First) removed segments 1 and 2; only the removal
	// of 2 reached the disk.
	if err := os.Remove(filepath.Join(dir, ll.segs[1].Name)); err != nil {
		t.Fatal(err)
	}
	from := ll.tail().First
	var r replayed
	l, info, err := Open(dir, withDir(Options{}), from, r.apply)
	if err != nil {
		t.Fatalf("open from %d: %v", from, err)
	}
	checkRecords(t, r.recs, from, ll.last)
	if info.Covered != 1 || info.CoveredLast != from-1 {
		t.Fatalf("info %+v", info)
	}
	if err := l.TruncateFront(info.CoveredLast + 1); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if segs, _, _ := ListSegments(dir); len(segs) != 1 || segs[0].First != from {
		t.Fatalf("segments %+v", segs)
	}

	dir = copyDir(t, template)
	os.Remove(filepath.Join(dir, ll.segs[1].Name))
	if res, err := Scan(dir, from, 0, nil); err != nil || res.Records != int(ll.last-from+1) {
		t.Fatalf("scan from %d: %+v %v", from, res, err)
	}
	_, _, err = Open(dir, withDir(Options{}), 0, nil)
	if ce := asCorruption(t, "open from 0", err); !strings.Contains(ce.Err.Error(), "lsn gap: segment starts at 31, want 16") {
		t.Fatalf("got %v", err)
	}
}
