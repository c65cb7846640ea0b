//go:build unix

package state

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The dense chunks of the index live outside the Go heap, in memory mapped
// for them: they hold no pointer, so the collector has nothing to find in
// them, and, off its heap, they do not count toward the heap size that
// paces it. On the heap, 10 million items (800 MB of chunks) made the
// collector let the heap grow to twice that before each cycle; off it,
// the heap's pace is set by what the queue allocates as it runs.

var mappedBytes atomic.Int64

const denseSize = int(unsafe.Sizeof([chunkIDs]entry{}))

// setDense gives ch a zeroed dense chunk. Should ch be dropped with it
// (a state no longer used), the collector's cleanup gives it back.
func (ch *idChunk) setDense() {
	b, err := unix.Mmap(-1, 0, denseSize, unix.PROT_READ|unix.PROT_WRITE, mapFlags)
	if err != nil {
		ch.dense = new([chunkIDs]entry) // out of mappings: the heap will do
		return
	}
	mappedBytes.Add(int64(denseSize))
	ch.dense = (*[chunkIDs]entry)(unsafe.Pointer(unsafe.SliceData(b)))
	ch.mapped = true
	ch.cleanup = runtime.AddCleanup(ch, unmap, b)
}

// dropDense gives ch's dense chunk back; nothing may use it after.
func (ch *idChunk) dropDense() {
	if ch.mapped {
		ch.cleanup.Stop()
		unmap(unsafe.Slice((*byte)(unsafe.Pointer(ch.dense)), denseSize))
	}
	ch.dense, ch.mapped = nil, false
}

func unmap(b []byte) {
	if err := unix.Munmap(b); err == nil {
		mappedBytes.Add(-int64(denseSize))
	}
}

// processMapped is how many bytes of item entries are held outside the
// Go heap, by every state of the process.
func processMapped() int64 { return mappedBytes.Load() }

// chunkMem is what a chunk keeps of its mapping.
type chunkMem struct {
	mapped  bool
	cleanup runtime.Cleanup
}

func (ch *idChunk) mappedBytes() int64 {
	if ch.mapped {
		return int64(denseSize)
	}
	return 0
}

// denseMapped reports whether dense chunks are mapped on this system.
func denseMapped() bool { return true }
