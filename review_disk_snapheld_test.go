//go:build long

package walq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/walq/walq/wal"
)

// reviewSnapBlockFS is the OS FS (preallocation included) that blocks the
// write to a snapshot's temp file that would take it past after bytes,
// until release is closed.
type reviewSnapBlockFS struct {
	wal.FS
	after   int64
	armed   atomic.Bool
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
}

type reviewSnapBlockFile struct {
	wal.File
	fs      *reviewSnapBlockFS
	written int64
}

func (f *reviewSnapBlockFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !f.armed.Load() || !strings.HasPrefix(filepath.Base(name), "snapshot-") || !strings.HasSuffix(name, ".tmp") {
		return file, err
	}
	return &reviewSnapBlockFile{File: file, fs: f}, nil
}

func (f *reviewSnapBlockFS) Preallocate(file wal.File, n int64) error {
	if b, ok := file.(*reviewSnapBlockFile); ok {
		file = b.File
	}
	return f.FS.(wal.Preallocator).Preallocate(file, n)
}

func (f *reviewSnapBlockFS) DropCache(file wal.File) error {
	return f.FS.(wal.CacheDropper).DropCache(file)
}

func (f *reviewSnapBlockFile) Write(p []byte) (int, error) {
	if f.written+int64(len(p)) > f.fs.after {
		f.fs.once.Do(func() {
			close(f.fs.blocked)
			<-f.fs.release
		})
	}
	n, err := f.File.Write(p)
	f.written += int64(n)
	return n, err
}

// TestReviewDiskSnapshotWrittenNotCounted: while a compaction writes its
// snapshot, puts subtract the room set aside for it less what it has
// written (held = estimate - Flushed), from a reading of the disk taken
// before it wrote anything. What the snapshot wrote is thus counted
// neither as held nor as taken: the estimate of the free space is too
// high by all of it. With a 10 MB snapshot blocked after 9 MiB, a batch
// that passes the DiskWatermark check by that error meets the full disk,
// and the queue fails. docs/guarantees.md: "What a compaction is about to
// write (its snapshot, ...) is set aside ..., and puts count it as taken
// until it is written"; a PutBatch that would leave less than the
// watermark free "returns ErrDiskFull and stores nothing".
func TestReviewDiskSnapshotWrittenNotCounted(t *testing.T) {
	mnt := mountTmpfs(t, "96m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(2 << 20)
	bfs := &reviewSnapBlockFS{FS: wal.OSFS(), blocked: make(chan struct{}), release: make(chan struct{})}
	q, err := Open(dir, withFS(Options{DisableAutoCompact: true, DiskWatermark: wm, Sync: SyncNever, SegmentSize: 1 << 20}, bfs))
	must(t, err)
	defer q.Close()
	ctx := context.Background()
	items := make([]Item, 10000)
	for i := range items {
		items[i].Body = make([]byte, 100)
	}
	for range 24 { // 240,000 items: a snapshot of about 12 MB
		_, err := q.PutBatch(ctx, items)
		must(t, err)
	}
	must(t, q.Compact())                                     // the next snapshot's estimate is this one's size
	est := max(q.lastSnapBytes, int64(q.Stats().Items+1)*64) // what roomForSnapshotLocked will set aside
	if _, err := q.Put(ctx, []byte("one more")); err != nil {
		t.Fatal(err)
	}
	// Free: the watermark, the snapshot's estimate and 1 MiB.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-int(wm)-int(est)-1<<20)
	bfs.after = q.lastSnapBytes - 512<<10 // the snapshot is blocked once it has written nearly all of itself
	bfs.armed.Store(true)
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(bfs.release) }) }
	t.Cleanup(let) // a failed check never leaves the snapshot blocked
	done := make(chan error, 1)
	go func() { done <- q.Compact() }()
	select {
	case <-bfs.blocked:
	case err := <-done:
		t.Fatalf("the compaction ended before its snapshot reached %d bytes: %v", bfs.after, err)
	}
	q.mu.Lock()
	held := q.disk.held()
	estFree := q.disk.free - (q.disk.appended - q.disk.at)
	q.mu.Unlock()
	real := int64(freeBytes(t, mnt))
	t.Logf("snapshot estimate %d KiB, blocked after %d KiB: held %d KiB; free: estimate %d KiB, real %d KiB",
		est>>10, bfs.after>>10, held>>10, estFree>>10, real>>10)
	// A batch that the estimate leaves 1 MiB over the watermark (and
	// over the margin within which a put reads the disk again).
	n := max(1, int((estFree-held-wm-1<<20-diskResample)>>20))
	batch := make([]Item, n)
	for i := range batch {
		batch[i].Body = make([]byte, 1<<20-128)
	}
	_, err = q.PutBatch(ctx, batch)
	after := int64(freeBytes(t, mnt))
	t.Logf("PutBatch of %d MiB with %d KiB really free, %d KiB of it set aside: %v; %d KiB free after", n, real>>10, held>>10, err, after>>10)
	let()
	cerr := <-done
	t.Logf("the compaction: %v", cerr)
	if err == nil && after < wm {
		t.Errorf("a batch was stored that left %d KiB free, under the watermark (%d KiB)", after>>10, wm>>10)
	}
	if err != nil && !errors.Is(err, ErrDiskFull) {
		t.Errorf("PutBatch = %v; want ErrDiskFull", err)
	}
	if ferr := q.failure(); ferr != nil {
		t.Errorf("the queue failed: %v", ferr)
	}
}
