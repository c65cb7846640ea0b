package walq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

func TestDiskFreeGaugeDuringADrain(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "queue")
	wm := int64(1 << 20)
	q, err := Open(dir, Options{DisableAutoCompact: true, DiskWatermark: wm, SegmentSize: 256 << 10,
		MaxAttempts: 1000, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	body := make([]byte, 64<<10)
	for {
		_, err := q.Put(ctx, body)
		if errors.Is(err, ErrDiskFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("filled: %d items, %d KiB free, Stats.DiskFree %d KiB", q.Stats().Items, freeBytes(t, mnt)>>10, q.Stats().DiskFree>>10)
	// Drain all but one item, and compact: the disk is given back.
	for q.Stats().Items > 1 {
		if err := q.Ack(mustTryGet(t, q).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	// The last item fails 300 times, with a long error each time: 2.4 MB
	// of log, which a compaction gives back too.
	cause := errors.New(strings.Repeat("x", 8<<10))
	for range 300 {
		if err := q.Nack(mustTryGet(t, q).Receipt, cause); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	real := int64(freeBytes(t, mnt))
	t.Logf("after the drain: %d KiB free on the disk, Stats.DiskFree %d KiB", real>>10, st.DiskFree>>10)
	if st.DiskFree < 0 || real-st.DiskFree > 4<<20 {
		t.Errorf("Stats.DiskFree = %d bytes; the disk has %d free (over 2 MiB appended since the last reading)", st.DiskFree, real)
	}
}

func TestRetryWaitAfterASuccess(t *testing.T) {
	ffs := wal.NewFaultFS(noSyncOS(), 0)
	done := make(chan error, 16)
	q, clock, _ := testQueue(t, withFS(Options{CompactMinBytes: 32 << 10, CompactRatio: 2,
		onCompact: func(err error) { done <- err }}, ffs))
	ctx := context.Background()
	body := make([]byte, 100)
	cycle := func() {
		t.Helper()
		if _, err := q.Put(ctx, body); err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(mustTryGet(t, q).Receipt); err != nil {
			t.Fatal(err)
		}
	}
	failOne := func() {
		t.Helper()
		ffs.FailNextWith("open", syscall.ENOSPC)
		for i := 0; ; i++ {
			if i == 20000 {
				t.Fatal("no automatic compaction in 20,000 cycles")
			}
			cycle()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the compaction succeeded; want it failed")
				}
				return
			default:
			}
		}
	}
	failOne()
	if err := q.Compact(); err != nil {
		t.Fatalf("Compact after the failure: %v", err)
	}
	clock.Advance(compactRetryMin) // the retry finds the log within bounds
	failOne()
	clock.Advance(compactRetryMin)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the retry: %v", err)
		}
	case <-time.After(time.Second):
		t.Errorf("no retry 1 s after the first failure since a successful compaction")
		clock.Advance(compactRetryMin)
		select {
		case err := <-done:
			t.Logf("the retry came 2 s after the failure: %v", err)
		case <-time.After(time.Second):
			t.Fatalf("no retry 2 s after the failure either")
		}
	}
}

func TestWatermarkOverTheDisk(t *testing.T) {
	for _, wm := range []int64{64 << 20, math.MaxInt64} {
		t.Run(fmt.Sprint(wm), func(t *testing.T) {
			mnt := mountTmpfs(t, "16m")
			dir := filepath.Join(mnt, "queue")
			opts := Options{DiskWatermark: -1, MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 }}
			q, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 10 {
				if _, err := q.Put(ctx, []byte("x"), WithKey(fmt.Sprint("held-", i))); err != nil {
					t.Fatal(err)
				}
			}
			q.Close()
			opts.DiskWatermark = wm
			q, err = Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			before := q.Stats()
			for i := range 5 {
				_, err := q.Put(ctx, []byte("refused"), WithKey("new-key"))
				if !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrFull) {
					t.Fatalf("put %d = %v; want ErrDiskFull", i, err)
				}
			}
			if _, err := q.PutBatch(ctx, []Item{{Body: []byte("a")}, {Key: "held-1"}}); !errors.Is(err, ErrDiskFull) {
				t.Fatalf("PutBatch = %v", err)
			}
			// A batch of held keys only stores nothing: answered, not refused.
			if ids, err := q.PutBatch(ctx, []Item{{Key: "held-2"}}); ids == nil || !errors.Is(err, ErrDuplicate) {
				t.Fatalf("PutBatch of a held key = %v, %v; want its holder, ErrDuplicate", ids, err)
			}
			after := q.Stats()
			if after.Put != before.Put || after.Items != before.Items || after.LastLSN != before.LastLSN || after.DiskRefused != 6 {
				t.Fatalf("refused puts changed the state: before %+v after %+v", before, after)
			}
			m1, m2, m3 := mustTryGet(t, q), mustTryGet(t, q), mustTryGet(t, q)
			must(t, q.Extend(m1.Receipt, time.Minute))
			must(t, q.Ack(m1.Receipt))
			must(t, q.Nack(m2.Receipt, errors.New("again")))
			must(t, q.DeadLetter(m3.Receipt, errors.New("dead")))
			must(t, q.Redrive(m3.ID))
			other, err := q.OpenQueue("other", QueueOptions{})
			must(t, err)
			if _, err := other.Put(ctx, []byte("x")); !errors.Is(err, ErrDiskFull) {
				t.Fatalf("put to a new queue = %v", err)
			}
			must(t, other.Delete(false))
			must(t, q.Compact())
			if err := q.failure(); err != nil {
				t.Fatal(err)
			}
			q.Close()
			opts.DiskWatermark = -1
			q, err = Open(dir, opts)
			must(t, err)
			defer q.Close()
			id, err := q.Put(ctx, []byte("now"), WithKey("new-key"))
			if err != nil || id != 11 {
				t.Fatalf("put after = %d, %v; want ID 11 (no ID taken by the refused puts)", id, err)
			}
		})
	}
}
