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

// TestOpenReadsOnceFromWhereReplayStarts opens the base log with from
// inside its second segment: the first segment is covered and never read,
// the others are read exactly once, and the records from from on are
// replayed.
func TestOpenReadsOnceFromWhereReplayStarts(t *testing.T) {
	template, ll := baseLog(t)
	from := ll.segs[1].First + 2
	cases := []struct {
		name        string
		from        uint64
		covered     int
		coveredLast uint64
	}{
		{"from_zero_reads_all", 0, 0, 0},
		{"from_first", 1, 0, 0},
		{"from_inside_second_segment", from, 1, ll.segs[1].First - 1},
		{"from_first_of_second_segment", ll.segs[1].First, 1, ll.segs[1].First - 1},
		{"from_inside_tail", ll.tail().First + 1, 2, ll.tail().First - 1},
		{"from_after_last", ll.last + 1, 2, ll.tail().First - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			fsys := &readOpenCounter{FS: OSFS()}
			var r replayed
			l, info, err := Open(dir, Options{SegmentSize: baseSegmentSize, FS: fsys}, tc.from, r.apply)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			checkRecords(t, r.recs, max(tc.from, 1), ll.last)
			if info.Covered != tc.covered || info.CoveredLast != tc.coveredLast || info.First != 1 || info.Last != ll.last {
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
		})
	}
}

// TestOpenIgnoresDamageInCoveredSegments flips a byte in each segment in
// turn and opens with from inside the second segment: damage in the first
// (covered by the caller's snapshot) does not refuse the open; damage in
// the second (even before from) or the tail does, and changes nothing, even
// when the tail is also torn.
func TestOpenIgnoresDamageInCoveredSegments(t *testing.T) {
	template, ll := baseLog(t)
	from := ll.segs[1].First + 2
	cases := []struct {
		name    string
		lsn     uint64 // the record whose last byte is flipped
		torn    bool   // also leave a torn record at the end of the tail
		refused bool
	}{
		{"covered_segment_first_record", 1, false, false},
		{"covered_segment_last_record", ll.segs[1].First - 1, false, false},
		{"covered_segment_with_torn_tail", 2, true, false},
		{"segment_of_from_before_from", ll.segs[1].First, false, true},
		{"segment_of_from_at_from", from, false, true},
		{"tail_segment_mid", ll.tail().First + 1, false, true},
		{"tail_segment_mid_and_torn_tail", ll.tail().First + 1, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			p := ll.recs[tc.lsn]
			path := filepath.Join(dir, p.File)
			data := readFileT(t, path)
			data[p.End-1] ^= 0x20
			writeFileT(t, path, data)
			var torn []byte
			if tc.torn {
				torn = frame(1, ll.last+1, testBody(ll.last+1))[:9]
				tailPath := filepath.Join(dir, ll.tail().Name)
				writeFileT(t, tailPath, append(readFileT(t, tailPath), torn...))
			}
			before := dirContents(t, dir)
			var r replayed
			l, info, err := Open(dir, Options{SegmentSize: baseSegmentSize}, from, r.apply)
			if tc.refused {
				var ce *CorruptionError
				if !errors.As(err, &ce) || ce.File != p.File || ce.Index != tc.lsn || ce.Offset != p.Offset {
					t.Fatalf("got %v, want a *CorruptionError at %s index %d offset %d", err, p.File, tc.lsn, p.Offset)
				}
				if !sameContents(before, dirContents(t, dir)) {
					t.Fatal("refused open modified the directory")
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
	template, ll := baseLog(t)
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
			l, _, err := Open(dir, Options{SegmentSize: baseSegmentSize, FS: ffs, Logger: logger}, tc.from, r.apply)
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
}
