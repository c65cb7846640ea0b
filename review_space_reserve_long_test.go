//go:build long

package walq

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReviewSpaceReserveTooSmallForLeases (a hostile review's finding, kept as a regression test; what follows is what the build before its fix did): guarantees.md: "The directory
// keeps a 1 MiB RESERVE file that recovery releases first, so that a
// reopen on a still-full disk can write what it must (a cut tail's copy,
// the endings of open leases)." The endings take ~60 bytes a lease, and
// nothing bounds the leases open at a crash (MaxInFlight is 0 by
// default): with 30,000 open the endings need about 1.8 MB, the 1 MiB
// reserve does not hold them, and the reopen on the full disk fails with
// ENOSPC, as does every later one until an operator frees space.
func TestReviewSpaceReserveTooSmallForLeases(t *testing.T) {
	mnt := mountTmpfs(t, "48m")
	dir := filepath.Join(mnt, "queue")
	opts := Options{Visibility: time.Hour, DisableAutoCompact: true, Sync: SyncNever,
		noCloseSnapshot: true} // as a kill -9 leaves it: no snapshot at close
	q, err := Open(dir, opts)
	must(t, err)
	ctx := context.Background()
	items := make([]Item, 1000)
	const n = 30000
	for range n / len(items) {
		_, err := q.PutBatch(ctx, items)
		must(t, err)
	}
	for range n {
		if _, ok, err := q.TryGet(); err != nil || !ok {
			t.Fatalf("TryGet: %v %v", ok, err)
		}
	}
	must(t, q.Close())
	// Another process fills the disk to the last byte.
	for i := 0; freeBytes(t, mnt) > 0; i++ {
		f, err := os.CreateTemp(mnt, "filler-")
		if err != nil {
			break
		}
		f.Write(make([]byte, min(freeBytes(t, mnt), 1<<20)))
		f.Close()
	}
	opts.Sync = SyncAlways
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("reopen on the full disk with %d leases open: %v", n, err)
	}
	defer q.Close()
	if st := q.Stats(); st.Recovery.LeasesExpired != n {
		t.Errorf("leases expired at open: %d, want %d", st.Recovery.LeasesExpired, n)
	}
}
