package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestRollFailureGoesOnInTail fails each step of making the next segment
// in turn. The log is not failed: the roll of a full tail is put off (the
// tail grows by a quarter of SegmentSize, then the roll is tried again and
// succeeds), an elective roll (SyncRoll) returns a plain error and the
// next one succeeds, no file is left behind, and a reopen replays every
// record in order.
func TestRollFailureGoesOnInTail(t *testing.T) {
	for _, op := range []string{"roll", "open", "file.write", "file.sync", "file.close", "rename", "syncdir"} {
		for _, elective := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/elective=%v", op, elective), func(t *testing.T) {
				dir := t.TempDir()
				ffs := NewFaultFS(OSFS(), 0)
				opts := Options{FS: ffs, SegmentSize: 400, Sync: SyncAlways}
				l, _ := openLog(t, dir, opts)
				for range 3 {
					if err := appendAndWait(l); err != nil {
						t.Fatal(err)
					}
				}
				if !elective {
					// Fill the tail: the next append rolls first (a
					// single-record frame here is 74 to 80 bytes).
					for tailSize(t, l)+80 <= opts.SegmentSize {
						if err := appendAndWait(l); err != nil {
							t.Fatal(err)
						}
					}
				}
				segs := len(l.Segments())
				ffs.FailNext(op)
				if elective {
					_, err := l.SyncRoll()
					if err == nil || errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected) {
						t.Fatalf("SyncRoll with %s failing: %v, want a plain error wrapping the cause", op, err)
					}
					if len(l.Segments()) != segs {
						t.Fatalf("segments %v after a failed roll", l.Segments())
					}
					if err := appendAndWait(l); err != nil {
						t.Fatalf("append after a failed roll: %v", err)
					}
					if _, err := l.SyncRoll(); err != nil {
						t.Fatalf("the next SyncRoll: %v", err)
					}
				} else {
					// The failed roll comes at the append that finds the
					// tail full; the roll after it a quarter segment later.
					for len(l.Segments()) == segs {
						if err := appendAndWait(l); err != nil {
							t.Fatalf("append with %s failing: %v", op, err)
						}
						if l.LastLSN() > 100 {
							t.Fatal("no roll after the failed one")
						}
					}
				}
				if l.Err() != nil {
					t.Fatalf("log failed: %v", l.Err())
				}
				if n := l.RollFailures(); n != 1 {
					t.Fatalf("RollFailures %d, want 1", n)
				}
				if len(l.Segments()) != segs+1 {
					t.Fatalf("segments %v, want %d", l.Segments(), segs+1)
				}
				last := l.LastLSN()
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				entries, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					if strings.HasSuffix(e.Name(), ".tmp") {
						t.Errorf("left behind: %s", e.Name())
					}
				}
				recs, _ := reopen(t, dir, opts)
				checkRecords(t, recs, 1, last)
			})
		}
	}
}

// leftSegmentFS fails the directory fsync after a new segment's rename,
// and the removal that would undo it.
type leftSegmentFS struct {
	FS
	mu    sync.Mutex
	armed bool
}

func (f *leftSegmentFS) SyncDir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed {
		return fmt.Errorf("syncdir: %w", ErrInjected)
	}
	return f.FS.SyncDir(dir)
}

func (f *leftSegmentFS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed && filepath.Ext(name) == ".seg" {
		return fmt.Errorf("remove: %w", ErrInjected)
	}
	return f.FS.Remove(name)
}

// TestRollLeavingASegmentFailsTheLog: a new segment whose rename may be
// durable, and that cannot be removed again, would claim the records the
// tail goes on to take: that roll fails the log, and a reopen finds every
// record that was reported.
func TestRollLeavingASegmentFailsTheLog(t *testing.T) {
	dir := t.TempDir()
	lfs := &leftSegmentFS{FS: OSFS()}
	opts := Options{FS: lfs, SegmentSize: 400, Sync: SyncAlways}
	l, _ := openLog(t, dir, opts)
	for range 3 {
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
	}
	last := l.LastLSN()
	lfs.mu.Lock()
	lfs.armed = true
	lfs.mu.Unlock()
	_, err := l.SyncRoll()
	if !errors.Is(err, ErrFailed) || !errors.Is(err, errSegmentLeft) {
		t.Fatalf("SyncRoll = %v, want the log failed with a segment left", err)
	}
	l.Close()
	lfs.mu.Lock()
	lfs.armed = false
	lfs.mu.Unlock()
	recs, _ := reopen(t, dir, opts)
	checkRecords(t, recs, 1, last)
}

// preallocFS is the OS FS with preallocation that fails with ENOSPC while
// full is set, and counts what it set aside.
type preallocFS struct {
	FS
	mu    sync.Mutex
	full  bool
	calls int
}

func (f *preallocFS) Preallocate(file File, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.full {
		return fmt.Errorf("preallocate: %w", syscall.ENOSPC)
	}
	return nil
}

// TestSegmentSpaceReserved: each new segment, and the tail at Open, has
// its space set aside; a disk without the room for it makes the segment
// all the same (Unreserved counts it), so a tight disk still rolls and
// the records go on.
func TestSegmentSpaceReserved(t *testing.T) {
	dir := t.TempDir()
	pfs := &preallocFS{FS: OSFS()}
	opts := Options{FS: pfs, SegmentSize: 400, Sync: SyncAlways}
	l, _ := openLog(t, dir, opts)
	if pfs.calls != 1 || l.Unreserved() != 0 {
		t.Fatalf("fresh log: %d preallocations, %d unreserved", pfs.calls, l.Unreserved())
	}
	if err := appendUntilRoll(l); err != nil {
		t.Fatal(err)
	}
	if pfs.calls != 2 {
		t.Fatalf("after a roll: %d preallocations", pfs.calls)
	}
	pfs.mu.Lock()
	pfs.full = true
	pfs.mu.Unlock()
	if err := appendUntilRoll(l); err != nil {
		t.Fatalf("roll on a disk without room for a segment: %v", err)
	}
	if l.Unreserved() != 1 || l.RollFailures() != 0 || l.Err() != nil {
		t.Fatalf("unreserved %d, roll failures %d, err %v", l.Unreserved(), l.RollFailures(), l.Err())
	}
	last := l.LastLSN()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs, _ := reopen(t, dir, opts)
	checkRecords(t, recs, 1, last)
}

// TestReservedSpaceGivenBack: on the OS FS a sealed segment and a closed
// log's tail hold no blocks past their end: what was set aside and not
// written is given back.
func TestReservedSpaceGivenBack(t *testing.T) {
	dir := t.TempDir()
	const size = 1 << 20
	l, _ := openLog(t, dir, Options{SegmentSize: size, Sync: SyncNever})
	if l.Unreserved() != 0 {
		t.Skip("this filesystem cannot preallocate")
	}
	if err := appendAndWait(l); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if blocks := allocated(t, segs[0].Path); blocks < size {
		t.Fatalf("tail holds %d bytes on the disk, want its segment's %d set aside", blocks, size)
	}
	if _, err := l.SyncRoll(); err != nil {
		t.Fatal(err)
	}
	if blocks := allocated(t, segs[0].Path); blocks >= size {
		t.Fatalf("sealed segment of %d bytes holds %d on the disk", segs[0].Size, blocks)
	}
	tail := l.Segments()[1].Path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if blocks := allocated(t, tail); blocks >= size {
		t.Fatalf("closed tail holds %d bytes on the disk", blocks)
	}
}

// allocated is what the file at path holds on the disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no block count on this system")
	}
	return st.Blocks * 512
}

// tailSize is the size of l's tail segment file.
func tailSize(t *testing.T, l *Log) int64 {
	t.Helper()
	segs := l.Segments()
	info, err := os.Stat(segs[len(segs)-1].Path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}
