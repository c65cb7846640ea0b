package wal

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
)

// reviewLeftFS is the OS FS, preallocation included, that fails (while
// armed) the directory fsync after a new segment's rename and the removal
// that would undo it: a roll that leaves a segment and fails the log.
type reviewLeftFS struct {
	FS
	mu    sync.Mutex
	armed bool
}

func (f *reviewLeftFS) Preallocate(file File, n int64) error {
	return f.FS.(Preallocator).Preallocate(file, n)
}

func (f *reviewLeftFS) SyncDir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed {
		return ErrInjected
	}
	return f.FS.SyncDir(dir)
}

func (f *reviewLeftFS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed && filepath.Ext(name) == ".seg" {
		return ErrInjected
	}
	return f.FS.Remove(name)
}

// TestReviewDiskFailedLogKeepsSetAsideSpace: the tail's space set aside
// is given back when it is sealed by a roll or by a Close that succeeds.
// A log that failed (here: a roll that left its new segment behind)
// closes without giving it back, and the next Open makes the new segment
// the tail: the old one is now sealed and never released, keeping all of
// SegmentSize past its end for as long as it lives (in the log or kept in
// bodies/). guarantees.md: "the part not written is given back when it is
// sealed or closed".
func TestReviewDiskFailedLogKeepsSetAsideSpace(t *testing.T) {
	dir := t.TempDir()
	const size = 4 << 20
	lfs := &reviewLeftFS{FS: OSFS()}
	opts := Options{FS: lfs, SegmentSize: size, Sync: SyncAlways}
	l, _ := openLog(t, dir, opts)
	if l.Unreserved() != 0 {
		t.Skip("this filesystem cannot preallocate")
	}
	for range 3 {
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
	}
	old := l.Segments()[0]
	lfs.mu.Lock()
	lfs.armed = true
	lfs.mu.Unlock()
	if _, err := l.SyncRoll(); !errors.Is(err, ErrFailed) {
		t.Fatalf("SyncRoll = %v, want the log failed", err)
	}
	l.Close()
	lfs.mu.Lock()
	lfs.armed = false
	lfs.mu.Unlock()
	l, _ = openLog(t, dir, opts)
	if err := appendAndWait(l); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) < 2 || segs[0].Name != old.Name {
		t.Fatalf("segments %v", segs)
	}
	if blocks := allocated(t, old.Path); blocks > segs[0].Size+64<<10 {
		t.Errorf("sealed segment %s of %d bytes holds %d KiB on the disk after the reopen: the space set aside is never given back",
			old.Name, segs[0].Size, blocks>>10)
	}
}
