//go:build !linux

package wal

import (
	"os"
)

// DropCache does nothing outside Linux: walq uses posix_fadvise only where
// it is known to drop the pages a failed fsync left marked clean.
func (osFS) DropCache(File) error { return nil }

// Preallocate is not done outside Linux: the file is written without it.
func (osFS) Preallocate(File, int64) error { return ErrNoPreallocate }

// pastEnd is false outside Linux, where nothing is preallocated.
func pastEnd(os.FileInfo) bool { return false }
