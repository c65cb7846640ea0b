package walq

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// reviewMountExt4 mounts a fresh ext4 filesystem of size bytes (a loop
// device over an image file) and unmounts it at the end of the test; it
// skips the test when it cannot.
func reviewMountExt4(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	tmp := t.TempDir()
	img := filepath.Join(tmp, "ext4.img")
	f, err := os.Create(img)
	must(t, err)
	must(t, f.Truncate(size))
	f.Close()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := filepath.Join(tmp, "mnt")
	must(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount -o loop: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

// TestReviewDiskFailedPreallocationKept: on ext4 a fallocate that fails
// with ENOSPC keeps the blocks it did allocate. reserve treats the
// failure as "nothing set aside" (reserved false, UnreservedSegments),
// so release, which gives back only what a reserved tail holds, never
// truncates it: a segment started on a disk with less free than
// SegmentSize takes every free block of the disk past its end (the
// root-reserved ones too, for a root process), and keeps them when it is
// sealed or closed, until the segment is removed. guarantees.md: "Where
// that cannot be done (... less free than a segment) the segment is
// started all the same and counted"; "the part not written is given back
// when it is sealed or closed".
func TestReviewDiskFailedPreallocationKept(t *testing.T) {
	mnt := reviewMountExt4(t, 48<<20)
	dir := filepath.Join(mnt, "queue")
	q, err := Open(dir, Options{DiskWatermark: -1, DisableAutoCompact: true}) // SegmentSize 4 MiB
	must(t, err)
	ctx := context.Background()
	if _, err := q.Put(ctx, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if q.Stats().UnreservedSegments != 0 {
		t.Skip("this filesystem cannot preallocate")
	}
	// Another process leaves 1 MiB free.
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	must(t, err)
	must(t, unix.Fallocate(int(filler.Fd()), 0, 0, int64(freeBytes(t, mnt)-1<<20)))
	filler.Close()
	before := freeBytes(t, mnt)
	// A roll (a compaction's, Close's) starts a segment it cannot set a
	// segment's space aside for.
	if _, err := q.log.SyncRoll(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	must(t, q.Close())
	segs := q.log.Segments()
	tail := segs[len(segs)-1]
	alloc, size := reviewAllocated(t, tail.Path)
	t.Logf("free %d KiB before the roll, %d KiB after Close; UnreservedSegments %d; tail %s: %d bytes long, %d KiB allocated",
		before>>10, freeBytes(t, mnt)>>10, st.UnreservedSegments, tail.Name, size, alloc>>10)
	if alloc > size+64<<10 {
		t.Errorf("the closed tail %s (%d bytes, counted unreserved) keeps %d KiB allocated past its end: the failed preallocation's blocks are never given back",
			tail.Name, size, (alloc-size)>>10)
	}
}
