// Package wal is walq's write-ahead log: segment files of MAC'd frames, one
// per commit batch, group commit, the recovery rule, a read-only segment
// reader and the framing of snapshot files. It imports nothing from walq.
//
// Layers, from the bottom:
//
//   - Format 2 (format.go): each segment file starts with a header holding
//     the directory's ID and a random salt; then frames, each written by
//     one write, each with a header authenticated by an AES CBC-MAC keyed with the
//     salt (so no body can forge one), the LSN it must carry, and a
//     watermark: the last LSN fsynced when it was written. Record headers
//     (type, queue, body length, body CRC) follow, then the bodies.
//   - Open reads the log once: segments wholly before the LSN replay starts
//     at (covered by the caller's snapshot) are skipped, the others are
//     fsynced, dropped from the page cache (a failed fsync can leave pages
//     there that the disk lost), verified and replayed in one pass. Damage
//     at the end of the newest segment is cut only when no frame states it
//     was fsynced (the rule and its table are at the top of repair.go);
//     everything else is a *CorruptionError, returned before anything on
//     disk changes.
//   - Append numbers and queues records without I/O; a committer goroutine
//     writes each accumulated batch as one frame (a few for a very large
//     batch) with one write and one fsync and then releases the batch's
//     Commit (group commit). A segment is fsynced before the next one is
//     created, and a new segment's header and directory entry are durable
//     before any frame goes in. The next segment is made before the last
//     is sealed, so one that cannot be made (a full disk) leaves the log
//     writing where it was; each segment's space is preallocated where the
//     filesystem can (Preallocator).
//   - TruncateFront removes whole segments; nothing is ever rewritten.
//   - Bodies stay on disk if the owner wants: OnWritten says where each
//     record's body was written, and Log.ReadAt (or a BodyReader without a
//     Log, bodies.go) reads one back with one positioned read through a
//     bounded set of open files.
//   - Scan, ListSegments, ReadSnapshot and ListSnapshots only read, so
//     walq-inspect can use them while a queue runs.
//   - Format 1 (format1.go, envelope.go) is read, never written: Open of a
//     queue directory of format 1 carries it forward.
//
// A Log fails for good on the first write or fsync error (ErrFailed;
// Failed's channel is closed then): a failed fsync cannot be retried
// safely, and the queue must be reopened so that recovery starts again from
// what is on disk. A TruncateFront whose file removal failed is the
// exception: removing whole files oldest first leaves a valid log at every
// step, so it returns a plain error and the Log goes on.
package wal
