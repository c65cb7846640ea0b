package wal

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// tornLog writes a log and then a last record cut short: the tail a crash
// leaves in the middle of a write. It returns the directory, its layout
// before the torn record, and the torn bytes.
func tornLog(t *testing.T, bodySize int, keep int) (string, logLayout, []byte) {
	t.Helper()
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 10)
	ll := readLayout(t, dir)
	torn := frame(1, ll.last+1, bytes.Repeat([]byte{'p'}, bodySize))[:keep]
	tailPath := ll.path(ll.tail().Name)
	writeFileT(t, tailPath, append(readFileT(t, tailPath), torn...))
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
		name string
		fs   func() FS
	}{
		{"enospc_on_write", func() FS {
			ffs := NewFaultFS(OSFS(), 0)
			ffs.FailNextWith("file.write", syscall.ENOSPC) // the copy is the only write of this recovery
			return ffs
		}},
		{"enospc_after_half_the_copy", func() FS { return shortWriteFS{OSFS()} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, ll, torn := tornLog(t, 3000, 1500)
			cleanSize := ll.tail().Size
			var r replayed
			l, info, err := Open(dir, Options{SegmentSize: baseSegmentSize, FS: tc.fs()}, 0, r.apply)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			checkRecords(t, r.recs, 1, ll.last)
			if info.CutBytes != int64(len(torn)) || info.BrokenFile != "" {
				t.Fatalf("info %+v, want %d bytes cut and no broken file", info, len(torn))
			}
			if names := brokenFiles(t, dir); len(names) != 0 {
				t.Fatalf("partial copies left: %v", names)
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

// TestTornTailCopyIsBounded cuts a torn 10 MiB record: the .broken copy
// holds its first brokenKeep bytes only.
func TestTornTailCopyIsBounded(t *testing.T) {
	const body = 10 << 20
	dir, ll, torn := tornLog(t, body, body-100)
	var r replayed
	l, info, err := Open(dir, Options{SegmentSize: baseSegmentSize}, 0, r.apply)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer l.Close()
	checkRecords(t, r.recs, 1, ll.last)
	if info.CutBytes != int64(len(torn)) || info.BrokenFile == "" {
		t.Fatalf("info %+v, want %d bytes cut and a broken file", info, len(torn))
	}
	got := readFileT(t, filepath.Join(dir, info.BrokenFile))
	if len(got) > brokenKeep || !bytes.Equal(got, torn[:brokenKeep]) {
		t.Fatalf("%s holds %d bytes, want the first %d of the %d cut", info.BrokenFile, len(got), brokenKeep, len(torn))
	}
}

// TestTornTailCopyNamesAreNotReused cuts two torn tails in turn: the second
// copy gets the next free name.
func TestTornTailCopyNamesAreNotReused(t *testing.T) {
	dir, ll, _ := tornLog(t, 100, 50)
	_, info := reopen(t, dir, Options{SegmentSize: baseSegmentSize})
	if info.BrokenFile != ll.tail().Name+".broken" {
		t.Fatalf("first copy %q", info.BrokenFile)
	}
	tailPath := ll.path(ll.tail().Name)
	writeFileT(t, tailPath, append(readFileT(t, tailPath), frame(1, ll.last+1, testBody(ll.last+1))[:7]...))
	_, info = reopen(t, dir, Options{SegmentSize: baseSegmentSize})
	if info.BrokenFile != ll.tail().Name+".broken.1" || info.CutBytes != 7 {
		t.Fatalf("second repair %+v", info)
	}
	if _, err := os.Stat(ll.path(info.BrokenFile)); err != nil {
		t.Fatal(err)
	}
}

// TestLaterRecordAfter checks where the search for a later record starts
// and which records count as later. The damaged entry sits at offset 0 of
// data and should have carried LSN 10.
func TestLaterRecordAfter(t *testing.T) {
	const want = 10
	overflow := bytes.Repeat([]byte{0xff}, 11)
	// damaged frames a body of n bytes whose CRC is wrong.
	damaged := func(body []byte) []byte {
		f := frame(1, want, body)
		f[len(f)-1] ^= 1
		return f
	}
	later := frame(1, want+1, testBody(want+1))
	cases := []struct {
		name string
		data []byte
		off  int // -1: nothing later follows
	}{
		{"declared_end_past_eof_hides_an_embedded_later_frame",
			frame(1, want, slices.Concat([]byte("b"), later, make([]byte, 40)))[:2+HeaderSize+1+len(later)], -1},
		{"embedded_later_frame_inside_a_whole_damaged_entry",
			damaged(slices.Concat([]byte("b"), later)), -1},
		{"later_frame_at_the_declared_end",
			slices.Concat(damaged([]byte("body")), later), len(damaged([]byte("body")))},
		{"later_frame_after_garbage_past_the_declared_end",
			slices.Concat(damaged([]byte("body")), []byte{7, 7, 7}, later), len(damaged([]byte("body"))) + 3},
		{"frame_with_the_damaged_entry_lsn_is_not_later",
			slices.Concat(damaged([]byte("body")), frame(1, want, testBody(want))), -1},
		{"frame_with_an_earlier_lsn_is_not_later",
			slices.Concat(damaged([]byte("body")), frame(1, want-3, testBody(want-3))), -1},
		{"prefix_overflows_later_frame_at_next_bytes",
			slices.Concat(overflow, later), len(overflow)},
		{"prefix_overflows_earlier_frame_ignored",
			slices.Concat(overflow, frame(1, 1, testBody(1))), -1},
		{"prefix_incomplete_at_eof", []byte{0x80, 0x80}, -1},
		{"zeros", make([]byte, 100), -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := laterRecordAfter(tc.data, 0, want); got != tc.off {
				t.Fatalf("got %d, want %d", got, tc.off)
			}
		})
	}
}
