package walq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReviewDiskNoInodesTailGrowsUnbounded: a disk with blocks free but no
// inode free (another process made many small files) is a full disk for
// every file the queue must create, yet DiskWatermark looks at blocks
// only. Each roll fails to create its segment and is put off ("tries
// again a quarter segment later"), the tail grows without bound, puts go
// on being taken, and compaction, which must create a snapshot file and
// start a new segment before it removes anything, fails every time: once
// every item is acked the log still holds everything ever put. README:
// "compaction keeps the log in proportion to the live data";
// guarantees.md: "A full disk stops the producers, not the queue".
func TestReviewDiskNoInodesTailGrowsUnbounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mnt, 0o700))
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=64m,nr_inodes=64"); err != nil {
		t.Skipf("mount: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	dir := filepath.Join(mnt, "queue")
	seg := int64(64 << 10)
	q, err := Open(dir, Options{SegmentSize: seg, DiskWatermark: 8 << 20, CompactMinBytes: 1, CompactRatio: 1.5})
	must(t, err)
	defer q.Close()
	// Another process takes the last inodes.
	n := 0
	for ; ; n++ {
		f, err := os.Create(filepath.Join(mnt, fmt.Sprintf("f%d", n)))
		if err != nil {
			break
		}
		f.Close()
	}
	t.Logf("took the last %d inodes; %d KiB of blocks free", n, freeBytes(t, mnt)>>10)
	ctx := context.Background()
	body := make([]byte, 4<<10)
	var refused error
	var ids []uint64
	for q.Stats().LogBytes < 32*seg {
		id, err := q.Put(ctx, body)
		if err != nil {
			refused = err
			break
		}
		ids = append(ids, id)
	}
	for {
		m, ok, err := q.TryGet()
		must(t, err)
		if !ok {
			break
		}
		must(t, q.Ack(m.Receipt))
	}
	cerr := q.Compact()
	st := q.Stats()
	t.Logf("%d puts taken, then %v; all acked; Compact: %v; log %d KiB in %d segments (SegmentSize %d KiB), RollsPutOff %d, live %d items",
		len(ids), refused, cerr, st.LogBytes>>10, st.LogSegments, seg>>10, st.RollsPutOff, st.Items)
	if refused == nil {
		t.Errorf("with no inode free the tail grew to %d KiB (%d x SegmentSize) and puts were still taken", st.LogBytes>>10, st.LogBytes/seg)
	} else if !errors.Is(refused, ErrDiskFull) {
		t.Errorf("put refused with %v, want ErrDiskFull", refused)
	}
}
