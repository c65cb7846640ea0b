package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// TestFailedSnapshotWriteEndsItsFreeze: a snapshot whose write fails (a
// full disk) gives up its Freeze, and the next compaction writes one. On
// 997a6e0 the Freeze stayed open: every later compaction failed with
// "snapshot: another is being written" until the process restarted, and
// the state went on copying chunks for a snapshot nobody wrote.
func TestFailedSnapshotWriteEndsItsFreeze(t *testing.T) {
	ffs := wal.NewFaultFS(noSyncOS(), 0)
	q, _, _ := testQueue(t, withFS(Options{DisableAutoCompact: true, Sync: SyncNever}, ffs))
	ctx := context.Background()
	// Enough state that the snapshot writes a 1 MiB piece before its
	// commit: keys of 64 bytes make each item's entry about 80.
	items := make([]Item, 1000)
	for b := range 20 {
		for i := range items {
			items[i] = Item{Body: []byte("x"), Key: fmt.Sprintf("%064d", b*len(items)+i)}
		}
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	ffs.FailNextWith("file.write", syscall.ENOSPC)
	if err := q.Compact(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Compact with the snapshot's write failing = %v, want ENOSPC", err)
	}
	if st := q.Stats(); st.CompactionsFailed != 1 || st.SnapshotLSN != 0 {
		t.Fatalf("after the failed write: CompactionsFailed %d, SnapshotLSN %d; want 1 and 0", st.CompactionsFailed, st.SnapshotLSN)
	}
	mustPut(t, q, "after")
	if err := q.Compact(); err != nil {
		t.Fatalf("the compaction after a failed snapshot write: %v", err)
	}
	st := q.Stats()
	if st.SnapshotLSN != st.LastLSN || st.Compactions != 1 {
		t.Fatalf("after the second compaction: SnapshotLSN %d of %d, Compactions %d", st.SnapshotLSN, st.LastLSN, st.Compactions)
	}
}

// TestFailedCompactionTriesAgainOnATimer: after an automatic compaction
// failed, the next is tried on a timer of the queue's clock, not once the
// log has doubled: on a tight disk a log never doubles. On 997a6e0 no
// compaction came after the failure until the log reached twice its size.
func TestFailedCompactionTriesAgainOnATimer(t *testing.T) {
	ffs := wal.NewFaultFS(noSyncOS(), 0)
	done := make(chan error, 16)
	q, clock, _ := testQueue(t, withFS(Options{CompactMinBytes: 32 << 10, CompactRatio: 2,
		onCompact: func(err error) { done <- err }}, ffs))
	ctx := context.Background()
	body := make([]byte, 100)
	cycle := func() {
		t.Helper()
		if _, err := q.Put(ctx, body); err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(mustTryGet(t, q).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	// The first automatic compaction cannot create its snapshot file (the
	// log rolls no segment at this size, so the next open is the
	// snapshot's).
	ffs.FailNextWith("open", syscall.ENOSPC)
	var first error
	for i := 0; first == nil; i++ {
		if i == 5000 {
			t.Fatal("no automatic compaction in 5,000 cycles")
		}
		cycle()
		select {
		case first = <-done:
			if first == nil {
				t.Fatal("the first compaction succeeded; want it failed")
			}
		default:
		}
	}
	failedAt := q.Stats().LogBytes
	// The loop armed its retry timer before it reported the failure;
	// appends meanwhile start nothing.
	for range 10 {
		cycle()
	}
	select {
	case err := <-done:
		t.Fatalf("a compaction (%v) before the retry's time", err)
	default:
	}
	clock.Advance(compactRetryMin)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the retried compaction: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction after the retry's time")
	}
	st := q.Stats()
	if st.Compactions != 1 || st.CompactionsFailed != 1 {
		t.Fatalf("Compactions %d, CompactionsFailed %d; want 1 and 1", st.Compactions, st.CompactionsFailed)
	}
	if st.LogBytes >= 2*failedAt {
		t.Fatalf("the log grew from %d to %d before the retry", failedAt, st.LogBytes)
	}
}

// TestDeletedQueueCopiesNoHeldBacklog: deleting a queue costs a compaction
// what the deleted queue held, not a copy of every other queue's held
// backlog. On 997a6e0 a compaction after the delete of a queue of one item
// copied forward every live body of the directory (here 1 MiB, in a
// service 16 MiB per one-item queue deleted, every time).
func TestDeletedQueueCopiesNoHeldBacklog(t *testing.T) {
	q, _, _ := testQueue(t, Options{SegmentSize: 64 << 10, DisableAutoCompact: true, Sync: SyncNever, fs: noSyncOS()})
	ctx := context.Background()
	items := make([]Item, 64)
	for i := range items {
		items[i].Body = make([]byte, 1<<10)
	}
	for range 16 { // 1 MiB held in the default queue, over 16 segments
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	before := q.Stats().Bodies.RelocatedBytes
	if before != 0 {
		t.Fatalf("the first compaction of a dense backlog copied %d bytes", before)
	}
	for round := range 3 {
		other, err := q.OpenQueue(fmt.Sprintf("brief-%d", round), QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Put(ctx, []byte("one item")); err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(false); err != nil {
			t.Fatal(err)
		}
		if err := q.Compact(); err != nil {
			t.Fatal(err)
		}
		if got := q.Stats().Bodies.RelocatedBytes - before; got > 4<<10 {
			t.Fatalf("round %d: the compaction after deleting a queue of one item copied %d bytes of the held backlog", round, got)
		}
	}
}

// snapshotFaultFS fails, with ENOSPC, the n-th operation on a snapshot
// file (its creation, each write, fsync and close of it, its rename);
// nothing else.
type snapshotFaultFS struct {
	wal.FS
	mu     sync.Mutex
	n, ops int
	failed bool
}

func (s *snapshotFaultFS) step() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops++
	if s.ops == s.n {
		s.failed = true
		return syscall.ENOSPC
	}
	return nil
}

func isSnapshot(path string) bool { return strings.HasPrefix(filepath.Base(path), "snapshot-") }

func (s *snapshotFaultFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	if !isSnapshot(name) || flag&os.O_CREATE == 0 {
		return s.FS.OpenFile(name, flag, perm)
	}
	if err := s.step(); err != nil {
		return nil, err
	}
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &snapshotFaultFile{File: f, fs: s}, nil
}

func (s *snapshotFaultFS) Rename(oldpath, newpath string) error {
	if isSnapshot(newpath) {
		if err := s.step(); err != nil {
			return err
		}
	}
	return s.FS.Rename(oldpath, newpath)
}

type snapshotFaultFile struct {
	wal.File
	fs *snapshotFaultFS
}

func (f *snapshotFaultFile) Write(p []byte) (int, error) {
	if err := f.fs.step(); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *snapshotFaultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.step(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *snapshotFaultFile) Sync() error {
	if err := f.fs.step(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *snapshotFaultFile) Close() error {
	if err := f.fs.step(); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}

// TestSnapshotFaultsKeepServing fails each operation on the snapshot file
// of a compaction in turn, with ENOSPC, as a disk that filled under it
// would: the compaction fails, the queue keeps serving (puts, leases,
// acks), the next compaction succeeds without a reopen, and a reopen then
// finds the state the calls left.
func TestSnapshotFaultsKeepServing(t *testing.T) {
	opts := faultTestOptions()
	base, _ := baseQueueDir(t, opts)
	// Count the snapshot operations of one compaction.
	counter := &snapshotFaultFS{FS: opts.fs}
	q, err := Open(copyDir(t, base), withFS(opts, counter))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	q.Close()
	total := counter.ops
	t.Logf("%d operations on the snapshot file", total)
	if total < 4 {
		t.Fatalf("a compaction made only %d operations on its snapshot", total)
	}
	ctx := context.Background()
	for n := 1; n <= total; n++ {
		dir := copyDir(t, base)
		ffs := &snapshotFaultFS{FS: opts.fs, n: n}
		q, err := Open(dir, withFS(opts, ffs))
		if err != nil {
			t.Fatal(err)
		}
		cerr := q.Compact()
		if !ffs.failed || !errors.Is(cerr, syscall.ENOSPC) {
			t.Fatalf("op %d of %d: failed %v, Compact = %v; want ENOSPC", n, total, ffs.failed, cerr)
		}
		id, err := q.Put(ctx, []byte("after a failed snapshot"))
		if err != nil {
			t.Fatalf("op %d: a put after the failed compaction: %v", n, err)
		}
		m, ok, err := q.TryGet()
		if err != nil || !ok {
			t.Fatalf("op %d: a lease after the failed compaction: %v %v", n, ok, err)
		}
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatalf("op %d: an ack after the failed compaction: %v", n, err)
		}
		if err := q.Compact(); err != nil {
			t.Fatalf("op %d: the compaction after the failed one: %v", n, err)
		}
		want := q.stateBytes()
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q, err = Open(dir, opts)
		if err != nil {
			t.Fatalf("op %d: reopen: %v", n, err)
		}
		if got := q.stateBytes(); !bytes.Equal(got, want) {
			t.Fatalf("op %d: the reopened state differs from the one the calls left (item %d put)", n, id)
		}
		q.Close()
	}
}
