package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	var batches, batched atomic.Int64
	var syncs atomic.Int64
	opts := Options{
		SegmentSize: 16 << 10,
		OnBatch:     func(records, _ int) { batches.Add(1); batched.Add(int64(records)) },
		OnSync:      func(time.Duration) { syncs.Add(1) },
	}
	l, _, err := Open(dir, opts, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
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
}

// syncDirCounter counts directory fsyncs that completed.
type syncDirCounter struct {
	FS
	n atomic.Int64
}

func (c *syncDirCounter) SyncDir(dir string) error {
	err := c.FS.SyncDir(dir)
	c.n.Add(1)
	return err
}

// TestSegmentRollSyncsDirBeforeRelease checks, after every Commit, that a
// batch that created segment files fsynced the directory exactly once before
// its Commit was released, and that a batch that created none did not.
// Record sizes vary around the segment size so that tidwall/wal rolls both
// before a batch (tail already over the size) and in the middle of one.
func TestSegmentRollSyncsDirBeforeRelease(t *testing.T) {
	dir := t.TempDir()
	counter := &syncDirCounter{FS: OSFS()}
	rng := rand.New(rand.NewPCG(3, 4))
	randomBodies := func(n, maxBody int) []int {
		sizes := make([]int, n)
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(maxBody)
		}
		return sizes
	}
	var lsn uint64
	run := func(segmentSize int64, bodySizes []int) (rolls int) {
		t.Helper()
		l, info, err := Open(dir, Options{SegmentSize: segmentSize, FS: counter}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.Last != lsn {
			t.Fatalf("reopened at %d, want %d", info.Last, lsn)
		}
		segments, syncs := len(l.Segments()), counter.n.Load()
		for _, size := range bodySizes {
			var c *Commit
			lsn, c = l.Append(2, bytes.Repeat([]byte{'r'}, size))
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
			nowSegments, nowSyncs := len(l.Segments()), counter.n.Load()
			rolled := nowSegments > segments
			if synced := nowSyncs - syncs; (rolled && synced != 1) || (!rolled && synced != 0) {
				t.Fatalf("lsn %d: segments %d -> %d, but %d directory fsyncs before release", lsn, segments, nowSegments, synced)
			}
			if rolled {
				rolls++
			}
			segments, syncs = nowSegments, nowSyncs
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return rolls
	}
	if run(256, randomBodies(60, 512)) == 0 {
		t.Fatal("no segment rolled")
	}
	// Fill the tail without rolling, then reopen with a smaller segment
	// size: the first batch rolls before it writes anything.
	run(1<<20, randomBodies(5, 100))
	if run(64, randomBodies(30, 128)) == 0 {
		t.Fatal("no segment rolled")
	}
	// A tail of exactly the segment size is not full for tidwall/wal until
	// one more entry lands in it: that entry goes into the old segment and
	// the roll comes after it, so the new tail starts empty. Then an entry
	// of segment size minus that first entry must not roll.
	run(1<<20, randomBodies(3, 100))
	segs, _, err := ListSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	tailSize := segs[len(segs)-1].Size
	const firstBody = 20
	firstEntry := entrySize(firstBody)
	secondBody := 1
	for entrySize(secondBody) < int(tailSize)-firstEntry {
		secondBody++
	}
	if rolls := run(tailSize, []int{firstBody, secondBody}); rolls != 1 {
		t.Fatalf("%d rolls, want 1", rolls)
	}
	// An entry that brings the tail to exactly the segment size rolls.
	segs, _, err = ListSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rolls := run(segs[len(segs)-1].Size+int64(entrySize(30)), []int{30}); rolls != 1 {
		t.Fatalf("%d rolls, want 1", rolls)
	}
	run(tailSize, randomBodies(30, int(tailSize)/2))
	res, err := Scan(dir, 0, 0, nil)
	if err != nil || res.Last != lsn || res.Records != int(lsn) {
		t.Fatalf("scan %+v %v, want %d records", res, err, lsn)
	}
}

// entrySize is the size tidwall/wal gives the entry of a record with a body
// of this size.
func entrySize(body int) int {
	return uvarintLen(uint64(HeaderSize+body)) + HeaderSize + body
}

func TestFailureIsSticky(t *testing.T) {
	cases := []struct {
		name        string
		op          string
		segmentSize int64
		trigger     func(l *Log) error
	}{
		{"write_fails", "write", 0, appendAndWait},
		{"tail_fsync_fails", "sync", 0, appendAndWait},
		{"dir_fsync_after_roll_fails", "syncdir", 64, func(l *Log) error {
			for range 5 { // a roll comes within a few records of this size
				if err := appendAndWait(l); err != nil {
					return err
				}
			}
			return nil
		}},
		{"sync_call_fails", "sync", 0, func(l *Log) error {
			l.Append(1, testBody(l.LastLSN()+1))
			_, err := l.Sync()
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := NewFaultFS(OSFS(), 0)
			opts := Options{FS: ffs, SegmentSize: tc.segmentSize}
			l, _, err := Open(dir, opts, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
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
			err = tc.trigger(l)
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
			if err := l.TruncateFront(1); !errors.Is(err, ErrFailed) && err != nil {
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
		l, _, err := Open(t.TempDir(), Options{}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
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
		l, _, err := Open(t.TempDir(), Options{FS: ffs}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
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
		// Later failures (the write Close attempts fails again) must not
		// close the channel a second time, which would panic.
		ffs.FailNext("write")
		l.Append(1, []byte("after"))
		if err := l.Close(); !errors.Is(err, ErrFailed) {
			t.Fatalf("close: %v", err)
		}
		if l.Failed() != ch || !isClosed(ch) || l.Err() != first {
			t.Fatal("Failed changed after the first failure")
		}
	})
}

func appendAndWait(l *Log) error {
	_, c := l.Append(1, testBody(l.LastLSN()+1))
	return c.Wait()
}

func TestTruncateFrontThenReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: baseSegmentSize}
	writeLog(t, dir, opts, baseRecords)
	l, _, err := Open(dir, opts, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) != 3 {
		t.Fatalf("%d segments", len(segs))
	}
	if err := l.TruncateFront(l.DurableLSN() + 1); err == nil || l.Err() != nil {
		t.Fatalf("truncating beyond the durable lsn: %v, Err %v", err, l.Err())
	}
	// The last index of the first sealed segment: tidwall copies one record.
	cut := segs[1].First - 1
	if err := l.TruncateFront(cut); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateFront(1); err != nil {
		t.Fatalf("truncating below the first index is a no-op: %v", err)
	}
	if got := l.Segments(); got[0].First != cut || len(got) != 3 {
		t.Fatalf("after truncation: %+v", got)
	}
	// Into the tail segment: tidwall rewrites the tail, and the log keeps
	// appending and rolling correctly after it.
	intoTail := segs[2].First + 2
	if err := l.TruncateFront(intoTail); err != nil {
		t.Fatal(err)
	}
	if got := l.Segments(); len(got) != 1 || got[0].First != intoTail {
		t.Fatalf("after truncating into the tail: %+v", got)
	}
	for range 40 {
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
	}
	last := l.LastLSN()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	var r replayed
	l, info, err := Open(dir, opts, intoTail+3, r.apply)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if info.First != intoTail || info.Last != last {
		t.Fatalf("info %+v, want %d..%d", info, intoTail, last)
	}
	checkRecords(t, r.recs, intoTail+3, last)

	for _, tc := range []struct {
		from   uint64
		reason string
	}{
		{intoTail - 1, fmt.Sprintf("log starts at %d but replay needs %d", intoTail, intoTail-1)},
		{last + 2, fmt.Sprintf("log ends at %d before %d", last, last+2)},
	} {
		_, _, err := Open(dir, opts, tc.from, r.apply)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Err.Error() != tc.reason || ce.Index != tc.from {
			t.Fatalf("open from %d: %v, want %q", tc.from, err, tc.reason)
		}
	}
	// Replaying from just after the end is a clean, empty replay.
	if l, info, err := Open(dir, opts, last+1, r.apply); err != nil || info.Replayed != 0 {
		t.Fatalf("open from last+1: %v %+v", err, info)
	} else {
		l.Close()
	}
}

// TestScanDuringAppendAndTruncate runs Scan in a loop while a Log appends
// and truncates the same directory: a scan may find that what it needed was
// compacted away, but never reports corruption and never skips a record.
func TestScanDuringAppendAndTruncate(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentSize: 512, Sync: SyncNever}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
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
				segs := l.Segments()
				index := l.DurableLSN() // into the tail
				if i%300 == 0 && len(segs) >= 3 {
					index = segs[len(segs)-2].First - 1 // the end of a sealed segment
				}
				if err := l.TruncateFront(index); err != nil {
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
	t.Logf("%d scans, %d saw records compacted away, %d saw a partial tail", scans, compacted, tails)
	recs, info := reopen(t, dir, Options{SegmentSize: 512})
	if info.Last != 4000 {
		t.Fatalf("last %d", info.Last)
	}
	checkRecords(t, recs, info.First, 4000)
}

func TestScanReportsIncompleteTailReadOnly(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, 20)
	ll := readLayout(t, dir)
	tailPath := ll.path(ll.tail().Name)
	clean := readFileT(t, tailPath)
	partial := frame(1, 21, testBody(21))[:9]
	writeFileT(t, tailPath, append(bytes.Clone(clean), partial...))
	before := dirContents(t, dir)

	res, err := Scan(dir, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := TailInfo{File: ll.tail().Name, Offset: int64(len(clean)), Bytes: int64(len(partial)),
		Reason: fmt.Sprintf("entry of %d bytes runs past the end of the segment", HeaderSize+len(testBody(21)))}
	if res.Tail == nil || *res.Tail != want || res.Records != 20 || res.First != 1 || res.Last != 20 {
		t.Fatalf("got %+v tail %+v, want 20 records and tail %+v", res, res.Tail, want)
	}
	if !sameContents(before, dirContents(t, dir)) {
		t.Fatal("Scan modified the directory")
	}

	var got []uint64
	res, err = Scan(dir, 5, 12, func(p Position, r Record) error {
		if p.Index != r.LSN || p.Offset != ll.recs[r.LSN].Offset || p.File != ll.recs[r.LSN].File {
			return fmt.Errorf("position %+v for %d", p, r.LSN)
		}
		got = append(got, r.LSN)
		return nil
	})
	if err != nil || len(got) != 8 || got[0] != 5 || got[7] != 12 || res.Records != 8 {
		t.Fatalf("scan 5..12: %v %v", got, err)
	}
	stop := errors.New("stop")
	if _, err := Scan(dir, 0, 0, func(Position, Record) error { return stop }); err != stop {
		t.Fatalf("fn error not returned: %v", err)
	}
}

// gateFS holds the committer inside its first "write" check until the test
// lets it go.
type gateFS struct {
	FS
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateFS) Check(op string) error {
	if op == "write" {
		g.once.Do(func() {
			close(g.entered)
			<-g.release
		})
	}
	return g.FS.Check(op)
}

// TestAppendEncodedDoesNotAllocatePerRecord appends while the committer is
// held inside a write, so every record joins one pending batch: apart from
// the amortized growth of the batch buffers, an append allocates nothing.
func TestAppendEncodedDoesNotAllocatePerRecord(t *testing.T) {
	gate := &gateFS{FS: OSFS(), entered: make(chan struct{}), release: make(chan struct{})}
	l, _, err := Open(t.TempDir(), Options{FS: gate}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("a msgpack body of some length")
	encode := func(dst []byte) []byte { return append(dst, body...) }
	_, first := l.AppendEncoded(1, encode)
	<-gate.entered
	l.AppendEncoded(1, encode) // opens the next batch and its Commit
	allocs := testing.AllocsPerRun(2000, func() { l.AppendEncoded(1, encode) })
	close(gate.release)
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

func TestSyncPolicies(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"interval", Options{Sync: SyncInterval(5 * time.Millisecond)}},
		{"never", Options{Sync: SyncNever}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var syncs atomic.Int64
			tc.opts.OnSync = func(time.Duration) { syncs.Add(1) }
			l, _, err := Open(dir, tc.opts, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				if err := appendAndWait(l); err != nil {
					t.Fatal(err)
				}
			}
			if l.DurableLSN() != 10 {
				t.Fatalf("durable %d after written batches", l.DurableLSN())
			}
			if tc.opts.Sync.mode == syncInterval {
				deadline := time.Now().Add(5 * time.Second)
				for syncs.Load() == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if syncs.Load() == 0 {
					t.Fatal("no fsync within the interval")
				}
			} else if syncs.Load() != 0 {
				t.Fatalf("%d fsyncs under SyncNever", syncs.Load())
			}
			before := syncs.Load()
			l.Append(1, testBody(11))
			if lsn, err := l.Sync(); err != nil || lsn != 11 || syncs.Load() != before+1 {
				t.Fatalf("Sync: %d %v, %d fsyncs", lsn, err, syncs.Load()-before)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			recs, _ := reopen(t, dir, Options{})
			checkRecords(t, recs, 1, 11)
		})
	}
}

func TestClosedLog(t *testing.T) {
	l, _, err := Open(filepath.Join(t.TempDir(), "a", "b"), Options{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, c := l.Append(1, []byte("x")); !errors.Is(c.Wait(), ErrClosed) {
		t.Fatalf("append after close: %v", c.Wait())
	}
	if _, err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("sync after close: %v", err)
	}
	if err := l.TruncateFront(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("truncate after close: %v", err)
	}
}

func TestOpenCreatesWithPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "queue")
	l, info, err := Open(dir, Options{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if info.First != 1 || info.Last != 0 || info.Segments != 1 {
		t.Fatalf("fresh log info %+v", info)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v %v", st.Mode(), err)
	}
	st, err = os.Stat(filepath.Join(dir, SegmentName(1)))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("segment mode %v %v", st.Mode(), err)
	}
}

// TestGroupCommitNoSyncStress: under SyncNever batches are written as fast
// as appends arrive, so the committer often wakes to an empty pending batch
// just as an Append lands. Every committed record must still be written
// exactly once: it once reset the pending batch it had not swapped out,
// losing records (or crashing in Commit.release).
func TestGroupCommitNoSyncStress(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{Sync: SyncNever}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 8, 3000
	appendConcurrently(t, l, writers, perWriter)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := Scan(dir, 1, 0, func(Position, Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != writers*perWriter || res.Tail != nil {
		t.Fatalf("scan: %d records (tail %v), want %d", res.Records, res.Tail, writers*perWriter)
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
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
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

// TestTruncateFrontFailure fails TruncateFront in ways that change nothing
// (the Log goes on and a later TruncateFront succeeds) and in a way that
// leaves tidwall/wal half done (the Log fails).
func TestTruncateFrontFailure(t *testing.T) {
	const records = baseRecords
	cases := []struct {
		name      string
		breakIt   func(t *testing.T, dir string, index uint64, segs []Segment) (undo func())
		destroyed bool
	}{
		{"check_fails", func(t *testing.T, dir string, index uint64, segs []Segment) func() {
			return nil // the FaultFS fails the "truncate-front" check
		}, false},
		{"start_temp_cannot_be_created", func(t *testing.T, dir string, index uint64, segs []Segment) func() {
			// A directory where tidwall/wal creates its temp copy: the
			// create fails, as on a full disk, before anything changed.
			temp := filepath.Join(dir, SegmentName(index)+startSuffix+tempSuffix)
			if err := os.MkdirAll(filepath.Join(temp, "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			return func() { os.RemoveAll(temp) }
		}, false},
		{"start_file_cannot_be_renamed", func(t *testing.T, dir string, index uint64, segs []Segment) func() {
			start := filepath.Join(dir, SegmentName(index)+startSuffix)
			if err := os.MkdirAll(filepath.Join(start, "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			return func() { os.RemoveAll(start) }
		}, false},
		{"old_segment_cannot_be_removed", func(t *testing.T, dir string, index uint64, segs []Segment) func() {
			// The .START copy exists by the time the first segment fails
			// to go: tidwall/wal is half done.
			first := segs[0].Path
			if err := os.Remove(first); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(first, "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			return nil
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := NewFaultFS(OSFS(), 0)
			opts := Options{SegmentSize: baseSegmentSize, FS: ffs}
			writeLog(t, dir, opts, records)
			l, _, err := Open(dir, opts, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			segs := l.Segments()
			if len(segs) < 3 {
				t.Fatalf("%d segments", len(segs))
			}
			// The last record of the second segment: the first segment,
			// which the last case breaks, is not read, only removed.
			index := segs[2].First - 1
			if tc.name == "check_fails" {
				ffs.FailNext("truncate-front")
			}
			undo := tc.breakIt(t, dir, index, segs)
			err = l.TruncateFront(index)
			if err == nil {
				t.Fatal("truncate front succeeded")
			}
			if tc.destroyed {
				if !errors.Is(err, ErrFailed) || !errors.Is(l.Err(), ErrFailed) {
					t.Fatalf("got %v (Err %v), want the log failed", err, l.Err())
				}
				return
			}
			if errors.Is(err, ErrFailed) || l.Err() != nil {
				t.Fatalf("got %v (Err %v), want a plain error and a working log", err, l.Err())
			}
			if undo != nil {
				undo()
			}
			if got := l.Segments(); len(got) != len(segs) || got[0].Name != segs[0].Name {
				t.Fatalf("segments changed: %v", got)
			}
			for range 3 {
				if err := appendAndWait(l); err != nil {
					t.Fatalf("append after a failure that changed nothing: %v", err)
				}
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
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
			checkRecords(t, recs, index, records+3)
		})
	}
}
