// Package walq is an embedded, durable work queue: open a directory and get
// what a broker's queue gives — leases with a visibility timeout,
// heartbeats, acknowledgement, bounded retries with backoff, a dead-letter
// list, delayed and expiring items, idempotency keys — without running a
// broker.
//
// Every operation is appended to a segmented write-ahead log before it is
// applied in memory, and a call returns only when its record is durable
// under the sync policy (SyncAlways by default: after an fsync shared by
// all concurrent calls). Open replays the newest snapshot and the log after
// it; a lease that was open at a crash ends as expired, its attempt
// counted. Item bodies stay in the log on disk, and memory holds where each
// lies. Compaction writes a snapshot of the state (the index, without the
// bodies) and removes the log segments it covers, keeping or copying
// forward the live bodies in them, so disk use follows the live data.
//
// # Delivery
//
// Delivery is at least once. Get leases the next ready item (smallest
// priority, then the earliest to become ready) for Options.Visibility. The
// lease ends with Ack (done), Nack (failed: back after Options.Backoff, or
// dead-lettered when out of attempts), DeadLetter (permanent failure), or by
// running out. Extend is the heartbeat that keeps a slow but live handler's
// lease. Every call with a receipt that no longer names the item's current
// lease returns ErrLeaseLost: a worker that lost its lease can never ack
// work that was handed to someone else. A Receipt also carries the identity
// of its queue directory: a receipt of another directory is refused with
// ErrInvalid. Its text form (String, MarshalText, ParseReceipt) lets a
// receipt travel to another process and back.
//
// Attempts are counted when a lease starts, so an item that crashes the
// whole process is still dead-lettered after Options.MaxAttempts.
//
// # Named queues
//
// A directory holds its default queue (the Queue Open returns) and any
// number of named queues (OpenQueue), which share its log, its sequencer,
// its group commit, its timer and its compaction, so many kinds of work
// cost one fsync stream. A named queue is a Queue handle with the same
// calls, and its own items, keys, dead letters, counters and settings
// (QueueOptions, recorded in the log when they change). A queue can be
// paused (until a time or until resumed; it takes puts and delivers
// nothing) and deleted with everything in it; its name can then make a
// new, empty queue, which no handle, receipt or record of the old one can
// reach (ErrQueueDeleted). Item IDs are unique in the directory, so
// RedriveTo moves a dead letter to another queue under its ID. WorkQueues
// serves several queues from one pool of workers, with workers reserved
// per queue and the shared ones given by weight or in strict order.
//
// # Work and other engines
//
// Queue.Work runs handlers with a pool of workers: it extends each lease
// while its handler runs, acks, nacks or dead-letters by the result, and
// turns panics and timeouts into nacks. Work (the function) does the same
// on any Engine, the small interface of the calls a handler loop needs, so
// the same handlers can run on another queue engine; package walqtest holds
// the behaviours such an engine must show, and checks them.
//
// # Time
//
// The queue has one time: the wall clock read at Open (never behind the
// newest time in the log) plus the monotonic time since. Leases, delays,
// deadlines, key windows, timers and Work's heartbeats all run on it, so a
// wall clock stepped back or forward changes none of them. Times at the API
// are wall-clock times translated by the offset between the two clocks:
// WithDeadline(t) means the span from now until t, and Message.LeaseEnd
// and EnqueuedAt come back in wall time. A ManualClock lets a test let time
// pass (Advance) and step the wall clock alone (StepWall).
//
// # Failure
//
// The first failed write or fsync of the log puts the queue in its failed
// state for good: every call returns ErrFailed, blocked Gets and Work
// return it at once, and the background loops stop. Close it and Open it
// again; on Linux recovery drops the log's pages from the page cache
// before it reads them, so it rebuilds from what the disk holds. A failed
// snapshot fails only its compaction (Stats.CompactionsFailed), which is
// tried again on a timer; the bodies a compaction copies go through the
// log, whose failure is the queue's. On a disk with less free space than
// Options.DiskWatermark, puts return ErrDiskFull and store nothing, while
// acks, nacks and compaction keep their room.
//
// # Files
//
// A queue directory holds WALQ-FORMAT (the format version and the
// directory's random ID, which every segment, snapshot and receipt
// repeats), LOCK (an flock: one queue per directory), RESERVE (space that
// recovery frees to write on a full disk), snapshot-<LSN>.snap files, the
// log/ directory of segments, and bodies/, which holds sealed segments
// that left the log for the live bodies in them; a directory of format 1
// (no marker) is carried forward to format 2 at Open. It ignores
// lost+found and dotfiles, warns about other files it does not own, and
// refuses a file of a newer walq (ErrNewerFormat) or a non-empty directory
// that is not a queue (ErrNotQueue). See the wal package for the format
// (wal/format.go draws it, wal/repair.go states what recovery cuts and what
// it refuses) and cmd/walq-inspect to look inside.
package walq
