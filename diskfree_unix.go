//go:build unix

package walq

import "golang.org/x/sys/unix"

// diskFree returns the bytes free to an unprivileged writer on the file
// system that holds dir; ok is false when it cannot tell.
func diskFree(dir string) (free int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
