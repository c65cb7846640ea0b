package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	var batches, batched, batchBytes atomic.Int64
	var syncs atomic.Int64
	opts := Options{
		SegmentSize: 16 << 10,
		OnBatch: func(records, bytes int) {
			batches.Add(1)
			batched.Add(int64(records))
			batchBytes.Add(int64(bytes))
		},
		OnSync: func(time.Duration) { syncs.Add(1) },
	}
	l, _ := openLog(t, dir, opts)
	const writers, perWriter = 32, 100
	appendConcurrently(t, l, writers, perWriter)
	const total = writers * perWriter
	if l.LastLSN() != total || l.DurableLSN() != total {
		t.Fatalf("last %d durable %d, want %d", l.LastLSN(), l.DurableLSN(), total)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if batched.Load() != total {
		t.Fatalf("OnBatch saw %d records, want %d", batched.Load(), total)
	}
	if n := batches.Load(); n >= total || syncs.Load() < n {
		t.Fatalf("%d batches and %d fsyncs for %d records: no grouping", n, syncs.Load(), total)
	}
	t.Logf("%d records in %d batches", total, batches.Load())
	recs, info := reopen(t, dir, opts)
	checkRecords(t, recs, 1, total)
	if info.Segments < 2 {
		t.Fatalf("expected several segments, got %d", info.Segments)
	}
	// OnBatch reports the bytes of the frames written: everything in the
	// segments but their headers.
	var onDisk int64
	for _, s := range readLayout(t, dir).segs {
		onDisk += s.Size - SegmentHeaderSize
	}
	if batchBytes.Load() != onDisk {
		t.Fatalf("OnBatch reported %d bytes, the segments hold %d of frames", batchBytes.Load(), onDisk)
	}
}

// appendConcurrently has writers goroutines append perWriter records each,
// serialized the way walq's sequencer serializes them, and checks that each
// commit is released only once its record is durable.
func appendConcurrently(t *testing.T, l *Log, writers, perWriter int) {
	t.Helper()
	var sequencer sync.Mutex // what walq's sequencer does: Append in one order
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				sequencer.Lock()
				body := testBody(l.LastLSN() + 1) // the sequencer knows the next LSN
				lsn, c := l.AppendEncoded(1, func(dst []byte) []byte { return append(dst, body...) })
				sequencer.Unlock()
				if err := c.Wait(); err != nil {
					errs <- err
					return
				}
				if d := l.DurableLSN(); d < lsn {
					errs <- fmt.Errorf("commit of %d released with durable lsn %d", lsn, d)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestGroupCommitNoSyncStress: under SyncNever batches are written as fast
// as appends arrive, so the committer often wakes to an empty pending batch
// just as an Append lands. Every committed record must still be written
// exactly once.
func TestGroupCommitNoSyncStress(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, Options{Sync: SyncNever})
	const writers, perWriter = 8, 3000
	appendConcurrently(t, l, writers, perWriter)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var r replayed
	res, err := Scan(dir, 1, 0, r.apply)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != writers*perWriter || res.Tail != nil {
		t.Fatalf("scan: %d records (tail %v), want %d", res.Records, res.Tail, writers*perWriter)
	}
	checkRecords(t, r.recs, 1, writers*perWriter)
}

// traceFS records the file operations that matter for durability, in order.
type traceFS struct {
	FS
	mu  sync.Mutex
	ops []string
}

func (f *traceFS) add(op string) {
	f.mu.Lock()
	f.ops = append(f.ops, op)
	f.mu.Unlock()
}

func (f *traceFS) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

func (f *traceFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		f.add("open " + filepath.Base(name))
	}
	return &traceFile{File: file, fs: f}, nil
}

func (f *traceFS) Rename(oldpath, newpath string) error {
	f.add("rename " + filepath.Base(oldpath) + " " + filepath.Base(newpath))
	return f.FS.Rename(oldpath, newpath)
}

func (f *traceFS) Remove(name string) error {
	f.add("remove " + filepath.Base(name))
	return f.FS.Remove(name)
}

func (f *traceFS) SyncDir(dir string) error {
	f.add("syncdir")
	return f.FS.SyncDir(dir)
}

type traceFile struct {
	File
	fs *traceFS
}

func (f *traceFile) Write(p []byte) (int, error) {
	f.fs.add(fmt.Sprintf("write %s %d", filepath.Base(f.Name()), len(p)))
	return f.File.Write(p)
}

func (f *traceFile) Sync() error {
	f.fs.add("sync " + filepath.Base(f.Name()))
	return f.File.Sync()
}

// TestSegmentRoll checks what a roll does, in order: fsync the old tail
// (whatever the policy, so that an older segment is all promised), write
// the new header to a temp file, fsync it, rename it, fsync the directory,
// and only then write the batch's frame; and that it happens before a
// batch that would take a tail holding frames past SegmentSize, never
// otherwise.
func TestSegmentRoll(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNever, SyncInterval(time.Hour)} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			tr := &traceFS{FS: OSFS()}
			var syncs atomic.Int64
			opts := Options{SegmentSize: 300, FS: tr, Sync: policy, OnSync: func(time.Duration) { syncs.Add(1) }}
			l, _ := openLog(t, dir, opts)
			tr.take()
			rolls := 0
			for i := 0; i < 30; i++ {
				tail := l.Segments()
				size := tail[len(tail)-1].Size
				before := syncs.Load()
				if err := appendAndWait(l); err != nil {
					t.Fatal(err)
				}
				ops := tr.take()
				segs := l.Segments()
				rolled := len(segs) > len(tail)
				frame := int64(FrameHeaderSize + RecordHeaderSize + len(testBody(uint64(i+1))))
				if rolled != (size > SegmentHeaderSize && size+frame > opts.SegmentSize) {
					t.Fatalf("record %d: tail of %d bytes, rolled %v", i+1, size, rolled)
				}
				if !rolled {
					continue
				}
				rolls++
				old, next := tail[len(tail)-1].Name, segs[len(segs)-1].Name
				want := []string{
					"open " + next + ".tmp",
					fmt.Sprintf("write %s.tmp %d", next, SegmentHeaderSize),
					"sync " + next + ".tmp",
					"rename " + next + ".tmp " + next,
					"syncdir",
					"open " + next,
				}
				if policy != SyncAlways {
					// The old tail holds unsynced frames: fsynced first.
					want = append([]string{"sync " + old}, want...)
					if syncs.Load() == before {
						t.Fatal("the roll's fsync of the old tail was not reported to OnSync")
					}
				}
				if got := strings.Join(ops[:min(len(ops), len(want))], "; "); got != strings.Join(want, "; ") {
					t.Fatalf("roll to %s:\n got %s\nwant %s", next, strings.Join(ops, "; "), strings.Join(want, "; "))
				}
				if rest := ops[len(want):]; len(rest) == 0 || !strings.HasPrefix(rest[0], "write "+next+" ") {
					t.Fatalf("after the roll: %v, want the frame written to %s", rest, next)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if rolls < 5 {
				t.Fatalf("%d rolls", rolls)
			}
			recs, _ := reopen(t, dir, Options{})
			checkRecords(t, recs, 1, 30)
		})
	}
}

// TestSegmentRollSizes: a batch that would take a tail holding frames
// past SegmentSize starts a new segment; one that brings it to exactly
// SegmentSize does not. A batch larger than SegmentSize has a segment of
// its own. A reopen with a smaller SegmentSize rolls before its first
// batch. A segment that holds only its header never rolls.
func TestSegmentRollSizes(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{}, 3)
	size := lastSegment(t, dir).Size
	run := func(segmentSize int64, bodies ...int) []int {
		t.Helper()
		l, _ := openLog(t, dir, Options{SegmentSize: segmentSize})
		var counts []int
		for _, n := range bodies {
			_, c := l.Append(2, bytes.Repeat([]byte{'r'}, n))
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
			counts = append(counts, len(l.Segments()))
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return counts
	}
	frame := func(body int) int64 { return int64(FrameHeaderSize + RecordHeaderSize + body) }
	if got := run(size+frame(10), 10); got[0] != 1 {
		t.Fatalf("a batch that fills the tail to the size: segments %v, want [1]", got)
	}
	size = lastSegment(t, dir).Size
	if got := run(size+frame(10), 11); got[0] != 2 {
		t.Fatalf("a batch one byte past the size: segments %v, want [2]", got)
	}
	// The new tail holds one frame; a segment size below the header rolls
	// each batch into a segment of its own, but never an empty one.
	if got := run(1, 10, 10, 10); got[0] != 3 || got[1] != 4 || got[2] != 5 {
		t.Fatalf("segment size 1: segments %v, want [3 4 5]", got)
	}
	// A batch larger than a segment: one of its own, and the next batch
	// rolls again.
	if got := run(200, 5000, 10); got[0] != 6 || got[1] != 7 {
		t.Fatalf("a batch larger than the size: segments %v, want [6 7]", got)
	}
	for _, s := range readLayout(t, dir).segs {
		if len(s.Frames) == 0 {
			t.Fatalf("segment %s holds no frame", s.Name)
		}
	}
	res, err := Scan(dir, 0, 0, nil)
	if err != nil || res.Last != 10 || res.Records != 10 {
		t.Fatalf("scan %+v %v", res, err)
	}
}

// TestLargeBatchIsSeveralFrames: a batch whose records pass maxFrameBody is
// written as several frames, by one write, and read back whole.
func TestLargeBatchIsSeveralFrames(t *testing.T) {
	dir := t.TempDir()
	gate := newGateFS(OSFS())
	var writes atomic.Int64
	l, _ := openLog(t, dir, Options{FS: gate, OnBatch: func(int, int) { writes.Add(1) }})
	big := func(lsn uint64) []byte { return bytes.Repeat([]byte{byte(lsn)}, maxFrameBody/2+1000) }
	gate.arm()
	_, first := l.Append(1, testBody(1))
	<-gate.entered
	var c *Commit
	for lsn := uint64(2); lsn <= 4; lsn++ {
		_, c = l.Append(1, big(lsn))
	}
	gate.open()
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ll := readLayout(t, dir)
	fs := ll.tail().Frames
	// 2 and 3 share a frame (2 alone was under the bound), 4 starts the
	// next; the batch, larger than a segment, has one of its own.
	if len(ll.segs) != 2 || len(fs) != 2 || fs[0].First != 2 || fs[0].Count != 2 || fs[1].First != 4 || fs[1].Count != 1 || writes.Load() != 2 {
		t.Fatalf("%d segments, tail frames %+v, %d batches", len(ll.segs), fs, writes.Load())
	}
	var r replayed
	if _, err := Scan(dir, 0, 0, r.apply); err != nil || len(r.recs) != 4 {
		t.Fatalf("scan: %d records, %v", len(r.recs), err)
	}
	for _, rec := range r.recs[1:] {
		if !bytes.Equal(rec.Body, big(rec.LSN)) {
			t.Fatalf("record %d differs", rec.LSN)
		}
	}
}

func TestAppendQueueAndTypes(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, Options{})
	type rec struct {
		typ   byte
		queue uint64
		body  string
	}
	recs := []rec{{1, 0, "a"}, {255, 7, "b"}, {9, 1 << 63, "c"}, {3, ^uint64(0), strings.Repeat("d", 1000)}}
	var c *Commit
	for i, r := range recs {
		var lsn uint64
		if r.queue == 0 {
			lsn, c = l.Append(r.typ, []byte(r.body))
		} else {
			lsn, c = l.AppendQueue(r.queue, r.typ, func(dst []byte) []byte { return append(dst, r.body...) })
		}
		if lsn != uint64(i+1) {
			t.Fatalf("lsn %d", lsn)
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	var r replayed
	l, _, err := Open(dir, withDir(Options{}), 0, r.apply)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for i, got := range r.recs {
		w := recs[i]
		if got.Type != w.typ || got.Queue != w.queue || string(got.Body) != w.body || got.LSN != uint64(i+1) {
			t.Fatalf("record %d: %+v, want %+v", i+1, got, w)
		}
	}
}

func TestAppendPanicsOnProgrammingErrors(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), Options{})
	defer l.Close()
	for name, fn := range map[string]func(){
		"empty_body": func() { l.Append(1, nil) },
		"type_0":     func() { l.Append(0, []byte("x")) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			fn()
		})
	}
}

func TestFailureIsSticky(t *testing.T) {
	cases := []struct {
		name        string
		op          string
		segmentSize int64
		trigger     func(l *Log) error
	}{
		{"write_check_fails", "write", 0, appendAndWait},
		{"write_fails", "file.write", 0, appendAndWait},
		{"tail_fsync_check_fails", "sync", 0, appendAndWait},
		{"tail_fsync_fails", "file.sync", 0, appendAndWait},
		{"sync_call_fails", "sync", 0, func(l *Log) error {
			l.Append(1, testBody(l.LastLSN()+1))
			_, err := l.Sync()
			return err
		}},
	}
	for _, tc := range cases {
		for _, policy := range []SyncPolicy{SyncAlways, SyncNever} {
			t.Run(tc.name+"/"+policy.String(), func(t *testing.T) {
				if policy == SyncNever && (tc.op == "sync" || tc.op == "file.sync") && tc.name != "sync_call_fails" {
					t.Skip("no fsync per batch under SyncNever")
				}
				dir := t.TempDir()
				ffs := NewFaultFS(OSFS(), 0)
				opts := Options{FS: ffs, SegmentSize: tc.segmentSize, Sync: policy}
				l, _ := openLog(t, dir, opts)
				for range 3 {
					if err := appendAndWait(l); err != nil {
						t.Fatal(err)
					}
				}
				acked := l.DurableLSN()
				select {
				case <-l.Failed():
					t.Fatal("Failed closed before the failure")
				default:
				}
				ffs.FailNext(tc.op)
				err := tc.trigger(l)
				select {
				case <-l.Failed():
				default:
					t.Fatal("Failed not closed after the failure")
				}
				if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected) {
					t.Fatalf("got %v, want ErrFailed wrapping the cause", err)
				}
				if !errors.Is(l.Err(), ErrFailed) {
					t.Fatalf("Err() = %v", l.Err())
				}
				lsn, c := l.Append(1, []byte("after the failure"))
				select {
				case <-c.Done():
				default:
					t.Fatal("append after failure returned a pending commit")
				}
				if lsn != 0 || !errors.Is(c.Wait(), ErrFailed) {
					t.Fatalf("append after failure: lsn %d err %v", lsn, c.Wait())
				}
				if _, err := l.Sync(); !errors.Is(err, ErrFailed) {
					t.Fatalf("sync after failure: %v", err)
				}
				if err := l.TruncateFront(1); !errors.Is(err, ErrFailed) {
					t.Fatalf("truncate after failure: %v", err)
				}
				if err := l.Close(); !errors.Is(err, ErrFailed) {
					t.Fatalf("close after failure: %v", err)
				}
				if err := l.Close(); !errors.Is(err, ErrFailed) {
					t.Fatalf("second close: %v", err)
				}
				// Recovery starts from disk: whatever was acknowledged is there.
				recs, info := reopen(t, dir, opts)
				if info.Last < acked {
					t.Fatalf("reopened with last %d, acknowledged %d", info.Last, acked)
				}
				checkRecords(t, recs, info.First, info.Last)
			})
		}
	}
}

// appendUntilRoll appends until a segment rolls or an append fails.
func appendUntilRoll(l *Log) error {
	segs := len(l.Segments())
	for range 20 {
		if err := appendAndWait(l); err != nil {
			return err
		}
		if len(l.Segments()) > segs {
			return nil
		}
	}
	return errors.New("no roll")
}

// TestFailedChannel checks that Failed is closed at the first failure only,
// stays closed through later failures and Close, and is never closed by a
// Close without a failure.
func TestFailedChannel(t *testing.T) {
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	t.Run("close_without_failure", func(t *testing.T) {
		l, _ := openLog(t, t.TempDir(), Options{})
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
		ch := l.Failed()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if isClosed(ch) || isClosed(l.Failed()) {
			t.Fatal("Close closed Failed")
		}
	})
	t.Run("closed_once_at_first_failure", func(t *testing.T) {
		ffs := NewFaultFS(OSFS(), 0)
		l, _ := openLog(t, t.TempDir(), Options{FS: ffs})
		ch := l.Failed()
		waiter := make(chan struct{})
		go func() { <-ch; close(waiter) }()
		ffs.FailNext("sync")
		if err := appendAndWait(l); !errors.Is(err, ErrFailed) {
			t.Fatalf("append: %v", err)
		}
		select {
		case <-waiter:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter on Failed was not woken")
		}
		first := l.Err()
		ffs.FailNext("write")
		l.Append(1, []byte("after"))
		if err := l.Close(); !errors.Is(err, ErrFailed) {
			t.Fatalf("close: %v", err)
		}
		if l.Failed() != ch || !isClosed(ch) || l.Err() != first {
			t.Fatal("Failed changed after the first failure")
		}
	})
	t.Run("fail_by_the_owner", func(t *testing.T) {
		dir := t.TempDir()
		gate := newGateFS(OSFS())
		l, _ := openLog(t, dir, Options{FS: gate})
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
		// A batch held just before its write and one pending behind it:
		// Fail fails the pending one at once. The held one is in flight
		// (the committer took it before the failure): it may be written as
		// if it had been before Fail, or fail; either way its Commit says
		// what the disk holds.
		gate.arm()
		_, held := l.Append(1, testBody(2))
		<-gate.entered
		_, pending := l.Append(1, testBody(3))
		cause := fmt.Errorf("%w: the owner stops", ErrFailed)
		if err := l.Fail(cause); err != cause {
			t.Fatalf("Fail returned %v", err)
		}
		if !errors.Is(pending.Wait(), ErrFailed) || !isClosed(l.Failed()) {
			t.Fatalf("pending batch: %v", pending.Wait())
		}
		if err := l.Fail(errors.New("second")); err != cause {
			t.Fatalf("second Fail returned %v", err)
		}
		gate.open()
		heldErr := held.Wait()
		if heldErr != nil && !errors.Is(heldErr, ErrFailed) {
			t.Fatalf("held batch: %v", heldErr)
		}
		if err := l.Close(); !errors.Is(err, ErrFailed) {
			t.Fatalf("close: %v", err)
		}
		recs, _ := reopen(t, dir, Options{})
		if heldErr == nil {
			checkRecords(t, recs, 1, 2)
		} else {
			checkRecords(t, recs, 1, 1)
		}
	})
}

func TestSyncPolicies(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"always", Options{Sync: SyncAlways}},
		{"interval", Options{Sync: SyncInterval(5 * time.Millisecond)}},
		{"never", Options{Sync: SyncNever}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var syncs atomic.Int64
			tc.opts.OnSync = func(time.Duration) { syncs.Add(1) }
			l, _ := openLog(t, dir, tc.opts)
			for i := range 10 {
				if err := appendAndWait(l); err != nil {
					t.Fatal(err)
				}
				if l.DurableLSN() != uint64(i+1) {
					t.Fatalf("durable %d after the commit of %d", l.DurableLSN(), i+1)
				}
			}
			switch tc.opts.Sync.mode {
			case syncAlways:
				if syncs.Load() != 10 {
					t.Fatalf("%d fsyncs for 10 batches under SyncAlways", syncs.Load())
				}
			case syncInterval:
				deadline := time.Now().Add(5 * time.Second)
				for syncs.Load() == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if syncs.Load() == 0 {
					t.Fatal("no fsync within the interval")
				}
			default:
				if syncs.Load() != 0 {
					t.Fatalf("%d fsyncs under SyncNever", syncs.Load())
				}
			}
			// Sync fsyncs whatever the policy, and reports what is durable.
			before := syncs.Load()
			l.Append(1, testBody(11))
			if lsn, err := l.Sync(); err != nil || lsn != 11 || syncs.Load() != before+1 {
				t.Fatalf("Sync: %d %v, %d fsyncs", lsn, err, syncs.Load()-before)
			}
			// A Sync with nothing new to fsync does none.
			if lsn, err := l.Sync(); err != nil || lsn != 11 || syncs.Load() != before+1 {
				t.Fatalf("second Sync: %d %v, %d fsyncs", lsn, err, syncs.Load()-before)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			recs, _ := reopen(t, dir, Options{})
			checkRecords(t, recs, 1, 11)
		})
	}
}

// TestWatermarks checks the watermark each policy writes: the last LSN
// fsynced when the frame was written.
func TestWatermarks(t *testing.T) {
	for _, tc := range []struct {
		policy SyncPolicy
		want   func(lsn uint64) uint64 // the watermark of the frame of lsn (one record a frame)
	}{
		{SyncAlways, func(lsn uint64) uint64 { return lsn - 1 }},
		{SyncNever, func(lsn uint64) uint64 {
			if lsn > 10 {
				return 10 // the Sync after 10
			}
			return 0
		}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			l, _ := openLog(t, dir, Options{Sync: tc.policy})
			for i := 1; i <= 20; i++ {
				if err := appendAndWait(l); err != nil {
					t.Fatal(err)
				}
				if i == 10 {
					if _, err := l.Sync(); err != nil {
						t.Fatal(err)
					}
				}
			}
			l.Close()
			// A reopened log starts with everything recovered as fsynced.
			l, _ = openLog(t, dir, Options{Sync: tc.policy})
			if err := appendAndWait(l); err != nil {
				t.Fatal(err)
			}
			l.Close()
			for _, f := range readLayout(t, dir).tail().Frames {
				want := tc.want(f.First)
				if f.First == 21 {
					want = 20
				}
				if f.Watermark != want {
					t.Fatalf("frame of %d states %d, want %d", f.First, f.Watermark, want)
				}
			}
		})
	}
}

func TestSyncPolicyCheck(t *testing.T) {
	for _, tc := range []struct {
		p    SyncPolicy
		ok   bool
		name string
	}{
		{SyncAlways, true, "always"},
		{SyncNever, true, "never"},
		{SyncInterval(time.Second), true, "interval(1s)"},
		{SyncInterval(0), false, "interval(0s)"},
		{SyncInterval(-time.Second), false, "interval(-1s)"},
		{SyncPolicy{mode: syncNever, every: time.Second}, false, "never"},
		{SyncPolicy{mode: 9}, false, "unknown"},
	} {
		if err := tc.p.Check(); (err == nil) != tc.ok || tc.p.String() != tc.name {
			t.Errorf("%v: Check %v, String %q", tc.p, err, tc.p.String())
		}
	}
	// A zero interval given to Open is the default.
	l, _ := openLog(t, t.TempDir(), Options{Sync: SyncInterval(0)})
	if l.opts.Sync.every != DefaultSyncEvery {
		t.Fatalf("interval %v", l.opts.Sync.every)
	}
	l.Close()
}

func TestClosedLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	l, _ := openLog(t, dir, Options{Sync: SyncNever})
	// Close writes and fsyncs what is pending.
	_, c := l.Append(1, testBody(1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("pending commit at close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if lsn, c := l.Append(1, []byte("x")); lsn != 0 || !errors.Is(c.Wait(), ErrClosed) {
		t.Fatalf("append after close: %d %v", lsn, c.Wait())
	}
	if _, err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("sync after close: %v", err)
	}
	if err := l.TruncateFront(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("truncate after close: %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("Err after a clean close: %v", l.Err())
	}
	recs, _ := reopen(t, dir, Options{})
	checkRecords(t, recs, 1, 1)
}

// TestCloseIsSafeConcurrently closes a Log from several goroutines while
// others append: every Commit is released, with success or ErrClosed.
func TestCloseIsSafeConcurrently(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, Options{Sync: SyncNever})
	var wg sync.WaitGroup
	var ok atomic.Int64
	var sequencer sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				sequencer.Lock()
				lsn, c := l.Append(1, testBody(l.LastLSN()+1))
				sequencer.Unlock()
				err := c.Wait()
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrClosed) && lsn == 0:
				default:
					t.Errorf("append %d: %v", lsn, err)
					return
				}
			}
		}()
	}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Millisecond)
			if err := l.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	recs, _ := reopen(t, dir, Options{})
	if int64(len(recs)) != ok.Load() {
		t.Fatalf("%d records on disk, %d commits succeeded", len(recs), ok.Load())
	}
	checkRecords(t, recs, 1, uint64(len(recs)))
}

func TestOpenCreatesWithPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "queue")
	l, info := openLog(t, dir, Options{})
	defer l.Close()
	if info.First != 1 || info.Last != 0 || info.Segments != 1 {
		t.Fatalf("fresh log info %+v", info)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v %v", st.Mode(), err)
	}
	st, err = os.Stat(filepath.Join(dir, SegmentName(1)))
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != SegmentHeaderSize {
		t.Fatalf("segment %v %v", st, err)
	}
	hdr, err := decodeSegmentHeader(readFileT(t, filepath.Join(dir, SegmentName(1))))
	if err != nil || hdr.dir != testDir || hdr.first != 1 || hdr.salt == ([16]byte{}) {
		t.Fatalf("header %+v %v", hdr, err)
	}
}

// TestSegmentsHaveTheirOwnSalt: every segment gets a fresh random salt.
func TestSegmentsHaveTheirOwnSalt(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: 200}, 10)
	salts := map[[16]byte]bool{}
	ll := readLayout(t, dir)
	for _, s := range ll.segs {
		salts[s.Hdr.salt] = true
	}
	if len(salts) != len(ll.segs) || len(ll.segs) < 5 {
		t.Fatalf("%d salts for %d segments", len(salts), len(ll.segs))
	}
}

func TestDurableLSN(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNever} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			gate := newGateFS(OSFS())
			l, info := openLog(t, dir, Options{FS: gate, Sync: policy})
			if l.DurableLSN() != 0 || info.Last != 0 {
				t.Fatalf("fresh: durable %d", l.DurableLSN())
			}
			if err := appendAndWait(l); err != nil {
				t.Fatal(err)
			}
			// Appended but held before its write: not durable yet.
			gate.arm()
			_, c := l.Append(1, testBody(2))
			<-gate.entered
			if l.DurableLSN() != 1 || l.LastLSN() != 2 {
				t.Fatalf("held: durable %d last %d", l.DurableLSN(), l.LastLSN())
			}
			gate.open()
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
			if l.DurableLSN() != 2 {
				t.Fatalf("after the commit: durable %d", l.DurableLSN())
			}
			l.Close()
			l, _ = openLog(t, dir, Options{Sync: policy})
			defer l.Close()
			if l.DurableLSN() != 2 || l.LastLSN() != 2 {
				t.Fatalf("reopened: durable %d last %d", l.DurableLSN(), l.LastLSN())
			}
		})
	}
}

// TestAppendEncodedDoesNotAllocatePerRecord appends while the committer is
// held inside a write, so every record joins one pending batch: apart from
// the amortized growth of the batch buffers, an append allocates nothing.
func TestAppendEncodedDoesNotAllocatePerRecord(t *testing.T) {
	gate := newGateFS(OSFS())
	l, _ := openLog(t, t.TempDir(), Options{FS: gate})
	body := []byte("a msgpack body of some length")
	encode := func(dst []byte) []byte { return append(dst, body...) }
	gate.arm()
	_, first := l.AppendEncoded(1, encode)
	<-gate.entered
	l.AppendEncoded(1, encode) // opens the next batch and its Commit
	allocs := testing.AllocsPerRun(2000, func() { l.AppendEncoded(1, encode) })
	gate.open()
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if allocs > 0.05 {
		t.Fatalf("%.3f allocations per append", allocs)
	}
}

func TestTruncateFront(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 60)
	ffs := NewFaultFS(OSFS(), 0)
	l, _ := openLog(t, dir, Options{SegmentSize: baseSegmentSize, FS: ffs})
	segs := l.Segments()
	if len(segs) != 4 {
		t.Fatalf("%d segments", len(segs))
	}
	syncDirs := func() int { return ffs.OpCount("syncdir") }
	if err := l.TruncateFront(l.DurableLSN() + 2); err == nil || l.Err() != nil {
		t.Fatalf("truncating beyond the durable lsn: %v, Err %v", err, l.Err())
	}
	for _, tc := range []struct {
		name  string
		index uint64
		first uint64 // the log's first segment after it
	}{
		{"below_the_first_lsn", 0, 1},
		{"at_the_first_lsn", 1, 1},
		{"inside_the_first_segment", segs[1].First - 1, 1},
		{"at_the_second_segment", segs[1].First, segs[1].First},
		{"again", segs[1].First, segs[1].First},
		{"past_two_segments", segs[3].First - 1, segs[2].First},
		{"into_the_tail", segs[3].First + 2, segs[3].First}, // the tail is never removed
		{"past_the_end", l.DurableLSN() + 1, segs[3].First},
	} {
		before, dirs := len(l.Segments()), syncDirs()
		if err := l.TruncateFront(tc.index); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := l.Segments()
		if got[0].First != tc.first {
			t.Fatalf("%s: log starts at %d, want %d", tc.name, got[0].First, tc.first)
		}
		// The directory is fsynced once when something was removed, else
		// not at all.
		if removed := before - len(got); (removed > 0) != (syncDirs() == dirs+1) || syncDirs() > dirs+1 {
			t.Fatalf("%s: removed %d segments, %d directory fsyncs", tc.name, removed, syncDirs()-dirs)
		}
	}
	// The log goes on appending and rolling after it.
	for range 40 {
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
	}
	last := l.LastLSN()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	first := segs[3].First
	var r replayed
	l, info, err := Open(dir, withDir(Options{}), first+3, r.apply)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if info.First != first || info.Last != last {
		t.Fatalf("info %+v, want %d..%d", info, first, last)
	}
	checkRecords(t, r.recs, first+3, last)
	for _, tc := range []struct {
		from   uint64
		reason string
	}{
		{first - 1, fmt.Sprintf("log starts at %d but replay needs %d", first, first-1)},
		{last + 2, fmt.Sprintf("log ends at %d before %d", last, last+2)},
	} {
		_, _, err := Open(dir, withDir(Options{}), tc.from, r.apply)
		ce := asCorruption(t, fmt.Sprint("open from ", tc.from), err)
		if ce.Err.Error() != tc.reason || ce.Index != tc.from {
			t.Fatalf("open from %d: %v, want %q", tc.from, err, tc.reason)
		}
	}
	// Replaying from just after the end is a clean, empty replay.
	if l, info, err := Open(dir, withDir(Options{}), last+1, r.apply); err != nil || info.Replayed != 0 {
		t.Fatalf("open from last+1: %v %+v", err, info)
	} else {
		l.Close()
	}
}

// failRemoveFS fails the n-th Remove after it is armed.
type failRemoveFS struct {
	FS
	mu    sync.Mutex
	left  int // removes until the one that fails; 0: none armed
	calls int
}

func (f *failRemoveFS) failNth(n int) {
	f.mu.Lock()
	f.left = n
	f.mu.Unlock()
}

func (f *failRemoveFS) Remove(name string) error {
	f.mu.Lock()
	f.calls++
	fail := false
	if f.left > 0 {
		f.left--
		fail = f.left == 0
	}
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("remove %s: %w", filepath.Base(name), ErrInjected)
	}
	return f.FS.Remove(name)
}

// TestTruncateFrontFailure: TruncateFront removes whole segments, oldest
// first, so a failure leaves a log that starts at some segment and has no
// gap. A failed check, Remove or directory fsync returns a plain error and
// the Log goes on (a later TruncateFront finishes the job).
func TestTruncateFrontFailure(t *testing.T) {
	cases := []struct {
		name    string
		arm     func(ffs *FaultFS, rfs *failRemoveFS)
		removed int // segments removed by the failed call
	}{
		{"check_fails", func(ffs *FaultFS, _ *failRemoveFS) { ffs.FailNext("truncate-front") }, 0},
		{"listing_fails", func(ffs *FaultFS, _ *failRemoveFS) { ffs.FailNext("readdir") }, 0},
		{"first_remove_fails", func(_ *FaultFS, rfs *failRemoveFS) { rfs.failNth(1) }, 0},
		{"second_remove_fails", func(_ *FaultFS, rfs *failRemoveFS) { rfs.failNth(2) }, 1},
		// The removals stand in the directory, maybe not on the disk: a
		// crash may bring some back, all wholly before the records a
		// snapshot covers, which Open skips (TestOpenSkipsWhatWasRemoved).
		{"dir_fsync_fails", func(ffs *FaultFS, _ *failRemoveFS) { ffs.FailNext("syncdir") }, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 60)
			rfs := &failRemoveFS{FS: OSFS()}
			ffs := NewFaultFS(rfs, 0)
			opts := Options{SegmentSize: baseSegmentSize, FS: ffs}
			l, _ := openLog(t, dir, opts)
			defer l.Close()
			segs := l.Segments()
			if len(segs) != 4 {
				t.Fatalf("%d segments", len(segs))
			}
			index := segs[2].First // removes the first two
			tc.arm(ffs, rfs)
			err := l.TruncateFront(index)
			if err == nil {
				t.Fatal("truncate front succeeded")
			}
			if got := l.Segments(); len(got) != len(segs)-tc.removed || got[0].Name != segs[tc.removed].Name {
				t.Fatalf("segments after the failure: %v", got)
			}
			if errors.Is(err, ErrFailed) || l.Err() != nil {
				t.Fatalf("got %v (Err %v), want a plain error and a working log", err, l.Err())
			}
			for range 3 {
				if err := appendAndWait(l); err != nil {
					t.Fatalf("append after a failed truncation: %v", err)
				}
			}
			if err := l.TruncateFront(index); err != nil {
				t.Fatalf("second truncate front: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			recs, info := reopen(t, dir, opts)
			if info.First != index {
				t.Fatalf("reopened at %d, want %d", info.First, index)
			}
			checkRecords(t, recs, index, 63)
		})
	}
}

// TestOpenSkipsWhatWasRemoved: a crash after a TruncateFront whose
// directory fsync failed may bring back any of the segments it removed,
// all wholly before the records the caller's snapshot covers. Open skips
// them, gaps between them included, and replays from the snapshot on.
func TestOpenSkipsWhatWasRemoved(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: baseSegmentSize}
	writeLog(t, dir, opts, 60)
	l, _ := openLog(t, dir, opts)
	segs := l.Segments()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if len(segs) != 4 {
		t.Fatalf("%d segments", len(segs))
	}
	// The second segment's removal reached the disk, the first's did not.
	if err := os.Remove(segs[1].Path); err != nil {
		t.Fatal(err)
	}
	from := segs[2].First
	var r replayed
	l, _, err := Open(dir, withDir(opts), from, r.apply)
	if err != nil {
		t.Fatalf("open from %d with a gap before it: %v", from, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, r.recs, from, 60)
}

// TestScanDuringAppendAndTruncate runs Scan in a loop while a Log appends
// and truncates the same directory: a scan may find that what it needed was
// compacted away, but never reports corruption and never skips a record.
func TestScanDuringAppendAndTruncate(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, Options{SegmentSize: 512, Sync: SyncNever})
	done := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 1; i <= 4000; i++ {
			_, c := l.Append(1, testBody(uint64(i)))
			if i%10 == 0 {
				if err := c.Wait(); err != nil {
					writerErr <- err
					return
				}
			}
			if i%150 == 0 {
				if err := l.TruncateFront(l.DurableLSN() + 1); err != nil {
					writerErr <- err
					return
				}
			}
		}
	}()
	scans, compacted, tails := 0, 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		var next uint64
		res, err := Scan(dir, 0, 0, func(p Position, r Record) error {
			if next != 0 && r.LSN != next {
				return fmt.Errorf("scan skipped from %d to %d", next, r.LSN)
			}
			if !bytes.Equal(r.Body, testBody(r.LSN)) || p.Index != r.LSN {
				return fmt.Errorf("record %d has the wrong body or position", r.LSN)
			}
			next = r.LSN + 1
			return nil
		})
		scans++
		switch {
		case errors.Is(err, ErrCompacted):
			compacted++
		case err != nil:
			t.Fatalf("scan %d: %v", scans, err)
		case res.Tail != nil:
			tails++
		}
	}
	select {
	case err := <-writerErr:
		t.Fatal(err)
	default:
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d scans, %d saw records compacted away, %d saw a partial frame", scans, compacted, tails)
	recs, info := reopen(t, dir, Options{SegmentSize: 512})
	if info.Last != 4000 {
		t.Fatalf("last %d", info.Last)
	}
	checkRecords(t, recs, info.First, 4000)
}

// TestScanErrCompacted: a TruncateFront between two segments of a Scan
// removes records it still needs; it stops with ErrCompacted, not
// corruption. One that removes only segments already read lets it finish.
func TestScanErrCompacted(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 120)
	segs, _, _ := ListSegments(dir)
	if len(segs) != 8 {
		t.Fatalf("%d segments", len(segs))
	}
	l, _ := openLog(t, dir, Options{SegmentSize: baseSegmentSize})
	defer l.Close()
	var seen []uint64
	res, err := Scan(dir, 0, 0, func(p Position, r Record) error {
		seen = append(seen, r.LSN)
		if r.LSN == 2 {
			// The first segment is in hand; the scan reads at most two
			// ahead of it, so some of the six that go now were not read.
			return l.TruncateFront(segs[7].First)
		}
		return nil
	})
	if !errors.Is(err, ErrCompacted) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCompacted", err)
	}
	need := uint64(len(seen)) + 1
	if need != segs[1].First && need != segs[2].First && need != segs[3].First {
		t.Fatalf("scan stopped after %d records, not at the end of one of the first three segments", len(seen))
	}
	for i, lsn := range seen {
		if lsn != uint64(i)+1 {
			t.Fatalf("record %d has LSN %d", i, lsn)
		}
	}
	want := fmt.Sprintf("need LSN %d but the log now starts at %d", need, segs[7].First)
	if !strings.Contains(err.Error(), want) || res.Records != len(seen) {
		t.Fatalf("got %v after %d records, want %q", err, len(seen), want)
	}
	// Scanning again from the new start succeeds.
	res, err = Scan(dir, 0, 0, nil)
	if err != nil || res.First != segs[7].First || res.Last != 120 {
		t.Fatalf("scan again: %+v %v", res, err)
	}

	// Segments the scan has read go while it replays them, and the
	// listing after them still holds every record from the next one
	// needed: the scan goes on.
	dir = t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 60)
	l2, _ := openLog(t, dir, Options{SegmentSize: baseSegmentSize})
	defer l2.Close()
	var r replayed
	res, err = Scan(dir, 0, 0, func(p Position, rec Record) error {
		if rec.LSN == segs[1].First {
			if err := l2.TruncateFront(segs[2].First); err != nil {
				return err
			}
		}
		return r.apply(p, rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, r.recs, 1, 60)
}

// TestScanRangeAndStop: Scan passes exactly from..to, each record with its
// position, and an error from fn stops it and is returned as is.
func TestScanRangeAndStop(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 40)
	ll := readLayout(t, dir)
	for _, tc := range []struct{ from, to, first, last uint64 }{
		{0, 0, 1, 40}, {5, 12, 5, 12}, {16, 16, 16, 16}, {30, 0, 30, 40}, {40, 100, 40, 40},
	} {
		var r replayed
		res, err := Scan(dir, tc.from, tc.to, func(p Position, rec Record) error {
			f := ll.frameOf(rec.LSN)
			if p.File != f.Seg || p.Frame != f.Off || p.Offset != f.Bodies[rec.LSN-f.First] {
				return fmt.Errorf("record %d at %+v, its frame %+v", rec.LSN, p, f)
			}
			return r.apply(p, rec)
		})
		if err != nil || res.Records != len(r.recs) || res.First != 1 || res.Dir != testDir {
			t.Fatalf("scan %d..%d: %+v %v", tc.from, tc.to, res, err)
		}
		checkRecords(t, r.recs, tc.first, tc.last)
	}
	stop := errors.New("stop")
	if _, err := Scan(dir, 0, 0, func(Position, Record) error { return stop }); err != stop {
		t.Fatalf("fn error not returned: %v", err)
	}
	// An empty or missing directory.
	if res, err := Scan(t.TempDir(), 0, 0, nil); err != nil || res.Records != 0 || res.Tail != nil {
		t.Fatalf("empty dir: %+v %v", res, err)
	}
	if _, err := Scan(filepath.Join(t.TempDir(), "missing"), 0, 0, nil); err == nil {
		t.Fatal("missing dir scanned")
	}
}

// TestScanReportsTailReadOnly: a partial frame at the end is a Tail of
// Scan, which changes nothing on disk.
func TestScanReportsTailReadOnly(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 20)
	ll := readLayout(t, dir)
	tail := ll.tail()
	partial := newSealer(tail.Hdr).frame(21, 3, 20)[:50]
	writeFileT(t, tail.Path, append(readFileT(t, tail.Path), partial...))
	before := dirContents(t, dir)
	res, err := Scan(dir, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := TailInfo{File: tail.Name, Offset: tail.Size, Bytes: 50, Watermark: 20,
		Reason: fmt.Sprintf("frame of %d bytes runs past the end of the segment (50 bytes left)", len(newSealer(tail.Hdr).frame(21, 3, 20)))}
	if res.Tail == nil || *res.Tail != want || res.Records != 20 || res.Last != 20 || res.Frames != 20 {
		t.Fatalf("got %+v tail %+v, want 20 records and tail %+v", res, res.Tail, want)
	}
	if d := diffContents(before, dirContents(t, dir)); d != "" {
		t.Fatalf("Scan changed the directory: %s", d)
	}
}

// TestRandomBatchesReadBack writes logs of random batches and
// segment sizes and checks that they read back whole.
func TestRandomBatchesReadBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 5 {
		dir := t.TempDir()
		gate := newGateFS(OSFS())
		opts := Options{SegmentSize: int64(100 + rng.IntN(3000)), FS: gate, Sync: []SyncPolicy{SyncAlways, SyncNever}[round%2]}
		l, _ := openLog(t, dir, opts)
		for l.LastLSN() < 300 {
			if n := rng.IntN(6); n == 0 {
				if err := appendAndWait(l); err != nil {
					t.Fatal(err)
				}
			} else {
				appendFrame(t, l, gate, n)
			}
		}
		last := l.LastLSN()
		l.Close()
		recs, _ := reopen(t, dir, Options{})
		checkRecords(t, recs, 1, last)
		readLayout(t, dir) // every frame verifies
	}
}

// TestIntervalFsyncFailure: under SyncInterval a Commit is released once
// written; the timer's fsync that fails later fails the Log, and every
// call after it.
func TestIntervalFsyncFailure(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(OSFS(), 0)
	l, _ := openLog(t, dir, Options{FS: ffs, Sync: SyncInterval(5 * time.Millisecond)})
	ffs.FailNext("file.sync")
	if err := appendAndWait(l); err != nil {
		t.Fatalf("the commit waits for no fsync: %v", err)
	}
	select {
	case <-l.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the failed timer fsync did not fail the log")
	}
	if err := appendAndWait(l); !errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected) {
		t.Fatalf("append after the failed fsync: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("close: %v", err)
	}
	recs, _ := reopen(t, dir, Options{})
	checkRecords(t, recs, 1, uint64(len(recs)))
}

// TestSyncRoll: SyncRoll seals the tail, so TruncateFront removes every
// record up to what it returned, the old tail included; the log goes on
// in the new segment and reopens whole. On a tail with no record it rolls
// nothing.
func TestSyncRoll(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{}, 10) // one segment: the tail
	l, _ := openLog(t, dir, Options{})
	covered, err := l.SyncRoll()
	if err != nil || covered != 10 {
		t.Fatalf("SyncRoll = %d, %v; want 10", covered, err)
	}
	segs := l.Segments()
	if len(segs) != 2 || segs[1].First != 11 {
		t.Fatalf("segments after SyncRoll: %+v", segs)
	}
	if _, err := l.SyncRoll(); err != nil || len(l.Segments()) != 2 {
		t.Fatalf("SyncRoll of an empty tail: %v, %d segments", err, len(l.Segments()))
	}
	if err := l.TruncateFront(covered + 1); err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); len(segs) != 1 || segs[0].First != 11 {
		t.Fatalf("segments after the truncation: %+v", segs)
	}
	lsn, c := l.Append(1, testBody(11))
	if lsn != 11 || c.Wait() != nil {
		t.Fatalf("append after the roll: lsn %d, %v", lsn, c.Wait())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	l2, info, err := Open(dir, withDir(Options{}), 11, func(pos Position, rec Record) error {
		got = append(got, rec.LSN)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if info.Last != 11 || len(got) != 1 || got[0] != 11 {
		t.Fatalf("reopened: last %d, replayed %v", info.Last, got)
	}
}
