//go:build long

package walq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestReviewSpaceLargeDeleteFailsQueue (a hostile review's finding, kept as a regression test; what follows is what the build before its fix did): guarantees.md: "A full disk stops
// the producers, not the queue ... What ends items (leases, acks, nacks,
// dead letters, deletes) keeps the room under the watermark"; options.md:
// the watermark is there "so that acks, nacks, leases and deletes keep
// their room". But one DeleteItems (or Redrive, PurgeDeadLetters with IDs)
// is one record of up to MaxIDs IDs (64 MiB), four times the default
// watermark, and nothing checks it against the free space: an operator
// who deletes a large backlog to free a disk that stopped the producers
// (the very moment the disk is tight) writes a record larger than the
// room, the log meets ENOSPC and the queue fails (ErrFailed), where
// ErrDiskFull (nothing changed) or success was due.
func TestReviewSpaceLargeDeleteFailsQueue(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(512 << 10)
	q, err := Open(dir, Options{SegmentSize: 64 << 10, DiskWatermark: wm, DisableAutoCompact: true})
	must(t, err)
	defer q.Close()
	ctx := context.Background()
	items := make([]Item, 1000)
	var ids []uint64
	for range 200 { // puts may stop earlier: room is kept for compaction's snapshots
		got, err := q.PutBatch(ctx, items)
		if errors.Is(err, ErrDiskFull) {
			break
		}
		must(t, err)
		ids = append(ids, got...)
	}
	if fill := freeBytes(t, mnt) - int(wm) - 128<<10; fill > 0 {
		writeFile(t, filepath.Join(mnt, "filler"), fill)
	}
	for {
		got, err := q.PutBatch(ctx, items[:100])
		if errors.Is(err, ErrDiskFull) {
			break
		}
		must(t, err)
		ids = append(ids, got...)
	}
	t.Logf("%d items; puts refused at %d KiB free (watermark %d KiB)", len(ids), freeBytes(t, mnt)>>10, wm>>10)
	// Someone else takes the disk down to less than the record needs
	// (5 bytes an ID here; 3 leaves less): it must be refused cleanly, and smaller calls
	// go through.
	if fill := freeBytes(t, mnt) - len(ids)*3; fill > 0 {
		writeFile(t, filepath.Join(mnt, "filler2"), fill)
	}
	err = q.DeleteItems(ids...)
	t.Logf("DeleteItems of %d items with %d KiB free: %v", len(ids), freeBytes(t, mnt)>>10, err)
	if !errors.Is(err, ErrDiskFull) {
		t.Errorf("DeleteItems of a record larger than the free disk: %v, want ErrDiskFull", err)
	}
	if ferr := q.failure(); ferr != nil {
		t.Fatalf("the queue failed: %v", ferr)
	}
	must(t, q.DeleteItems(ids[:1000]...))
	ids = ids[1000:]
	must(t, os.Remove(filepath.Join(mnt, "filler2")))
	err = q.DeleteItems(ids...)
	t.Logf("DeleteItems of %d items: %v", len(ids), err)
	if err != nil && !errors.Is(err, ErrDiskFull) {
		t.Errorf("DeleteItems on a disk at the watermark: %v; want success or ErrDiskFull", err)
	}
	if ferr := q.failure(); ferr != nil {
		t.Errorf("the queue failed: %v", ferr)
	}
}
