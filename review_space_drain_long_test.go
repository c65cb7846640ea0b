//go:build long

package walq

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestReviewSpaceDrainSmallItemsFailsQueue (a hostile review's finding, kept as a regression test; what follows is what the build before its fix did): guarantees.md (Failure): "A
// full disk stops the producers, not the queue ... What ends items
// (leases, acks, nacks, dead letters, deletes) keeps the room under the
// watermark ... so a drain on a tight disk finishes and frees the space."
//
// A backlog of small items (16-byte bodies, put in batches) whose index
// snapshot is larger than the room the watermark keeps: the producers are
// stopped at the watermark, as promised, and consumers drain. Each lease
// and ack takes ~160 bytes of log, and only a compaction frees them; a
// compaction needs a snapshot of the remaining items (~49 bytes each),
// which roomForSnapshotLocked refuses while it would not fit, and it never
// fits: the drain uses the room faster than the snapshot shrinks. So the
// acks eat the whole watermark's room, the log meets ENOSPC, and the queue
// fails (ErrFailed) with most of the backlog still stored.
func TestReviewSpaceDrainSmallItemsFailsQueue(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(2 << 20)
	compacted := make(chan error, 1024)
	opts := Options{Visibility: time.Hour, SegmentSize: 64 << 10, DiskWatermark: wm,
		CompactMinBytes: 256 << 10, CompactRatio: 1.5,
		onCompact: func(err error) {
			select {
			case compacted <- err:
			default:
			}
		}}
	q, err := Open(dir, opts)
	must(t, err)
	defer q.Close()
	ctx := context.Background()
	const n = 60000
	items := make([]Item, 1000)
	for i := range items {
		items[i].Body = make([]byte, 16)
	}
	for range n / len(items) {
		_, err := q.PutBatch(ctx, items)
		must(t, err)
	}
	// Another process takes the disk down to the watermark and a little;
	// a producer then puts until the watermark stops it.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-int(wm)-256<<10)
	stored := n
	for {
		_, err := q.PutBatch(ctx, items[:100])
		if errors.Is(err, ErrDiskFull) {
			break
		}
		must(t, err)
		stored += 100
	}
	t.Logf("%d items stored; puts refused at %d KiB free (watermark %d KiB)", stored, freeBytes(t, mnt)>>10, wm>>10)

	drained := 0
	for drained < stored {
		m, ok, err := q.TryGet()
		if err == nil && !ok {
			break
		}
		if err == nil {
			err = q.Ack(m.Receipt)
		}
		if err != nil {
			st := q.Stats()
			for len(compacted) > 0 {
				t.Logf("compaction: %v", <-compacted)
			}
			t.Logf("reserve %d", q.disk.reserve)
			t.Fatalf("drain, %d of %d acked (%d KiB free, compactions %d, failed %d): %v",
				drained, stored, freeBytes(t, mnt)>>10, st.Compactions, st.CompactionsFailed, err)
		}
		drained++
		if drained%2000 == 0 {
			cerr := q.Compact()
			if errors.Is(cerr, ErrFailed) {
				t.Fatalf("Compact after %d acks: %v", drained, cerr)
			}
		}
	}
	if drained != stored {
		t.Fatalf("drained %d of %d", drained, stored)
	}
	must(t, q.Compact())
	if _, err := q.Put(ctx, []byte("after the drain")); err != nil {
		t.Fatalf("a put after the drain: %v", err)
	}
}
