//go:build unix

package walq

import "golang.org/x/sys/unix"

// minInodes is the fewest free inodes (files the disk can still create)
// below which the disk counts as full: the queue creates files to free
// space (a segment, a snapshot and its temp file), and with none to spare
// its rolls are put off and the log can only grow.
const minInodes = 16

// diskFree returns the bytes free to an unprivileged writer on the file
// system that holds dir, or 0 when it has fewer than minInodes inodes free
// (a filesystem that reports no inode count has no such limit); ok is
// false when it cannot tell.
func diskFree(dir string) (free int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	if st.Files > 0 && st.Ffree < minInodes {
		return 0, true
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
