// Package crashtest is walq's kill -9 crash harness. It proves the claim of
// the queue: nothing reported done is lost and nothing acked comes back,
// whatever happens to the process.
//
// A run is a number of cycles. In each, a child process (the test binary or
// cmd/walq-crashtest, started again with its configuration in the
// environment) opens the queue in a real directory with 8 KiB segments and
// runs a workload through the public API: producers put items with delays,
// deadlines, priorities and keys, alone and in batches; consumers get,
// extend, ack, nack and dead-letter, or abandon the lease to expire; a
// sweeper redrives and purges dead letters; and Compact runs every few
// milliseconds, so that many kills land inside a compaction. The child
// writes one line to a report file before each call and one after it
// returned (report.go). The parent kills it with SIGKILL at a random moment
// (seeded, printed), optionally simulates a power loss (powerloss.go), and
// most cycles then recovers the directory with walq.Open and checks:
//
//   - the directory verifies as walq-inspect verify would: every snapshot
//     decodes, every frame of the log verifies and its LSNs follow on,
//     the snapshot plus the log replays, and the state adds up (verify.go);
//   - the recovered queue reports what the replayed directory holds;
//   - the three-state ledger (ledger.go): every put reported done is stored
//     or was acked, purged or passed its deadline; nothing acked and
//     reported comes back; no unknown item appears; a batch is all or
//     none; deliveries never go backwards; attempts only reset by a
//     redrive; a dead-lettered item stays dead until redriven; and the
//     Put/Ack/Discard/Purge counters account for every item.
//
// With Config.StepClock the child's walq.Clock is the system clock plus a
// wall offset that the child steps back and forward (1 s to 1 h) while it
// runs, and each child starts at an offset of its own, most often behind
// where the previous child's ended (clock.go). Stored deadlines are then
// checked by spans of queue time, not against the wall clock (ledger.go).
// Work runs alongside the plain consumers, with a heartbeat and handlers
// that outlast the visibility (on the named queues, in half the children,
// one WorkQueues pool over them all, started again when a queue is
// created again; the summary counts its runs as pool-runs); the child reports a second run of an item
// while its first handler lives, and a lease lost under a live handler
// (work.go); a child that was itself starved for longer than the
// heartbeat can cover (the one exception docs/workers.md states) reports such an event
// apart, and the summary counts it as starved, not as a violation. Some
// bodies are random bytes, some lookalike format-1 and format-2 records, and
// some copies of real frames the child reads from the queue's own segment
// files while it runs (whole or torn, at the start of the body or after
// the token); some are large (1 KiB to 256 KiB, over many pages, with runs
// of zeros and lookalike records) and some empty (named by their key);
// all are checked byte for byte (bodies.go).
//
// Some cycles skip the parent's check, so that the next child's own
// recovery, with leases to expire and a tail to cut, can be killed too.
// After the last cycle the parent drains the queue through the API and
// checks again. A run with a violation keeps its directory, with every
// child's report, and prints the seed and the cycle.
//
// Power loss (powerloss.go): after the kill the harness computes the LSN
// that was provably fsynced: what was on disk when the child started, the
// DurableLSN of completed calls under SyncAlways, snapshot LSNs, the
// highest watermark any frame on disk states (the log writes into every
// frame the last LSN fsynced when it was written), and the newest
// segment's first LSN less one. Older segments stay whole; in the tail,
// every byte up to the end of the frame holding that LSN stays, and only
// what follows may be damaged; only completions whose records lie at or
// below it are promised. The plain power loss (Config.PowerLoss, -powerloss)
// cuts the tail at a random point past that and fills the rest with zeros,
// garbage or nothing. Page loss (Config.PageLoss, -pageloss), in the
// manner of pebble's crashable file system that keeps a random share of
// unsynced writes, keeps a random subset of the tail's unsynced 4 KiB pages
// and zeroes or garbles the others, sometimes also cutting the file at a
// page boundary: a disk that wrote its page cache back out of order. Log
// format 1 refused such opens within a few dozen cycles; format 2 must not
// (TestPageLossEveryPolicy, under each sync policy). Config.Sync "cycle"
// draws each child's policy from always, interval:100ms and never.
//
// Named queues (Config.Queues, -queues; queues.go): the child opens that
// many named queues besides the default queue, each with settings of its
// own, and spreads every call over all of them; an admin pauses them
// until a time or until resumed, resumes them, and deletes them (forced or
// not) and creates them again under their name, a new incarnation with a
// new ID. Every call names its incarnation in the report, and each check
// holds the state to it: each promised item stored in the queue and under
// the ID its put returned, with its body; no incarnation whose delete was
// promised, nor any item, key or dead letter of it, back, and none lost
// that no delete was started on; each promised pause still recorded (or
// ended by its time), each promised resume too; a Get started while its
// queue was certainly paused until resumed delivering nothing; keys held
// per queue (the holder of a duplicate and of every key entry is an item
// of the same queue, and the same key is held in several queues at once);
// each queue's settings, gauges, counters and dead letters; and the
// ledger's counter checks per queue. The child itself checks that a queue
// created again starts empty, that a deleted queue's old handle returns
// ErrQueueDeleted, that messages name their queue and that a receipt is
// refused by another queue's handle. Deletes come with Gets blocked on the
// queue and Work handlers holding its leases; the harness found, in the
// first build of named queues, that a Delete with a Get blocked on the
// queue crashed the process and that a queue created after the newest
// snapshot was unusable after a reopen (both fixed before they landed).
// soak.sh runs every mode with three named queues (QUEUES=0: the default
// queue only).
//
// Wake-ups (consumers.go, idle.go): the child watches its consumers.
// Every 50 ms it reads the Stats of each queue it has open, and a queue on
// which a Get waits while the queue can lease an item (Stats.Stalled, or
// Gets signalled for every such item that never come back), on every read
// for 200 ms with nothing changed (ready, leased, signalled, delivered)
// and no pause, resume, delete, re-creation or handle closed in between,
// is a stalled consumer: a violation naming the queue and its figures (an
// S line, counted as starved, when the child's own stalls cover half the
// span). Quiet phases leave one queue at a time to its Work consumers, so
// that only the timer, their own calls and a few puts made once they wait
// wake them, most often after a second handle of the queue was closed
// under blocked Gets. And after the first check, every eighth
// (Config.IdleEvery) and the last, the parent runs an idle check on a copy
// of the recovered directory: emptied of what would come due, with Gets
// blocked on an empty queue, on hour-long delays, on a queue paused with a
// ready item and one whose delay ended during the pause, on a queue whose
// timed pause has ended, and on a queue at its MaxInFlight whose ack woke
// the Get of one handle after a Get on another was closed, 100 ms with
// nothing due may wake the timer loop at most twice and the committer not
// at all (Stats.Wakeups), and no Get may return. Putting back any of the
// wake-up bugs that one-place wake-ups fixed makes a run report them: a
// closed handle's waiter left on the list (at the first idle check, and
// as a stalled consumer in the children within a few hundred cycles), the
// timer skipping paused queues or counting a pause that ended (busy idle,
// tens of thousands of timer rounds in the window, at the first idle
// check).
//
// Answers read from the state rather than written (a duplicate key's
// holder, a dead letter not found) are given only once what they rest on
// is durable, and the ledger holds them to the recovered state: a trusted
// duplicate's holder stored, and for a redrive or purge answered
// ErrNotFound, one of the items it named gone or delivered again since it
// was listed (not a dead letter with the deliveries it was listed with).
// A quarter of the dead-letter sweeps race a second sweep of the same dead
// letters so that such answers come often; a build whose ErrNotFound did
// not wait was reported at the fifth cycle of a power-loss run.
//
// With Config.LowDisk the queue lives on a tmpfs of that size (Linux,
// root) and each child runs with Options.DiskWatermark at a quarter of it
// and automatic compaction on: puts refused with ErrDiskFull are held to
// storing nothing, and the queue must never fail itself (a build without
// the watermark fails at the first cycle on 8 MiB).
//
// The harness must be able to fail: built with the tag walq_bug_early_ack
// the queue returns from every call before its record is durable, and
// TestCatchesEarlyAck (and soak.sh's early-ack mode) assert that the
// harness reports violations against that build.
//
// Running it: go test -tags long ./crashtest runs a short version of each
// mode (see the WALQ_CRASH_* variables in crash_long_test.go); crashtest/soak.sh runs
// thousands of cycles and prints one summary line per mode; and
// cmd/walq-crashtest takes flags for cycles, seed, sync policy, power loss
// and the workload mix.
package crashtest
