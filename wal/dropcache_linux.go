package wal

import (
	"fmt"

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
