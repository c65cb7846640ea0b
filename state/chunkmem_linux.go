//go:build linux

package state

import "golang.org/x/sys/unix"

// mapFlags maps a chunk with its pages in place: a snapshot load fills
// chunks from start to end, and faulting every page in one by one took a
// quarter of the load.
const mapFlags = unix.MAP_ANON | unix.MAP_PRIVATE | unix.MAP_POPULATE
