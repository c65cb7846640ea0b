package walq

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// TestFailedSnapshotWriteEndsItsFreeze: a snapshot whose write fails (a
// full disk) gives up its Freeze, and the next compaction writes one. On
// 997a6e0 the Freeze stayed open: every later compaction failed with
// "snapshot: another is being written" until the process restarted, and
// the state went on copying chunks for a snapshot nobody wrote.
func TestFailedSnapshotWriteEndsItsFreeze(t *testing.T) {
	ffs := wal.NewFaultFS(noSyncOS(), 0)
	q, _, _ := testQueue(t, withFS(Options{DisableAutoCompact: true, Sync: SyncNever}, ffs))
	ctx := context.Background()
	// Enough state that the snapshot writes a 1 MiB piece before its
	// commit: keys of 64 bytes make each item's entry about 80.
	items := make([]Item, 1000)
	for b := range 20 {
		for i := range items {
			items[i] = Item{Body: []byte("x"), Key: fmt.Sprintf("%064d", b*len(items)+i)}
		}
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	ffs.FailNextWith("file.write", syscall.ENOSPC)
	if err := q.Compact(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Compact with the snapshot's write failing = %v, want ENOSPC", err)
	}
	if st := q.Stats(); st.CompactionsFailed != 1 || st.SnapshotLSN != 0 {
		t.Fatalf("after the failed write: CompactionsFailed %d, SnapshotLSN %d; want 1 and 0", st.CompactionsFailed, st.SnapshotLSN)
	}
	mustPut(t, q, "after")
	if err := q.Compact(); err != nil {
		t.Fatalf("the compaction after a failed snapshot write: %v", err)
	}
	st := q.Stats()
	if st.SnapshotLSN != st.LastLSN || st.Compactions != 1 {
		t.Fatalf("after the second compaction: SnapshotLSN %d of %d, Compactions %d", st.SnapshotLSN, st.LastLSN, st.Compactions)
	}
}

// TestFailedCompactionTriesAgainOnATimer: after an automatic compaction
// failed, the next is tried on a timer of the queue's clock, not once the
// log has doubled: on a tight disk a log never doubles. On 997a6e0 no
// compaction came after the failure until the log reached twice its size.
func TestFailedCompactionTriesAgainOnATimer(t *testing.T) {
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
	// The first automatic compaction cannot create its snapshot file (the
	// log rolls no segment at this size, so the next open is the
	// snapshot's).
	ffs.FailNextWith("open", syscall.ENOSPC)
	var first error
	for i := 0; first == nil; i++ {
		if i == 5000 {
			t.Fatal("no automatic compaction in 5,000 cycles")
		}
		cycle()
		select {
		case first = <-done:
			if first == nil {
				t.Fatal("the first compaction succeeded; want it failed")
			}
		default:
		}
	}
	failedAt := q.Stats().LogBytes
	// The loop armed its retry timer before it reported the failure;
	// appends meanwhile start nothing.
	for range 10 {
		cycle()
	}
	select {
	case err := <-done:
		t.Fatalf("a compaction (%v) before the retry's time", err)
	default:
	}
	clock.Advance(compactRetryMin)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the retried compaction: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction after the retry's time")
	}
	st := q.Stats()
	if st.Compactions != 1 || st.CompactionsFailed != 1 {
		t.Fatalf("Compactions %d, CompactionsFailed %d; want 1 and 1", st.Compactions, st.CompactionsFailed)
	}
	if st.LogBytes >= 2*failedAt {
		t.Fatalf("the log grew from %d to %d before the retry", failedAt, st.LogBytes)
	}
}

// TestDeletedQueueCopiesNoHeldBacklog: deleting a queue costs a compaction
// what the deleted queue held, not a copy of every other queue's held
// backlog. On 997a6e0 a compaction after the delete of a queue of one item
// copied forward every live body of the directory (here 1 MiB, in a
// service 16 MiB per one-item queue deleted, every time).
func TestDeletedQueueCopiesNoHeldBacklog(t *testing.T) {
	q, _, _ := testQueue(t, Options{SegmentSize: 64 << 10, DisableAutoCompact: true, Sync: SyncNever, fs: noSyncOS()})
	ctx := context.Background()
	items := make([]Item, 64)
	for i := range items {
		items[i].Body = make([]byte, 1<<10)
	}
	for range 16 { // 1 MiB held in the default queue, over 16 segments
		if _, err := q.PutBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	before := q.Stats().Bodies.RelocatedBytes
	if before != 0 {
		t.Fatalf("the first compaction of a dense backlog copied %d bytes", before)
	}
	for round := range 3 {
		other, err := q.OpenQueue(fmt.Sprintf("brief-%d", round), QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Put(ctx, []byte("one item")); err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(false); err != nil {
			t.Fatal(err)
		}
		if err := q.Compact(); err != nil {
			t.Fatal(err)
		}
		if got := q.Stats().Bodies.RelocatedBytes - before; got > 4<<10 {
			t.Fatalf("round %d: the compaction after deleting a queue of one item copied %d bytes of the held backlog", round, got)
		}
	}
}
