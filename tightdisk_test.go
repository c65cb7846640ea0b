package walq

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestDrainOnATightDisk: a queue filled until about 700 KiB of its disk is
// free (a real 8 MiB tmpfs) is drained with automatic compaction on and a
// producer still putting. The producer's puts are refused cleanly
// (ErrDiskFull, with ErrFull), the drain finishes, the queue never fails
// itself, and once the drained files are gone puts are taken again. On
// 997a6e0, with no producer at all, compaction copied the half-drained
// segments' bodies forward into the last of the disk and the log's ENOSPC
// failed the queue a few hundred acks in.
func TestDrainOnATightDisk(t *testing.T) {
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
		// Two priorities in turn: the drain takes every other item of
		// each segment first, leaving them half live, which is what
		// makes compaction copy bodies forward.
		id, err := q.Put(ctx, body, WithPriority(len(filled)%2))
		if err != nil {
			t.Fatalf("fill, %d items in: %v", len(filled), err)
		}
		filled = append(filled, id)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d items of 4 KiB, %d KiB free", len(filled), freeBytes(t, mnt)>>10)

	compacted := make(chan error, 64)
	opts.DiskWatermark = 512 << 10
	opts.onCompact = func(err error) {
		select { // a tight disk compacts often: never block the loop
		case compacted <- err:
		default:
		}
	}
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	stop := make(chan struct{})
	var producer sync.WaitGroup
	var refused, taken int
	var produceErr error
	producer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			// After the filled items: a producer of the first priority
			// taken in as compaction frees room would starve them.
			_, err := q.Put(ctx, body, WithPriority(2))
			switch {
			case err == nil:
				taken++
			case errors.Is(err, ErrDiskFull) && errors.Is(err, ErrFull):
				refused++
			default:
				produceErr = err
				return
			}
		}
	})
	left := make(map[uint64]bool, len(filled))
	for _, id := range filled {
		left[id] = true
	}
	for len(left) > 0 {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := q.Get(gctx)
		cancel()
		if err != nil {
			close(stop)
			producer.Wait()
			t.Fatalf("drain, %d of %d left: Get: %v (producer: %v)", len(left), len(filled), err, produceErr)
		}
		if err := q.Ack(m.Receipt); err != nil {
			close(stop)
			producer.Wait()
			t.Fatalf("drain, %d of %d left: Ack: %v (producer: %v)", len(left), len(filled), err, produceErr)
		}
		delete(left, m.ID)
	}
	close(stop)
	producer.Wait()
	if produceErr != nil {
		t.Fatalf("a put failed otherwise than ErrDiskFull: %v", produceErr)
	}
	st := q.Stats()
	t.Logf("puts refused %d, taken %d; compactions %d, failed %d, copies skipped %d; %d KiB free",
		refused, taken, st.Compactions, st.CompactionsFailed, st.CopiesSkipped, freeBytes(t, mnt)>>10)
	if refused == 0 || st.DiskRefused == 0 {
		t.Fatalf("no put refused (Stats.DiskRefused %d): the test never reached the watermark", st.DiskRefused)
	}
	if err := q.failure(); err != nil {
		t.Fatalf("the queue failed: %v", err)
	}
	// What the producer put during the drain is drained too; then the
	// log's drained files go, and the disk takes puts again.
	for {
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Compact(); err != nil {
		t.Fatalf("compaction after the drain: %v", err)
	}
	if _, err := q.Put(ctx, body); err != nil {
		t.Fatalf("a put after the drain and a compaction (%d KiB free): %v", freeBytes(t, mnt)>>10, err)
	}
}
