package walq

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"github.com/walq/walq/wal"
)

// reviewNoLinkFS is a filesystem without hard links (some FUSE and network
// filesystems, vfat): Link always fails.
type reviewNoLinkFS struct{ wal.FS }

func (reviewNoLinkFS) Link(string, string) error { return syscall.EPERM }

// TestReviewSpaceFailedCompactionsKeepTheirSnapshots (a hostile review's finding, kept as a regression test; what follows is what the build before its fix did): a compaction that
// fails after its snapshot was written (here: moving a dense segment to
// bodies/ fails, as it always does where hard links are refused) returns
// before removeSnapshotsBefore, so the snapshot it wrote stays beside the
// older ones. Each retry (automatic: every 1 s to 1 min) writes one more
// full snapshot of the index and removes none: the snapshots pile up
// without bound, each the size of the index, on the disk the queue was
// meant to keep in proportion to its live data. guarantees.md: "a failed
// ... compaction ... the snapshot it was writing is given up whole".
func TestReviewSpaceFailedCompactionsKeepTheirSnapshots(t *testing.T) {
	dir := t.TempDir()
	opts := withFS(Options{SegmentSize: 4096, DisableAutoCompact: true, Clock: NewManualClock(epoch)}, reviewNoLinkFS{wal.OSFS()})
	q, err := Open(dir, opts)
	must(t, err)
	defer q.Close()
	ctx := context.Background()
	// A held backlog of dense segments: compaction moves them to bodies/.
	for i := 0; len(q.log.Segments()) < 4; i++ {
		_, err := q.Put(ctx, bytes.Repeat([]byte{'x'}, 1000))
		must(t, err)
	}
	var errs []error
	for range 10 {
		_, err := q.Put(ctx, []byte("small")) // something new for the next snapshot
		must(t, err)
		errs = append(errs, q.Compact())
	}
	snaps := snapshots(t, dir)
	var total int64
	for _, s := range snaps {
		total += s.Size
	}
	st := q.Stats()
	t.Logf("10 compactions: first error %v; CompactionsFailed %d; %d snapshot files, %d bytes", errs[0], st.CompactionsFailed, len(snaps), total)
	if q.failure() != nil {
		t.Fatalf("queue failed: %v", q.failure())
	}
	if len(snaps) > 2 {
		t.Errorf("%d snapshots left by failed compactions (%d bytes): none is removed until a compaction succeeds", len(snaps), total)
	}
}
