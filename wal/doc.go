// Package wal is walq's write-ahead log: the record envelope with its CRC,
// group commit, torn-tail repair, a read-only segment reader and the framing
// of snapshot files. It is the only package in walq that imports
// github.com/tidwall/wal, which provides the segment files, their indexes and
// TruncateFront, and it imports nothing from walq.
//
// Layers, from the bottom:
//
//   - tidwall/wal writes each entry as uvarint(length) followed by the
//     entry, into segment files named after the index of their first entry
//     (20 decimal digits). It has no checksum, refuses a torn last entry,
//     never fsyncs a directory and is not safe for concurrent reads, so a Log
//     lets one goroutine alone touch it and fsyncs directories itself.
//   - Every entry is one record in the envelope drawn in envelope.go:
//     version, type, LSN, CRC-32C, msgpack body. The LSN equals the
//     tidwall index, so replay can check that LSNs are consecutive.
//   - Open reads the log once: segments wholly before the LSN replay starts
//     at (covered by the caller's snapshot) are skipped, the others are
//     fsynced, dropped from the page cache (a failed fsync can leave pages
//     there that the disk lost), verified and replayed in one pass. It cuts
//     only a torn tail found at the end of that pass (the policy is at the
//     top of repair.go); everything else is a *CorruptionError, returned
//     before anything on disk changes.
//   - Append numbers and queues records without I/O; a committer goroutine
//     writes each accumulated batch with one WriteBatch and one fsync and
//     then releases the batch's Commit (group commit).
//   - Scan, ListSegments, ReadSnapshot and ListSnapshots only read, so
//     walq-inspect can use them while a queue runs.
//
// A Log fails for good on the first write, fsync or truncation error
// (ErrFailed; Failed's channel is closed then): a failed fsync cannot be
// retried safely, and the queue must be reopened so that recovery starts
// again from what is on disk. The one exception is a TruncateFront that
// failed before it changed anything, which returns a plain error.
package wal
