//go:build long

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
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// TestKeysNotCountedByWatermark: a PutBatch of items whose keys
// make its record large (empty bodies, 1,000-byte keys) is checked
// against DiskWatermark by its bodies only (and 32 bytes an item), so it
// passes with far less room than it takes, and its write meets the full
// disk: the queue fails. The docs promise ErrDiskFull and nothing stored.
func TestKeysNotCountedByWatermark(t *testing.T) {
	mnt := mountTmpfs(t, "48m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(8 << 20)
	q, err := Open(dir, Options{DisableAutoCompact: true, DiskWatermark: wm})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Leave the watermark and 4 MiB free.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-int(wm)-4<<20)
	t.Logf("free before the batch: %d KiB (watermark %d KiB)", freeBytes(t, mnt)>>10, wm>>10)
	items := make([]Item, 20000) // about 20 MB of keys: a record of 20 MB
	for i := range items {
		items[i] = Item{Key: fmt.Sprintf("%01000d", i)}
	}
	_, err = q.PutBatch(context.Background(), items)
	t.Logf("PutBatch: %v; free after: %d KiB", err, freeBytes(t, mnt)>>10)
	if !errors.Is(err, ErrDiskFull) {
		t.Errorf("PutBatch of a 20 MB record with %d KiB free over the watermark = %v; want ErrDiskFull", 4<<10, err)
	}
	if err := q.failure(); err != nil {
		t.Errorf("the queue failed: %v", err)
	}
	if _, err := q.Put(context.Background(), []byte("small")); errors.Is(err, ErrFailed) {
		t.Errorf("a small put after: %v", err)
	}
	_ = strings.Contains
	_ = time.Second
}

// TestSnapshotNotCountedByWatermark: the free-space estimate counts
// the log's appends since its last reading, but not the snapshot a
// compaction wrote. After a compaction whose snapshot took 10 MB and freed
// nothing (the backlog is dense and held), the next put is checked against
// the reading from before the snapshot: a batch larger than the real free
// space passes the watermark check, meets the full disk and fails the
// queue. The docs promise ErrDiskFull and a queue that keeps serving.
func TestSnapshotNotCountedByWatermark(t *testing.T) {
	mnt := mountTmpfs(t, "64m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(8 << 20)
	q, err := Open(dir, Options{DisableAutoCompact: true, DiskWatermark: wm, Sync: SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	// About 30 MB of log to come; leave the watermark and 12 MiB after it.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-int(wm)-12<<20-30<<20)
	items := make([]Item, 500)
	for b := 0; freeBytes(t, mnt) > int(wm)+13<<20; b++ {
		for i := range items {
			items[i] = Item{Body: make([]byte, 2000), Key: fmt.Sprintf("%01000d", b*len(items)+i)}
		}
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	// One small put: the free space is read again (over 1 MiB was
	// appended since the last reading), and the estimate is exact.
	if _, err := q.Put(ctx, []byte("small")); err != nil {
		t.Fatal(err)
	}
	before := q.Stats()
	t.Logf("before compaction: %d items, %d KiB free, Stats.DiskFree %d KiB", before.Items, freeBytes(t, mnt)>>10, before.DiskFree>>10)
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	after := q.Stats()
	real := int64(freeBytes(t, mnt))
	t.Logf("after compaction: %d KiB free, Stats.DiskFree %d KiB, snapshot %d KiB", real>>10, after.DiskFree>>10, q.lastSnapBytes>>10)
	// A batch of what the estimate leaves above the watermark and the 1 MiB
	// margin within which it reads the disk again.
	// At least one MiB: the log's preallocated tail can leave less.
	n := max(1, int((after.DiskFree-wm-diskResample-64<<10)>>20))
	batch := make([]Item, n)
	for i := range batch {
		batch[i] = Item{Body: make([]byte, 1<<20-64)}
	}
	_, err = q.PutBatch(ctx, batch)
	t.Logf("PutBatch of %d MiB with %d KiB really free: %v; %d KiB free after", n, real>>10, err, freeBytes(t, mnt)>>10)
	if err == nil && int64(freeBytes(t, mnt)) < wm {
		t.Errorf("a put was stored that left %d KiB free, under the watermark of %d KiB", freeBytes(t, mnt)>>10, wm>>10)
	}
	if err != nil && !errors.Is(err, ErrDiskFull) {
		t.Errorf("PutBatch = %v; want ErrDiskFull", err)
	}
	if err := q.failure(); err != nil {
		t.Errorf("the queue failed: %v", err)
	}
}

// TestDiskFreeGaugeDuringADrain: the free space is read only when
// a put checks it, so during a drain without puts Stats.DiskFree (and
// walq_disk_free_bytes, documented as read "every MiB appended") goes on
// subtracting what acks and nacks append from a reading taken before the
// drain, while compaction gave the disk back: it shows a full disk, and
// then less than nothing, on a disk that is nearly empty.
// TestCompactionFaultKeepsServing fails each file operation of a
// compaction in turn, in the running queue: unless the failed operation
// was one of the log's (which fails the directory), the queue goes on
// taking puts, leases and acks, CompactionsFailed counts the failure, a
// second compaction succeeds, and a reopen finds the state the queue had.
func TestCompactionFaultKeepsServing(t *testing.T) {
	opts := faultTestOptions()
	clock := opts.Clock.(*ManualClock)
	base, _ := baseQueueDir(t, opts)
	opened, compacted, ops := countOps(t, base, opts)
	t.Logf("compaction ops %d..%d", opened+1, compacted)
	for n := opened + 1; n <= compacted; n++ {
		dir := copyDir(t, base)
		ffs := wal.NewFaultFS(opts.fs, n)
		q, err := Open(dir, withFS(opts, ffs))
		if err != nil {
			t.Fatalf("op %d: open: %v", n, err)
		}
		cerr := q.Compact()
		if !ffs.Failed() {
			t.Fatalf("op %d (%s): nothing failed (%v)", n, ops[n-1], cerr)
		}
		if ferr := q.log.Err(); ferr != nil {
			t.Logf("op %d (%s): the directory failed: %v", n, ops[n-1], ferr)
			q.Close()
			continue
		}
		if cerr == nil {
			t.Logf("op %d (%s) failed, Compact returned nil", n, ops[n-1])
		} else if st := q.Stats(); st.CompactionsFailed != 1 {
			t.Errorf("op %d (%s): CompactionsFailed %d", n, ops[n-1], st.CompactionsFailed)
		}
		id, err := q.Put(context.Background(), []byte("after"))
		if err != nil {
			t.Errorf("op %d (%s) failed, compaction returned %v, queue not failed; then Put: %v", n, ops[n-1], cerr, err)
			q.Close()
			continue
		}
		for {
			m, ok, err := q.TryGet()
			if err != nil {
				t.Fatalf("op %d (%s): TryGet after: %v", n, ops[n-1], err)
			}
			if !ok {
				break
			}
			if err := q.Ack(m.Receipt); err != nil {
				t.Fatalf("op %d (%s): Ack after: %v", n, ops[n-1], err)
			}
		}
		_ = id
		if err := q.Compact(); err != nil {
			t.Errorf("op %d (%s): the next compaction: %v", n, ops[n-1], err)
		}
		want := q.stateBytes()
		if err := q.Close(); err != nil {
			t.Errorf("op %d (%s): close: %v", n, ops[n-1], err)
		}
		q, err = Open(dir, opts)
		if err != nil {
			t.Fatalf("op %d (%s): reopen: %v", n, ops[n-1], err)
		}
		if got := q.stateBytes(); !bytes.Equal(pruned(t, got, clock.Now()), pruned(t, want, clock.Now())) {
			t.Errorf("op %d (%s): reopened state differs", n, ops[n-1])
		}
		q.Close()
	}
}

// blockFS blocks the first write to a snapshot's temp file until release
// is closed, and closes blocked once it is there.
type blockFS struct {
	wal.FS
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
	armed   atomic.Bool
}

type blockFile struct {
	wal.File
	fs *blockFS
}

func (f *blockFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !f.armed.Load() || !strings.HasSuffix(name, ".tmp") || !strings.Contains(filepath.Base(name), "snap") {
		return file, err
	}
	return blockFile{file, f}, nil
}

func (f blockFile) Write(p []byte) (int, error) {
	f.fs.once.Do(func() {
		close(f.fs.blocked)
		<-f.fs.release
	})
	return f.File.Write(p)
}

// TestDeleteDuringSnapshot: a compaction's snapshot is held at its
// first write while a named queue with leases, dead letters, held and
// released keys is deleted by force, the default queue goes on (puts,
// acks), and then let go: the snapshot file holds the state at its start,
// byte for byte; a reopen finds the state as the queue left it; and the
// compaction copied none of the default queue's held backlog.
func TestDeleteDuringSnapshot(t *testing.T) {
	bfs := &blockFS{FS: noSyncOS(), blocked: make(chan struct{}), release: make(chan struct{})}
	opts := Options{SegmentSize: 64 << 10, DisableAutoCompact: true, Sync: SyncNever, MaxAttempts: 1}
	q, clock, dir := testQueue(t, withFS(opts, bfs))
	ctx := context.Background()
	put := func(h *Queue, n int, prefix string) []uint64 {
		var ids []uint64
		items := make([]Item, 500)
		for b := 0; b < n; b += len(items) {
			for i := range items {
				items[i] = Item{Body: make([]byte, 1<<10), Key: fmt.Sprintf("%s-%0250d", prefix, b+i), Priority: i % 3}
			}
			got, err := h.PutBatch(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got...)
		}
		return ids
	}
	put(q, 4000, "default")
	brief, err := q.OpenQueue("brief", QueueOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	put(brief, 3000, "brief")
	put(q, 2000, "default2")
	for i := range 300 {
		m := mustTryGet(t, brief)
		switch i % 3 {
		case 0:
			if err := brief.Ack(m.Receipt); err != nil { // its key is released
				t.Fatal(err)
			}
		case 1:
			if err := brief.Nack(m.Receipt, errors.New("poison")); err != nil { // a dead letter
				t.Fatal(err)
			}
		}
		// case 2: left leased
	}
	if err := q.Compact(); err != nil { // the default queue's backlog is dense: kept, not copied
		t.Fatal(err)
	}
	// Bodies of the default queue held across half-drained segments.
	for range 1000 {
		if err := q.Ack(mustTryGet(t, q).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	put(brief, 500, "brief2") // bodies appended just before the freeze
	want := q.stateBytes()
	relocatedBefore := q.Stats().Bodies.RelocatedBytes
	if bd := brief.Stats(); bd.Leased == 0 || bd.Dead == 0 || bd.Keys == 0 {
		t.Fatalf("brief: %+v", bd)
	}
	compacted := make(chan error, 1)
	bfs.armed.Store(true)
	go func() { compacted <- q.Compact() }()
	select {
	case <-bfs.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the snapshot never wrote")
	}
	if err := brief.Delete(true); err != nil {
		t.Fatalf("Delete during the snapshot: %v", err)
	}
	put(q, 100, "during")
	for range 50 {
		if err := q.Ack(mustTryGet(t, q).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	close(bfs.release)
	if err := <-compacted; err != nil {
		t.Fatalf("the compaction the delete came into: %v", err)
	}
	snaps, err := wal.ListSnapshots(dir)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots %v, %v", snaps, err)
	}
	snap, err := wal.ReadSnapshot(snaps[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap.Body, want) {
		t.Errorf("the snapshot (%d bytes) is not the state at its start (%d bytes)", len(snap.Body), len(want))
		if st, err := state.UnmarshalSnapshot(snap.Body); err != nil {
			t.Errorf("and it does not decode: %v", err)
		} else {
			ws, _ := state.UnmarshalSnapshot(want)
			t.Errorf("it decodes to %d items (want %d)", st.TotalLen(), ws.TotalLen())
		}
	}
	if got := q.Stats().Bodies.RelocatedBytes - relocatedBefore; got > 600<<10 {
		t.Errorf("the compaction copied %d KiB forward (brief held 3.5 MiB, now deleted)", got>>10)
	}
	live := q.stateBytes()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q2, err := Open(dir, withFS(opts, noSyncOS()))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer q2.Close()
	if got := q2.stateBytes(); !bytes.Equal(pruned(t, got, clock.Now()), pruned(t, live, clock.Now())) {
		t.Errorf("the reopened state differs from the one the queue left")
	}
}

// TestWatermarkOverTheDisk (held): with a watermark larger than
// the disk (and math.MaxInt64), every put is refused with ErrDiskFull and
// stores nothing (no ID, no key, no counter), while leases, acks, nacks,
// extensions, dead letters, redrives, queue creation and deletion go on.
// TestTightDrainWithQueues: TestDrainOnATightDisk with three
// priorities, and named queues created, filled (as far as the disk lets
// them) and deleted by force with leases open, all through the drain.
func TestTightDrainWithQueues(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "queue")
	opts := Options{Visibility: time.Minute, SegmentSize: 128 << 10, CompactMinBytes: 256 << 10, CompactRatio: 1.5,
		DiskWatermark: -1}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := make([]byte, 4<<10)
	var filled []uint64
	for freeBytes(t, mnt) > 700<<10+64<<10 {
		id, err := q.Put(ctx, body, WithPriority(len(filled)%3))
		if err != nil {
			t.Fatalf("fill: %v", err)
		}
		filled = append(filled, id)
	}
	must(t, q.Close())
	compacted := make(chan error, 1024)
	opts.DiskWatermark = 512 << 10
	opts.onCompact = func(err error) {
		select { // a tight disk compacts often: never block the loop
		case compacted <- err:
		default:
		}
	}
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []error
	report := func(err error) {
		mu.Lock()
		bad = append(bad, err)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := q.Put(ctx, body, WithPriority(2)); err != nil && !errors.Is(err, ErrDiskFull) {
				report(fmt.Errorf("producer: %w", err))
				return
			}
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			h, err := q.OpenQueue(fmt.Sprint("side-", i), QueueOptions{})
			if err != nil {
				report(fmt.Errorf("OpenQueue: %w", err))
				return
			}
			for range 20 {
				if _, err := h.Put(ctx, body); err != nil && !errors.Is(err, ErrDiskFull) {
					report(fmt.Errorf("side put: %w", err))
					return
				}
			}
			if _, _, err := h.TryGet(); err != nil {
				report(fmt.Errorf("side get: %w", err))
				return
			}
			if err := h.Delete(true); err != nil {
				report(fmt.Errorf("side delete: %w", err))
				return
			}
			h.Close()
		}
	})
	left := make(map[uint64]bool, len(filled))
	for _, id := range filled {
		left[id] = true
	}
	var drainErr error
	for len(left) > 0 && drainErr == nil {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := q.Get(gctx)
		cancel()
		if err != nil {
			drainErr = fmt.Errorf("Get, %d left: %w", len(left), err)
			break
		}
		if err := q.Ack(m.Receipt); err != nil {
			drainErr = fmt.Errorf("Ack, %d left: %w", len(left), err)
		}
		delete(left, m.ID)
	}
	close(stop)
	wg.Wait()
	st := q.Stats()
	t.Logf("compactions %d, failed %d, copies skipped %d, refused %d; %d KiB free", st.Compactions, st.CompactionsFailed,
		st.CopiesSkipped, st.DiskRefused, freeBytes(t, mnt)>>10)
	if drainErr != nil {
		t.Fatal(drainErr)
	}
	for _, err := range bad {
		t.Error(err)
	}
	if err := q.failure(); err != nil {
		t.Fatalf("the queue failed: %v", err)
	}
}

// TestCopiesAfterTheSnapshotFailTheQueue: compaction decides
// whether it may copy bodies forward (roomForCopies) from the free-space
// estimate, which does not count the snapshot the same compaction has
// just written. With an index snapshot of 10 MB and 7 MiB of bodies to
// copy out of sparse segments, on a disk with 13 MiB free and a watermark
// of 8 MiB, the estimate says 13 MiB free (copies allowed: 6 MiB stays
// over half the watermark) while the disk has 2.5 MiB: the relocate
// records meet the full disk, and a compaction fails the whole queue.
// The docs: compaction copies only while half the watermark stays free,
// "so a drain on a tight disk finishes".
func TestCopiesAfterTheSnapshotFailTheQueue(t *testing.T) {
	mnt := mountTmpfs(t, "96m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(8 << 20)
	opts := Options{DisableAutoCompact: true, DiskWatermark: -1, SegmentSize: 1 << 20, Sync: SyncNever,
		Visibility: time.Hour, noCloseSnapshot: true}
	q, err := Open(dir, opts)
	must(t, err)
	ctx := context.Background()
	items := make([]Item, 500)
	for b := range 20 { // 10,000 items with keys of 1,000 bytes: an index of 10 MB
		for i := range items {
			items[i] = Item{Key: fmt.Sprintf("%01000d", b*len(items)+i), Priority: 10}
		}
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	body := make([]byte, 8<<10)
	for i := range 2700 { // 21 MiB of bodies, three priorities in turn
		if _, err := q.Put(ctx, body, WithPriority(i%3)); err != nil {
			t.Fatal(err)
		}
	}
	// Drain two priorities of three: the body segments are a third live.
	for range 1800 {
		m := mustTryGet(t, q)
		if m.Priority >= 2 {
			t.Fatalf("drained a priority %d item", m.Priority)
		}
		must(t, q.Ack(m.Receipt))
	}
	must(t, q.Close())
	q.Close()
	// 13 MiB free: half the watermark, the 7 MiB to copy and 2 MiB.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-13<<20)
	opts.DiskWatermark = wm
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	if _, err := q.Put(ctx, []byte("small")); err != nil { // the first reading of the free space
		t.Fatal(err)
	}
	t.Logf("before compaction: %d KiB free, Stats.DiskFree %d KiB", freeBytes(t, mnt)>>10, q.Stats().DiskFree>>10)
	cerr := q.Compact()
	st := q.Stats()
	t.Logf("Compact: %v; %d KiB free; snapshot %d KiB, relocated %d KiB, copies skipped %d",
		cerr, freeBytes(t, mnt)>>10, q.lastSnapBytes>>10, st.Bodies.RelocatedBytes>>10, st.CopiesSkipped)
	if err := q.log.Err(); err != nil {
		t.Errorf("a compaction on a disk over its watermark failed the log: %v", err)
	}
	if err := q.failure(); err != nil {
		t.Errorf("a compaction on a disk over its watermark failed the queue: %v", err)
	}
	if _, _, err := q.TryGet(); err != nil {
		t.Errorf("a lease after the compaction: %v", err)
	}
}

// TestSnapshotRoomHeldFromPuts: while a compaction writes its snapshot
// (held at its first write), the room it found for it is set aside: a
// put that fits the disk's free space, but not beside the snapshot still
// to come, is refused with ErrDiskFull and says so; once the snapshot is
// written nothing is held, and puts go on.
func TestSnapshotRoomHeldFromPuts(t *testing.T) {
	mnt := mountTmpfs(t, "64m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(4 << 20)
	bfs := &blockFS{FS: noSyncOS(), blocked: make(chan struct{}), release: make(chan struct{})}
	q, err := Open(dir, withFS(Options{DisableAutoCompact: true, DiskWatermark: wm, Sync: SyncNever}, bfs))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	items := make([]Item, 10000)
	for range 10 {
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	q.mu.Lock()
	est := q.snapshotEstimateLocked() // 64 bytes an item and the header: no snapshot written before
	q.mu.Unlock()
	body := 1<<20 - 100
	// Free: the watermark, the body and the snapshot's estimate, less
	// 512 KiB: the put fits the disk, but not beside the snapshot.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-int(wm)-body-int(est)+512<<10)
	bfs.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- q.Compact() }()
	<-bfs.blocked
	q.mu.Lock()
	held := q.disk.held()
	q.mu.Unlock()
	if held <= 0 || held > est {
		t.Errorf("held %d bytes for the snapshot, want its estimate %d less what it wrote", held, est)
	}
	_, err = q.Put(ctx, make([]byte, body))
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "set aside for compaction") {
		t.Errorf("a put of %d KiB with %d KiB free, %d KiB of it for the snapshot = %v; want ErrDiskFull naming the room set aside",
			body>>10, freeBytes(t, mnt)>>10, est>>10, err)
	}
	close(bfs.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	held = q.disk.held()
	q.mu.Unlock()
	if held != 0 {
		t.Errorf("%d bytes still held after the compaction", held)
	}
	if _, err := q.Put(ctx, []byte("small")); err != nil {
		t.Errorf("a small put after the compaction: %v", err)
	}
}
