package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestDamagedFrameStatesItsOwnWatermark: under SyncAlways record 44 was
// fsynced and its Commit released; then its frame is lost from the middle
// of the tail (an LSN gap), so the frame of 45, whose header verifies but
// whose LSN is wrong, is the damaged frame and the last one. Its header is
// the only statement that 44 was fsynced. Open once looked for watermarks
// from the byte after the damaged frame's start, never read that header,
// and cut 44 and 45 as if torn: a promised record lost without a word.
func TestDamagedFrameStatesItsOwnWatermark(t *testing.T) {
	dir, ll := baseLog(t, "always", testDir)
	f := ll.frameOf(baseLast - 1)
	path := ll.path(f.Seg)
	data := readFileT(t, path)
	writeFileT(t, path, append(data[:f.Off:f.Off], data[f.End():]...))
	before := dirContents(t, dir)

	l, info, err := Open(dir, withDir(Options{}), 0, nil)
	if err == nil {
		l.Close()
		t.Fatalf("opened, cutting %+v: the promised record %d is gone", info.Cut, baseLast-1)
	}
	ce := asCorruption(t, "open", err)
	want := fmt.Sprintf("lsn gap: want %d, got %d; the frame at offset %d states records up to %d were fsynced",
		baseLast-1, baseLast, f.Off, baseLast-1)
	if ce.Index != baseLast-1 || ce.Offset != f.Off || !strings.Contains(ce.Err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if d := diffContents(before, dirContents(t, dir)); d != "" {
		t.Fatalf("a refused open changed the directory: %s", d)
	}

	// The damaged frame's own watermark is a statement, not a later frame.
	hdr := ll.tail().Hdr
	w, err := walkFrames(readFileT(t, path), hdr, nil)
	if err != nil || w.bad == nil {
		t.Fatal(w, err)
	}
	v := judgeDamage(readFileT(t, path), hdr, w, ll.tail().First-1)
	if v.cut || v.watermark != baseLast-1 || v.statedAt != f.Off || v.later != 0 || v.laterAt != -1 {
		t.Fatalf("verdict %+v", v)
	}
}

// tornLog writes a log of 10 records and then the first keep bytes of a
// frame holding one record of bodySize bytes: the tail a kill -9 leaves in
// the middle of a write. It returns the directory, its layout before the
// torn frame, and the torn bytes.
func tornLog(t *testing.T, bodySize int, keep int) (string, logLayout, []byte) {
	t.Helper()
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 10)
	ll := readLayout(t, dir)
	tail := ll.tail()
	torn := newSealer(tail.Hdr).frameOf(ll.last+1, ll.last, bytes.Repeat([]byte{'p'}, bodySize))[:keep]
	writeFileT(t, tail.Path, append(readFileT(t, tail.Path), torn...))
	return dir, ll, torn
}

// brokenFiles lists the .broken copies in dir.
func brokenFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".broken") {
			names = append(names, e.Name())
		}
	}
	return names
}

// shortWriteFS lets every write to a .broken file write half its bytes and
// then fail with ENOSPC, as a disk that fills up during the copy does.
type shortWriteFS struct{ FS }

func (s shortWriteFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(filepath.Base(name), ".broken") {
		return f, err
	}
	return shortWriteFile{f}, nil
}

type shortWriteFile struct{ File }

func (f shortWriteFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p[:len(p)/2])
	if err != nil {
		return n, err
	}
	return n, syscall.ENOSPC
}

// TestTornTailCopyFailureDoesNotStopOpen fills the disk while recovery
// writes the .broken copy: the open must go on with the cut and leave no
// partial copy behind, so that the next open does not find one either.
func TestTornTailCopyFailureDoesNotStopOpen(t *testing.T) {
	cases := []struct {
		name    string
		fs      func() FS
		partial bool // the partial copy could not be removed either
		warning string
	}{
		{"enospc_on_write", func() FS {
			ffs := NewFaultFS(OSFS(), 0)
			ffs.FailNextWith("file.write", syscall.ENOSPC) // the copy is the only write of this recovery
			return ffs
		}, false, "no space left on device"},
		{"enospc_after_half_the_copy", func() FS { return shortWriteFS{OSFS()} }, false, "no space left on device"},
		{"enospc_on_fsync_of_the_copy", func() FS { return brokenSyncFS{OSFS()} }, false, "no space left on device"},
		{"copy_cannot_be_created", func() FS { return &failBrokenOpenFS{FS: OSFS()} }, false, "cannot create"},
		{"partial_copy_cannot_be_removed", func() FS {
			ffs := NewFaultFS(shortWriteFS{OSFS()}, 0)
			ffs.FailNext("remove")
			return ffs
		}, true, "removing the partial copy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, ll, torn := tornLog(t, 3000, 1500)
			cleanSize := ll.tail().Size
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			var r replayed
			l, info, err := Open(dir, withDir(Options{FS: tc.fs(), Logger: logger}), 0, r.apply)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			checkRecords(t, r.recs, 1, ll.last)
			if info.CutBytes != int64(len(torn)) || info.BrokenFile != "" || info.Cut == nil {
				t.Fatalf("info %+v, want %d bytes cut and no broken file", info, len(torn))
			}
			if !strings.Contains(logs.String(), "could not keep a copy of the torn tail") || !strings.Contains(logs.String(), tc.warning) {
				t.Fatalf("no warning in the log:\n%s", logs.String())
			}
			names := brokenFiles(t, dir)
			if tc.partial != (len(names) == 1) || len(names) > 1 {
				t.Fatalf("copies left: %v", names)
			}
			if got := int64(len(readFileT(t, ll.path(ll.tail().Name)))); got != cleanSize {
				t.Fatalf("tail segment has %d bytes, want %d", got, cleanSize)
			}
			if lsn, c := l.Append(1, testBody(ll.last+1)); lsn != ll.last+1 || c.Wait() != nil {
				t.Fatalf("append after repair: lsn %d", lsn)
			}
		})
	}
}

// brokenSyncFS fails the fsync of .broken files with ENOSPC.
type brokenSyncFS struct{ FS }

func (f brokenSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(filepath.Base(name), ".broken") {
		return file, err
	}
	return failSyncFile{file}, nil
}

type failSyncFile struct{ File }

func (failSyncFile) Sync() error { return syscall.ENOSPC }

// failBrokenOpenFS refuses to create .broken files.
type failBrokenOpenFS struct{ FS }

func (f *failBrokenOpenFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if strings.Contains(filepath.Base(name), ".broken") {
		return nil, errors.New("cannot create " + filepath.Base(name))
	}
	return f.FS.OpenFile(name, flag, perm)
}

// TestTornTailCopyIsBounded cuts a torn 10 MiB frame: the .broken copy
// holds its first brokenKeep bytes only.
func TestTornTailCopyIsBounded(t *testing.T) {
	const body = 10 << 20
	dir, ll, torn := tornLog(t, body, body-100)
	var r replayed
	l, info, err := Open(dir, withDir(Options{}), 0, r.apply)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer l.Close()
	checkRecords(t, r.recs, 1, ll.last)
	if info.CutBytes != int64(len(torn)) || info.BrokenFile == "" {
		t.Fatalf("info %+v, want %d bytes cut and a broken file", info, len(torn))
	}
	got := readFileT(t, filepath.Join(dir, info.BrokenFile))
	if len(got) != brokenKeep || !bytes.Equal(got, torn[:brokenKeep]) {
		t.Fatalf("%s holds %d bytes, want the first %d of the %d cut", info.BrokenFile, len(got), brokenKeep, len(torn))
	}
}

// TestTornTailCopyNamesAreNotReused cuts torn tails in turn: each copy gets
// the next free name, and none is overwritten.
func TestTornTailCopyNamesAreNotReused(t *testing.T) {
	dir, ll, first := tornLog(t, 100, 50)
	tail := ll.tail()
	_, info := reopen(t, dir, Options{})
	if info.BrokenFile != tail.Name+".broken" {
		t.Fatalf("first copy %q", info.BrokenFile)
	}
	for i := 1; i <= 3; i++ {
		seg := lastSegment(t, dir)
		hdr, _ := decodeSegmentHeader(readFileT(t, seg.Path))
		last := uint64(10 + i - 1) // reopen appends nothing; the cut keeps 10
		torn := newSealer(hdr).frame(last+1, 1, last)[:7+i]
		writeFileT(t, seg.Path, append(readFileT(t, seg.Path), torn...))
		_, info = reopen(t, dir, Options{})
		if info.BrokenFile != fmt.Sprintf("%s.broken.%d", tail.Name, i) || info.CutBytes != int64(7+i) {
			t.Fatalf("repair %d: %+v", i, info)
		}
		if got := readFileT(t, filepath.Join(dir, info.BrokenFile)); !bytes.Equal(got, torn) {
			t.Fatalf("copy %d holds %q", i, got)
		}
		// Keep the log growing so the next torn frame has the next LSN.
		l, _ := openLog(t, dir, Options{})
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	if got := readFileT(t, filepath.Join(dir, tail.Name+".broken")); !bytes.Equal(got, first) {
		t.Fatal("the first copy was overwritten")
	}
}
