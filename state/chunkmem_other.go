//go:build !unix

package state

func (ch *idChunk) setDense() { ch.dense = new([chunkIDs]entry) }

func (ch *idChunk) dropDense() { ch.dense = nil }

// processMapped is how many bytes of item entries are held outside the
// Go heap: none on this system.
func processMapped() int64 { return 0 }

type chunkMem struct{}

func denseMapped() bool { return false }

func (ch *idChunk) mappedBytes() int64 { return 0 }
