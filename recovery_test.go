package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// fixedBackoff keeps replay comparisons free of jitter.
func fixedBackoff(attempt int) time.Duration { return time.Duration(attempt) * 100 * time.Millisecond }

// randomHistory drives q through n random calls with the clock moving.
func randomHistory(t *testing.T, q *Queue, clock *ManualClock, rng *rand.Rand, n int) {
	t.Helper()
	ctx := context.Background()
	var leases []Message
	for i := 0; i < n; i++ {
		switch op := rng.IntN(10); {
		case op < 3:
			var opts []PutOption
			if rng.IntN(3) == 0 {
				opts = append(opts, WithDelay(time.Duration(rng.IntN(500))*time.Millisecond))
			}
			if rng.IntN(4) == 0 {
				opts = append(opts, WithKey(fmt.Sprint("k", rng.IntN(8))))
			}
			if rng.IntN(5) == 0 {
				opts = append(opts, WithDeadline(clock.Now().Add(time.Second)))
			}
			opts = append(opts, WithPriority(rng.IntN(3)))
			if _, err := q.Put(ctx, []byte(fmt.Sprint("body", i)), opts...); err != nil && !errors.Is(err, ErrDuplicate) {
				t.Fatalf("put: %v", err)
			}
		case op < 5:
			if m, ok, err := q.TryGet(); err != nil {
				t.Fatalf("get: %v", err)
			} else if ok {
				leases = append(leases, m)
			}
		case op < 8 && len(leases) > 0:
			j := rng.IntN(len(leases))
			m := leases[j]
			leases = append(leases[:j], leases[j+1:]...)
			var err error
			switch rng.IntN(4) {
			case 0:
				err = q.Ack(m.Receipt)
			case 1:
				err = q.Nack(m.Receipt, errors.New("failed"))
			case 2:
				err = q.DeadLetter(m.Receipt, errors.New("permanent"))
			case 3:
				err = q.Extend(m.Receipt, time.Second)
				leases = append(leases, m)
			}
			if err != nil && !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("end lease: %v", err)
			}
		case op == 8:
			if dl := q.DeadLetters(2); len(dl) > 0 {
				var err error
				if rng.IntN(2) == 0 {
					err = q.Redrive(dl[0].ID)
				} else {
					err = q.PurgeDeadLetters(dl[0].ID)
				}
				if err != nil {
					t.Fatalf("redrive/purge: %v", err)
				}
			}
		default:
			clock.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
			q.settle()
		}
	}
}

// TestReplayEquivalence: for random histories, reopening the directory
// yields the live state, with and without a snapshot in between, modulo the
// leases that recovery ends as expired (whose records are replayed onto the
// live state to compare). The reopen is in this process: the fsyncs are
// skipped (noSyncFS). A build with the tag long runs all 12 seeds; the
// default run 6 of them, the first and the last among them (sampled).
func TestReplayEquivalence(t *testing.T) {
	run := sampled(t, 12, 6)
	for seed := uint64(1); seed <= 12; seed++ {
		if !run[seed-1] {
			continue
		}
		for _, compact := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed%d/compact=%v", seed, compact), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				dir := t.TempDir()
				clock := NewManualClock(epoch)
				opts := Options{Clock: clock, Backoff: fixedBackoff, MaxAttempts: 3, Visibility: time.Second,
					SegmentSize: 4096, DisableAutoCompact: true, fs: noSyncOS()}
				q, err := Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				randomHistory(t, q, clock, rng, 150)
				if compact {
					if err := q.Compact(); err != nil {
						t.Fatal(err)
					}
					randomHistory(t, q, clock, rng, 50)
				}
				live := q.stateBytes()
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				q2, err := Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer q2.Close()
				expected := withRecoveryRecords(t, dir, live)
				if got := q2.stateBytes(); !bytes.Equal(got, expected) {
					t.Fatalf("reopened state differs from the live one (%d vs %d bytes)", len(got), len(expected))
				}
			})
		}
	}
}

// withRecoveryRecords applies to a state the records that recovery appended
// after it (the expiry of leases open at the close).
func withRecoveryRecords(t *testing.T, dir string, stateBytes []byte) []byte {
	t.Helper()
	st, err := state.UnmarshalSnapshot(stateBytes)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wal.Scan(filepath.Join(dir, layout.LogDirName), st.LastLSN()+1, 0, func(_ wal.Position, rec wal.Record) error {
		if rec.Type != state.TypeExpire {
			return fmt.Errorf("recovery wrote a %s record", state.TypeName(rec.Type))
		}
		r, err := state.Decode(rec.Type, rec.Body)
		if err != nil {
			return err
		}
		return st.Apply(rec.LSN, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// baseQueueDir builds a queue directory with several segments and every
// kind of item, all leases ended, and returns its path and state.
func baseQueueDir(t *testing.T, opts Options) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	clock := opts.Clock.(*ManualClock)
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	randomHistory(t, q, clock, rand.New(rand.NewPCG(42, 42)), 200) // four segments
	// End every open lease so reopening changes nothing.
	clock.Advance(time.Hour)
	q.settle()
	want := q.stateBytes()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

// pruned is the state with the keys whose window has passed at now
// forgotten: compaction drops them, and no call can tell the difference.
func pruned(t *testing.T, stateBytes []byte, now time.Time) []byte {
	t.Helper()
	st, err := state.UnmarshalSnapshot(stateBytes)
	if err != nil {
		t.Fatal(err)
	}
	st.PruneKeys(now.UnixNano(), int64(defaultKeyWindow))
	// Compaction copies bodies forward: compare the items, not where
	// their bodies lie.
	return st.Fingerprint()
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// faultTestOptions are the options of the fault tests: a manual clock, no
// jitter, small segments, compaction only on demand, and fsyncs that do not
// wait for the disk (noSyncFS: the tests reopen in this process, and a
// FaultFS over it still counts and fails every fsync).
func faultTestOptions() Options {
	return Options{Clock: NewManualClock(epoch), Backoff: fixedBackoff, MaxAttempts: 3,
		Visibility: time.Second, SegmentSize: 4096, DisableAutoCompact: true, fs: noSyncOS()}
}

// withFS returns opts with the queue's own file operations going through
// fsys.
func withFS(opts Options, fsys wal.FS) Options {
	opts.fs = fsys
	return opts
}

// countOps opens a copy of base through a counting FS and reports how many
// file operations Open took, and how many it had taken after one Compact,
// and names each operation (ops[i] is operation i+1, as FaultFS counts).
func countOps(t *testing.T, base string, opts Options) (opened, compacted int, ops []string) {
	t.Helper()
	rec := &opRecorder{FS: opts.fs}
	probe := wal.NewFaultFS(rec, 0)
	q, err := Open(copyDir(t, base), withFS(opts, probe))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	opened = probe.Calls()
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	compacted = probe.Calls()
	ops = rec.names()
	if len(ops) < compacted {
		t.Fatalf("the recorder saw %d operations, FaultFS counted %d", len(ops), compacted)
	}
	return opened, compacted, ops[:compacted]
}

// faultSteps chooses the operations a fault test fails, among first..last
// (FaultFS's numbering; ops[n-1] names operation n). A build with the tag
// long fails every one. The default run fails a sample: the first and the
// last, the first of each kind of operation (each fsync, rename, removal,
// directory read... fails at least once; a kind's first occurrence is
// where a phase of the work starts) and four more at random (sampleSeed).
func faultSteps(t *testing.T, first, last int, ops []string) []int {
	t.Helper()
	if testrule.Long {
		steps := make([]int, 0, last-first+1)
		for n := first; n <= last; n++ {
			steps = append(steps, n)
		}
		return steps
	}
	chosen := map[int]bool{first: true, last: true}
	seen := map[string]bool{}
	for n := first; n <= last; n++ {
		if !seen[ops[n-1]] {
			seen[ops[n-1]] = true
			chosen[n] = true
		}
	}
	rng := rand.New(rand.NewPCG(sampleSeed(t), 0xfa17))
	for want := len(chosen) + 4; len(chosen) < min(want, last-first+1); {
		chosen[first+rng.IntN(last-first+1)] = true
	}
	steps := make([]int, 0, len(chosen))
	for n := range chosen {
		steps = append(steps, n)
	}
	slices.Sort(steps)
	t.Logf("failing %d of operations %d..%d (the tag long fails every one): %v", len(steps), first, last, steps)
	return steps
}

// runFaultSteps runs step as a parallel subtest for each of steps, each on
// a directory of its own.
func runFaultSteps(t *testing.T, steps []int, step func(t *testing.T, n int)) {
	t.Helper()
	for _, n := range steps {
		t.Run(fmt.Sprintf("op%d", n), func(t *testing.T) {
			t.Parallel()
			step(t, n)
		})
	}
}

// opRecorder names every operation it passes on, as FaultFS names them.
type opRecorder struct {
	wal.FS
	mu  sync.Mutex
	ops []string
}

func (r *opRecorder) add(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

func (r *opRecorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func (r *opRecorder) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	r.add("open")
	f, err := r.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &recordedFile{File: f, r: r}, nil
}

func (r *opRecorder) Rename(oldpath, newpath string) error {
	r.add("rename")
	return r.FS.Rename(oldpath, newpath)
}

func (r *opRecorder) Link(oldname, newname string) error {
	r.add("link")
	return r.FS.Link(oldname, newname)
}

func (r *opRecorder) Remove(name string) error { r.add("remove"); return r.FS.Remove(name) }

func (r *opRecorder) MkdirAll(path string, perm os.FileMode) error {
	r.add("mkdirall")
	return r.FS.MkdirAll(path, perm)
}

func (r *opRecorder) ReadDir(name string) ([]os.DirEntry, error) {
	r.add("readdir")
	return r.FS.ReadDir(name)
}

func (r *opRecorder) Stat(name string) (os.FileInfo, error) { r.add("stat"); return r.FS.Stat(name) }

func (r *opRecorder) Truncate(name string, size int64) error {
	r.add("truncate")
	return r.FS.Truncate(name, size)
}

func (r *opRecorder) SyncDir(dir string) error { r.add("syncdir"); return r.FS.SyncDir(dir) }
func (r *opRecorder) Check(op string) error    { r.add(op); return r.FS.Check(op) }

func (r *opRecorder) DropCache(f wal.File) error {
	r.add("dropcache")
	if rf, ok := f.(*recordedFile); ok {
		f = rf.File
	}
	if d, ok := r.FS.(wal.CacheDropper); ok {
		return d.DropCache(f)
	}
	return nil
}

func (r *opRecorder) Preallocate(f wal.File, n int64) error {
	r.add("preallocate")
	if rf, ok := f.(*recordedFile); ok {
		f = rf.File
	}
	if p, ok := r.FS.(wal.Preallocator); ok {
		return p.Preallocate(f, n)
	}
	return wal.ErrNoPreallocate
}

type recordedFile struct {
	wal.File
	r *opRecorder
}

func (f *recordedFile) Read(p []byte) (int, error) { f.r.add("file.read"); return f.File.Read(p) }
func (f *recordedFile) ReadAt(p []byte, off int64) (int, error) {
	f.r.add("file.readat")
	return f.File.ReadAt(p, off)
}
func (f *recordedFile) Write(p []byte) (int, error) { f.r.add("file.write"); return f.File.Write(p) }
func (f *recordedFile) WriteAt(p []byte, off int64) (int, error) {
	f.r.add("file.writeat")
	return f.File.WriteAt(p, off)
}
func (f *recordedFile) Sync() error                { f.r.add("file.sync"); return f.File.Sync() }
func (f *recordedFile) Stat() (os.FileInfo, error) { f.r.add("file.stat"); return f.File.Stat() }
func (f *recordedFile) Truncate(size int64) error {
	f.r.add("file.truncate")
	return f.File.Truncate(size)
}
func (f *recordedFile) Close() error { f.r.add("file.close"); return f.File.Close() }

// TestCompactionFaults fails the N-th file operation of a compaction, as
// pebble's TestErrors does: the queue may fail, but reopening always yields
// the same state, and a second compaction then succeeds. A build with the
// tag long fails every operation; the default run a sample (faultSteps).
func TestCompactionFaults(t *testing.T) {
	opts := faultTestOptions()
	clock := opts.Clock.(*ManualClock)
	base, want := baseQueueDir(t, opts)

	opened, compacted, ops := countOps(t, base, opts)
	if compacted-opened < 5 {
		t.Fatalf("compaction ran only %d file operations", compacted-opened)
	}

	runFaultSteps(t, faultSteps(t, opened+1, compacted, ops), func(t *testing.T, n int) {
		dir := copyDir(t, base)
		ffs := wal.NewFaultFS(opts.fs, n)
		q, err := Open(dir, withFS(opts, ffs))
		if err != nil {
			t.Fatalf("op %d: open: %v", n, err)
		}
		cerr := q.Compact()
		if !ffs.Failed() {
			t.Fatalf("op %d: no operation failed (compaction returned %v)", n, cerr)
		}
		q.Close()

		q, err = Open(dir, opts)
		if err != nil {
			t.Fatalf("op %d failed (compact: %v); reopen: %v", n, cerr, err)
		}
		if got := q.stateBytes(); !bytes.Equal(pruned(t, got, clock.Now()), pruned(t, want, clock.Now())) {
			t.Fatalf("op %d failed (compact: %v); reopened state differs", n, cerr)
		}
		if err := q.Compact(); err != nil {
			t.Fatalf("op %d: compaction after reopen: %v", n, err)
		}
		q.Close()
		q, err = Open(dir, opts)
		if err != nil {
			t.Fatalf("op %d: reopen after the second compaction: %v", n, err)
		}
		if got := q.stateBytes(); !bytes.Equal(pruned(t, got, clock.Now()), pruned(t, want, clock.Now())) {
			t.Fatalf("op %d: state differs after the second compaction", n)
		}
		q.Close()
	})
}

// TestOpenFaults fails the N-th file operation of Open itself: Open fails
// cleanly (never half-opened, lock released) and a normal Open afterwards
// sees the same state. A build with the tag long fails every operation;
// the default run a sample (faultSteps).
func TestOpenFaults(t *testing.T) {
	opts := faultTestOptions()
	base, want := baseQueueDir(t, opts)
	total, _, ops := countOps(t, base, opts)
	runFaultSteps(t, faultSteps(t, 1, total, ops), func(t *testing.T, n int) {
		dir := copyDir(t, base)
		ffs := wal.NewFaultFS(opts.fs, n)
		if q, err := Open(dir, withFS(opts, ffs)); err == nil {
			q.Close()
		}
		q, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("op %d failed during open; reopen: %v", n, err)
		}
		if got := q.stateBytes(); !bytes.Equal(got, want) {
			t.Fatalf("op %d failed during open; state differs", n)
		}
		q.Close()
	})
}

// TestWriteFailureFailsQueue: a failed write or fsync stops the queue for
// good (ErrFailed on every call) and reopening recovers what was durable.
func TestWriteFailureFailsQueue(t *testing.T) {
	for _, op := range []string{"write", "sync"} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			ffs := wal.NewFaultFS(wal.OSFS(), 0)
			clock := NewManualClock(epoch)
			q, err := Open(dir, Options{Clock: clock, fs: ffs})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			kept := mustPut(t, q, "kept")
			ffs.FailNext(op)
			if _, err := q.Put(ctx, []byte("lost")); !errors.Is(err, ErrFailed) {
				t.Fatalf("put during failure = %v, want ErrFailed", err)
			}
			if _, err := q.Put(ctx, []byte("after")); !errors.Is(err, ErrFailed) {
				t.Fatalf("put after failure = %v, want ErrFailed", err)
			}
			if _, _, err := q.TryGet(); !errors.Is(err, ErrFailed) {
				t.Fatalf("get after failure = %v, want ErrFailed", err)
			}
			q.Close()
			q, err = Open(dir, Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			m := mustTryGet(t, q)
			if m.ID != kept {
				t.Fatalf("got %d, want the durable item %d", m.ID, kept)
			}
		})
	}
}

// TestDiskUseBoundedByLiveData: an old dead letter and a long-delayed item
// never pin the log: a compaction leaves a few segments of the dozens that
// churn filled. What it checks is the log's size, not durability: the
// fsyncs are skipped (noSyncFS).
func TestDiskUseBoundedByLiveData(t *testing.T) {
	q, _, _ := testQueue(t, Options{SegmentSize: 4096, DisableAutoCompact: true, MaxAttempts: 1, fs: noSyncOS()})
	ctx := context.Background()
	mustPut(t, q, "old and delayed", WithDelay(24*time.Hour))
	mustPut(t, q, "will die")
	m := mustTryGet(t, q)
	if err := q.DeadLetter(m.Receipt, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	// 600 cycles of 200-byte bodies fill some sixty 4 KiB segments behind
	// the two old items (2,000 cycles in a build with the tag long).
	cycles := 600
	if testrule.Long {
		cycles = 2000
	}
	body := bytes.Repeat([]byte("x"), 200)
	for i := 0; i < cycles; i++ {
		if _, err := q.Put(ctx, body); err != nil {
			t.Fatal(err)
		}
		m := mustTryGet(t, q)
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	before := q.Stats()
	t.Logf("before compaction: %d log bytes in %d segments", before.LogBytes, before.LogSegments)
	if before.LogSegments < 20 {
		t.Fatalf("before compaction: only %d log segments", before.LogSegments)
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	after := q.Stats()
	if after.LogBytes > 3*4096+2*after.LiveBytes || after.LogSegments > 3 {
		t.Fatalf("after compaction: %d log bytes in %d segments for %d live bytes (before: %d bytes)",
			after.LogBytes, after.LogSegments, after.LiveBytes, before.LogBytes)
	}
}

// TestAutoCompaction: compaction starts by itself once the log passes
// CompactMinBytes and CompactRatio times the live data, and the queue keeps
// serving meanwhile. Durability is not the question: the fsyncs are skipped
// (noSyncFS).
func TestAutoCompaction(t *testing.T) {
	done := make(chan error, 16)
	q, _, dir := testQueue(t, Options{SegmentSize: 4096, CompactMinBytes: 32 << 10, CompactRatio: 2,
		onCompact: func(err error) { done <- err }, fs: noSyncOS()})
	ctx := context.Background()
	body := bytes.Repeat([]byte("b"), 100)
	compacted := false
	for i := 0; i < 5000 && !compacted; i++ {
		if _, err := q.Put(ctx, body); err != nil {
			t.Fatal(err)
		}
		m := mustTryGet(t, q)
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("automatic compaction: %v", err)
			}
			compacted = true
		default:
		}
	}
	if !compacted {
		t.Fatalf("no automatic compaction after 5000 cycles (log %d bytes)", q.Stats().LogBytes)
	}
	if st := q.Stats(); st.Compactions == 0 || st.SnapshotLSN == 0 {
		t.Fatalf("stats %+v", st)
	}
	// Close waits for a compaction in flight, which may be between writing
	// its snapshot and removing the older one.
	q.Close()
	if snaps := snapshots(t, dir); len(snaps) != 1 {
		t.Fatalf("%d snapshots after compaction, want 1", len(snaps))
	}
}
