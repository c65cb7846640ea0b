package walq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// reserveOpensFS counts the openings of the reserve file.
type reserveOpensFS struct {
	wal.FS
	opens atomic.Int64
}

func (r *reserveOpensFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	if filepath.Base(name) == layout.ReserveName {
		r.opens.Add(1)
	}
	return r.FS.OpenFile(name, flag, perm)
}

// TestReserveShortAsksOnce: on a disk without room for the reserve to
// grow, the puts that find it short ask the compaction loop to grow it
// once, not each: a refill that stops short waits for a compaction. With
// every refused put asking, the loop opened, read and closed the reserve
// file once per put.
func TestReserveShortAsksOnce(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "queue")
	rfs := &reserveOpensFS{FS: wal.OSFS()}
	refills := make(chan struct{}, 1)
	q, err := Open(dir, Options{DiskWatermark: 2 << 20, DisableAutoCompact: true, Visibility: time.Hour,
		fs: rfs, onReserve: func() {
			select {
			case refills <- struct{}{}:
			default:
			}
		}})
	must(t, err)
	defer q.Close()
	<-refills // Open asks the loop for the rest of the reserve
	// The reserve was freed for a snapshot that then failed, and another
	// process took the disk down to less than a snapshot leaves the acks:
	// the reserve cannot grow back.
	q.mu.Lock()
	must(t, q.releaseReserveLocked())
	q.mu.Unlock()
	f, err := os.Create(filepath.Join(mnt, "filler"))
	must(t, err)
	for freeBytes(t, mnt) > 128<<10 {
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break // the disk's own count of what is free: full all the same
		}
	}
	must(t, f.Close())
	opensBefore := rfs.opens.Load()
	ctx := context.Background()
	refused := 0
	for range 200 {
		_, err := q.Put(ctx, nil)
		if !errors.Is(err, ErrDiskFull) {
			t.Fatalf("a put on a full disk: %v, want ErrDiskFull", err)
		}
		refused++
		if refused == 1 {
			<-refills // the refill the first refusal asked for
		}
	}
	q.mu.Lock()
	stuck, short := q.disk.reserveStuck, q.reserveTargetLocked()-q.disk.reserve
	q.mu.Unlock()
	if !stuck || short <= 0 {
		t.Fatalf("the reserve is not short (stuck %v, short by %d)", stuck, short)
	}
	select {
	case <-refills:
		t.Errorf("a second refill ran for %d refused puts", refused)
	default:
	}
	if n := rfs.opens.Load() - opensBefore; n != 1 {
		t.Errorf("the reserve file was opened %d times for %d refused puts; want once", n, refused)
	}
}
