package walq

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// reviewDirSyncFS tracks, per directory, the entries created since its
// last successful fsync (what a power loss may take away), and fails the
// fsync of the directory named failDir once.
type reviewDirSyncFS struct {
	wal.FS
	mu      sync.Mutex
	failDir string
	fresh   map[string]map[string]bool // dir -> names created since its last successful fsync
}

func (f *reviewDirSyncFS) created(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fresh == nil {
		f.fresh = map[string]map[string]bool{}
	}
	d := filepath.Clean(filepath.Dir(path))
	if f.fresh[d] == nil {
		f.fresh[d] = map[string]bool{}
	}
	f.fresh[d][filepath.Base(path)] = true
}

func (f *reviewDirSyncFS) Link(oldname, newname string) error {
	err := f.FS.Link(oldname, newname)
	if err == nil {
		f.created(newname)
	}
	return err
}

func (f *reviewDirSyncFS) Rename(oldpath, newpath string) error {
	err := f.FS.Rename(oldpath, newpath)
	if err == nil {
		f.created(newpath)
	}
	return err
}

func (f *reviewDirSyncFS) SyncDir(dir string) error {
	f.mu.Lock()
	fail := f.failDir != "" && filepath.Clean(dir) == f.failDir
	if fail {
		f.failDir = ""
	}
	f.mu.Unlock()
	if fail {
		return errors.New("injected: directory fsync failed")
	}
	if err := f.FS.SyncDir(dir); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.fresh, filepath.Clean(dir))
	f.mu.Unlock()
	return nil
}

// notDurable lists the entries of dir created since its last successful
// fsync.
func (f *reviewDirSyncFS) notDurable(dir string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for n := range f.fresh[filepath.Clean(dir)] {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestReviewDiskKeptLinkNeverSynced: MoveFront links a dense segment
// into bodies/ and fsyncs bodies/ before it removes the log's name; when
// that fsync fails it leaves both names, saying "the next move finds the
// link there and syncs again". But the next compaction does not move the
// segment: it lists the link as a kept segment, counts the live bodies to
// it, finds the log's name empty and removes it with TruncateFront, which
// fsyncs the log directory and never bodies/. The file's only name is then
// one whose directory entry no fsync covers: a power loss takes it, and
// with it the bodies of items reported stored (they are delivered as dead
// letters with a BodyError, or lost).
func TestReviewDiskKeptLinkNeverSynced(t *testing.T) {
	dir := t.TempDir()
	bodiesDir := filepath.Join(dir, layout.BodiesDirName)
	dfs := &reviewDirSyncFS{FS: wal.OSFS()}
	opts := withFS(Options{SegmentSize: 4096, DisableAutoCompact: true, noCloseSnapshot: true}, dfs)
	q, err := Open(dir, opts)
	must(t, err)
	ctx := context.Background()
	body := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 1000) }
	// Dense bodies: the sealed segments are kept whole (moved to bodies/).
	n := 0
	for len(q.log.Segments()) < 2 {
		_, err := q.Put(ctx, body(n))
		must(t, err)
		n++
	}
	_, err = q.Put(ctx, body(n)) // one in the tail
	must(t, err)
	n++
	must(t, os.MkdirAll(bodiesDir, 0o700)) // as an earlier move left it
	dfs.mu.Lock()
	dfs.failDir = filepath.Clean(bodiesDir)
	dfs.mu.Unlock()
	err = q.Compact()
	t.Logf("compaction with the fsync of bodies/ failing: %v", err)
	if err == nil {
		t.Fatal("the compaction did not meet the failed fsync")
	}
	err = q.Compact()
	t.Logf("the next compaction: %v; log %v", err, q.log.Segments())
	must(t, err)
	must(t, q.Close())
	lost := dfs.notDurable(bodiesDir)
	t.Logf("entries of bodies/ no fsync covers: %v", lost)
	if len(lost) > 0 {
		t.Errorf("after the compactions and Close, bodies/ holds %v with no fsync of bodies/ since it was linked, and its log name is gone", lost)
	}
	// A power loss now: the entries no fsync covers are gone.
	for _, name := range lost {
		must(t, os.Remove(filepath.Join(bodiesDir, name)))
	}
	q, err = Open(dir, withFS(opts, wal.OSFS()))
	if err != nil {
		t.Fatalf("open after the power loss: %v", err)
	}
	defer q.Close()
	got := 0
	for {
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got++
		must(t, q.Ack(m.Receipt))
	}
	st := q.Stats()
	if got != n || st.Dead != 0 {
		t.Errorf("after the power loss: %d of %d items delivered, %d dead letters (body failures %d)", got, n, st.Dead, st.Bodies.Failures)
	}
}
