package wal

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// DropCache asks the kernel to drop the cached pages of f, so that the next
// read comes from the disk. POSIX_FADV_DONTNEED drops clean pages only:
// fsync f first to include those written but not yet written back.
func (osFS) DropCache(f File) error {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("drop cache of %s: not an os file", f.Name())
	}
	if err := unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop cache of %s: %w", f.Name(), err)
	}
	return nil
}

// Preallocate sets the first n bytes of f aside on the disk without
// changing its size (fallocate with FALLOC_FL_KEEP_SIZE): appends up to n
// bytes then never fail with ENOSPC. Filesystems without fallocate give
// ErrNoPreallocate.
func (osFS) Preallocate(f File, n int64) error {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("preallocate %s: not an os file: %w", f.Name(), ErrNoPreallocate)
	}
	err := unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("preallocate %s: %w", f.Name(), ErrNoPreallocate)
	}
	if err != nil {
		return fmt.Errorf("preallocate %d bytes for %s: %w", n, f.Name(), err)
	}
	return nil
}

// pastEnd reports whether the file info describes holds disk blocks past
// its size (space set aside and not written), so that giving it back is
// needed: a truncation to the same size would otherwise change the file's
// times, and a refused open must change nothing.
func pastEnd(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return !ok || st.Blocks*512 > (info.Size()+4095)&^4095
}
