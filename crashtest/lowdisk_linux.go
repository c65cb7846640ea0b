package crashtest

import (
	"fmt"
	"os"
	"syscall"
)

// mountLowDisk mounts a tmpfs of size bytes on dir (created when missing),
// so that the queue under test lives on a disk that fills up. It needs
// root.
func mountLowDisk(dir string, size int64) (unmount func() error, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("crashtest: a low disk (Config.LowDisk) needs root to mount a tmpfs")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return nil, fmt.Errorf("crashtest: mount a tmpfs of %d bytes on %s: %w", size, dir, err)
	}
	return func() error {
		if err := syscall.Unmount(dir, 0); err != nil {
			return syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		return nil
	}, nil
}
