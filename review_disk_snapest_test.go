//go:build long

package walq

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestReviewDiskDrainedSnapshotEstimate: the room a compaction asks for
// its snapshot is max(the last snapshot's size, 64 bytes an item). After
// a drain the state is empty and its snapshot takes a few hundred bytes,
// but the estimate is still the size of the snapshot of the full backlog.
// On a tight disk (under the watermark: puts refused) the compaction that
// would free the drained segments is refused "no room for a snapshot",
// again and again, and the empty queue refuses every put for good.
// docs/guarantees.md: "so a drain on a tight disk finishes and frees the
// space".
func TestReviewDiskDrainedSnapshotEstimate(t *testing.T) {
	mnt := mountTmpfs(t, "64m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(8 << 20)
	q, err := Open(dir, Options{DisableAutoCompact: true, DiskWatermark: wm, Sync: SyncNever})
	must(t, err)
	defer q.Close()
	ctx := context.Background()
	var ids []uint64
	items := make([]Item, 10000)
	for i := range items {
		items[i].Body = make([]byte, 100)
	}
	for range 20 { // 200,000 items: a snapshot of several MB, a log of 20+ MB
		got, err := q.PutBatch(ctx, items)
		must(t, err)
		ids = append(ids, got...)
	}
	must(t, q.Compact())
	t.Logf("snapshot of the backlog: %d KiB; log %d KiB", q.lastSnapBytes>>10, q.Stats().LogBytes>>10)
	// The drain (here one record; acks end the same way).
	must(t, q.DeleteItems(ids...))
	if n := q.Stats().Items; n != 0 {
		t.Fatalf("%d items left", n)
	}
	// A tight disk: 6 MiB free, under the watermark of 8 MiB.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-6<<20)
	q.Stats() // reads the free space again
	if _, err := q.Put(ctx, []byte("x")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("put under the watermark: %v, want ErrDiskFull", err)
	}
	logBefore := q.Stats().LogBytes
	cerr := q.Compact()
	st := q.Stats()
	t.Logf("Compact of an empty state with %d KiB free: %v; log %d KiB -> %d KiB", freeBytes(t, mnt)>>10, cerr, logBefore>>10, st.LogBytes>>10)
	if cerr != nil {
		t.Errorf("the compaction after the drain, whose snapshot holds no item, was refused: %v", cerr)
	}
	if _, err := q.Put(ctx, []byte("x")); err != nil {
		t.Errorf("a put after the drain and its compaction: %v (%d KiB free; %d KiB of drained log kept)",
			err, freeBytes(t, mnt)>>10, st.LogBytes>>10)
	}
}
