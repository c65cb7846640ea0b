// Package state is walq's state machine: every queue of a directory, with
// its items, heaps, leases, dead letters and keys, changed only by applying
// log records (Apply, ApplyTo, ApplyAt) and read by the queue's calls. It
// does no I/O and reads no clock; applying the same records in the same
// order always gives the same state, and a snapshot of it
// (MarshalSnapshot, Freeze) decodes to that state again
// (UnmarshalSnapshot, ReadSnapshot).
//
// Memory. An item is an 80-byte entry with no pointer in it, kept by value
// in a chunk of 4096 consecutive IDs (its ID is its place in the chunk), so
// that a waiting item costs its entry and a heap slot whatever its body's
// size (docs/performance.md gives the measured figure): the body is in the
// log, named by a BodyRef (record, offset, length, CRC-32C). On Unix the chunks are mapped outside the Go heap; a
// chunk with few items left keeps only those, and an empty one is freed.
// The heaps hold IDs. What only some items have (a key, a deadline, a
// failed attempt, a lease) lives apart from the entries. Callers get
// copies (Item); nothing outside the package holds an entry.
//
// Snapshots. Freeze takes the state as it is, under the caller's lock, and
// encodes it a chunk at a time (Next) while records go on being applied:
// a record about to change an item of a chunk not yet encoded copies that
// chunk first, so a snapshot costs the memory of what changes while it is
// written, never a second copy of the index. ReadSnapshot decodes a
// snapshot as it is read, a piece at a time. Bodies of versions 1 to 4
// decode; version 4 is written.
//
// Records the state refuses (an unknown receipt, a lease of an item that
// is not ready, a queue that does not exist) are ErrInvalid, and change
// nothing: the live queue checks every call before it makes a record, so
// during replay a refusal means the log is corrupt.
package state
