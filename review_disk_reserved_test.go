package walq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReviewDiskReservedSegmentOverflows: guarantees.md: "each
// segment's space (Options.SegmentSize) is set aside on the disk when it
// starts ...: the records that go into it cannot meet a full disk,
// whoever else fills it", and "A full disk stops the producers, not the
// queue". The log sets aside [0, SegmentSize) and rolls only before a
// batch that finds the tail already at SegmentSize, so the last batch of
// every segment is written across SegmentSize, past what was set aside.
// Another process fills the disk to the last byte; consumers go on
// (leases, heartbeats, nacks) in a tail whose space was set aside
// (UnreservedSegments 0), no roll is even tried (RollsPutOff 0), and the
// batch that crosses SegmentSize meets the full disk: the queue fails.
// (Had the log rolled before that batch, the failure would at least be
// the documented one: a roll put off on a full disk.)
func TestReviewDiskReservedSegmentOverflows(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "queue")
	q, err := Open(dir, Options{SegmentSize: 64 << 10, DiskWatermark: 1 << 20, Visibility: time.Hour, MaxAttempts: 1000,
		Backoff: func(int) time.Duration { return 0 }})
	must(t, err)
	defer q.Close()
	ctx := context.Background()
	for range 100 {
		if _, err := q.Put(ctx, []byte("work")); err != nil {
			t.Fatal(err)
		}
	}
	_, err = q.log.SyncRoll()
	must(t, err)
	if st := q.Stats(); st.UnreservedSegments != 0 {
		t.Fatalf("UnreservedSegments %d before the disk fills", st.UnreservedSegments)
	}
	for _, sg := range q.log.Segments() {
		a, sz := reviewAllocated(t, sg.Path)
		t.Logf("segment %s: %d bytes, %d allocated", sg.Name, sz, a)
	}
	// Another process takes every free byte.
	f, err := os.Create(filepath.Join(mnt, "filler"))
	must(t, err)
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	t.Logf("disk full: %d bytes free; RESERVE holds 1 MiB", freeBytes(t, mnt))
	// Consumers: lease and heartbeat, then ack.
	var calls int
	var ferr error
	for ferr == nil && calls < 20000 {
		m, ok, err := q.TryGet()
		if err != nil {
			ferr = err
			break
		}
		if !ok {
			break
		}
		calls++
		for range 10 {
			if ferr = q.Extend(m.Receipt, time.Hour); ferr != nil {
				break
			}
			calls++
		}
		if ferr == nil {
			ferr = q.Nack(m.Receipt, errors.New("again"))
			calls++
		}
	}
	for _, sg := range q.log.Segments() {
		a, sz := reviewAllocated(t, sg.Path)
		t.Logf("segment %s: %d bytes, %d allocated", sg.Name, sz, a)
	}
	st := q.Stats()
	t.Logf("%d leases, extends and nacks, then %v; log %d KiB, RollsPutOff %d, UnreservedSegments %d",
		calls, ferr, st.LogBytes>>10, st.RollsPutOff, st.UnreservedSegments)
	// The documented ways a write of the log may meet a full disk are a
	// segment started without its space set aside, and a roll put off.
	if errors.Is(ferr, ErrFailed) && st.RollsPutOff == 0 && st.UnreservedSegments == 0 {
		t.Errorf("the queue failed after %d calls that end or extend leases, writing to a segment whose space was set aside (RollsPutOff %d, UnreservedSegments %d): %v",
			calls, st.RollsPutOff, st.UnreservedSegments, ferr)
	}
}
