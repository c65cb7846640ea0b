//go:build unix && !linux

package state

import "golang.org/x/sys/unix"

const mapFlags = unix.MAP_ANON | unix.MAP_PRIVATE
