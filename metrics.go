package walq

import (
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
	"sync"
	"sync/atomic"
	"time"
)

// FsyncBuckets are the upper bounds, in seconds, of the fsync latency
// histogram in Stats.
var FsyncBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

// BatchBuckets are the upper bounds of the group-commit batch size
// histogram (records per write) in Stats.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}

// Histogram is a cumulative histogram as Prometheus exposes it: Counts[i]
// observations were at or below Bounds[i].
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// histogram is a lock-protected histogram; observations are rare enough
// (one per fsync or batch) that a mutex costs nothing measurable.
type histogram struct {
	mu     sync.Mutex
	bounds []float64
	counts []uint64 // per bucket, not cumulative; one extra for +Inf
	count  uint64
	sum    float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	h.mu.Lock()
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.count++
	h.sum += v
	h.mu.Unlock()
}

func (h *histogram) snapshot() Histogram {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Histogram{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds)), Count: h.count, Sum: h.sum}
	var cum uint64
	for i := range h.bounds {
		cum += h.counts[i]
		out.Counts[i] = cum
	}
	return out
}

type metrics struct {
	fsync          *histogram
	batch          *histogram
	compactions    atomic.Uint64
	compactFailed  atomic.Uint64
	copiesSkipped  atomic.Uint64
	lastCompaction atomic.Int64 // queue time of the last compaction; 0: none
	lastCompactDur atomic.Int64

	// Bodies (bodies.go): deliveries served from memory and from the
	// disk, bytes read, bodies that failed their check, bytes relocated
	// by compaction.
	bodyHits       atomic.Uint64
	bodyMisses     atomic.Uint64
	bodyReadBytes  atomic.Int64
	bodyFailures   atomic.Uint64
	relocatedBytes atomic.Int64

	// Bytes written (log frames, snapshots) and bytes of bodies put, for
	// write amplification.
	writtenBytes atomic.Int64
	putBytes     atomic.Int64
	// The kept segments as the last compaction (or Open) left them.
	keptBytes atomic.Int64
	keptFiles atomic.Int64

	// Wake-ups (waiters.go, timer.go): Gets signalled, rounds of the
	// timer loop, and the queues its ticks looked at (tests count them).
	wakes       atomic.Uint64
	timerWakes  atomic.Uint64
	timerVisits atomic.Uint64
}

func newMetrics() metrics {
	return metrics{fsync: newHistogram(FsyncBuckets), batch: newHistogram(BatchBuckets)}
}

// RecoveryStats is what Open did to bring the queue back.
type RecoveryStats struct {
	Duration      time.Duration
	SnapshotLSN   uint64 // LSN the loaded snapshot covers (0: none)
	Replayed      int    // log records applied after the snapshot
	TailCutBytes  int64  // bytes cut from a torn tail (kept in a .broken file)
	BrokenFile    string
	LeasesExpired int // leases open at the crash, ended as expired
	// ForeignEntries are the entries of the queue directory and its log
	// directory that are not walq's ("notes.txt", "log/README"), found
	// at Open. walq leaves them alone; lost+found and dotfiles are not
	// listed.
	ForeignEntries []string
	// Migration says what Open did to carry a directory of format 1
	// forward to format 2; nil when the directory was of format 2 or new.
	Migration *MigrationStats
	// BodiesRelocated counts the bodies Open copied into the log from a
	// snapshot of an earlier version, which held them (0 otherwise).
	BodiesRelocated int
}

// Stats is a point-in-time view of the queue. Gauges are as of the call;
// the queue's counters (Put to MovedOut) count since the queue directory
// was created, and LateAcks, WrittenBytes, PutBytes, Compactions,
// CompactionsFailed and Work since Open.
type Stats struct {
	// Queue is the queue's name ("" for the default queue, and for
	// DirStats). Paused says whether it delivers nothing now.
	Queue  string
	Paused bool
	// MaxInFlight is the queue's cap on open leases (0: none).
	MaxInFlight int

	Ready, Delayed, Leased, Dead int
	Items                        int   // stored items: ready, delayed, leased and dead
	Bytes                        int64 // sum of their bodies
	Keys                         int   // idempotency keys a Put would find held now: of stored items, or released within the key window

	Put, Delivered, Acked, Nacked, Expired, DeadLettered, Discarded, Redriven, Purged uint64
	// MovedIn and MovedOut count dead letters redriven into this queue
	// from another, and out of it into another (RedriveTo).
	MovedIn, MovedOut uint64
	LateAcks          uint64

	// OldestReady is how long the oldest ready item has been ready (an
	// item is ready once its due time has come, whether or not a consumer
	// has looked); it grows when consumers do not keep up, or are down.
	// DelayedPastDue is how far the queue is behind in moving items that
	// came due out of its delayed heap (the timer moves them as they come
	// due): zero but for moments; such items count as ready all the same.
	OldestReady    time.Duration
	DelayedPastDue time.Duration

	Fsync       Histogram // seconds per fsync of the log
	CommitBatch Histogram // records per group commit
	LogBytes    int64     // size of the log segments
	LogSegments int
	// WrittenBytes counts the bytes the directory wrote since it was
	// opened (log frames and snapshots; a segment moved to bodies/ is not
	// written again), and PutBytes the bytes of bodies put: their ratio
	// is the write amplification.
	WrittenBytes, PutBytes int64
	// KeptBytes and KeptSegments are the sealed segments moved out of the
	// log (into the directory's bodies/) for the live bodies they hold, as
	// the last compaction left them.
	KeptBytes    int64
	KeptSegments int
	LastLSN      uint64 // last record appended
	DurableLSN   uint64 // last record durable under the sync policy
	// FsyncedLSN is the last record an fsync covers: DurableLSN under
	// SyncAlways; under SyncInterval and SyncNever, records past it are
	// written to the OS and not yet safe from a power loss.
	FsyncedLSN  uint64
	SnapshotLSN uint64
	LiveBytes   int64 // what a snapshot of the state would take, approximately
	Compactions uint64
	// CompactionsFailed counts compactions that returned an error (the log
	// is kept whole; the automatic one is tried again on a timer, from 1 s
	// to a minute, while the log is over its bounds).
	CompactionsFailed uint64
	// CopiesSkipped counts compactions that copied no body forward because
	// the disk was nearly full (see Options.DiskWatermark): they kept the
	// files that held live bodies and removed the ones emptied.
	CopiesSkipped uint64
	// DiskFree is the free space of the directory's disk, read by Stats
	// (0 where it cannot be read), and DiskRefused counts the puts
	// Options.DiskWatermark refused.
	DiskFree    int64
	DiskRefused uint64
	// RollsPutOff counts the times the log could not start its next
	// segment (a full disk, a failed create) and went on in the one it
	// was writing, trying again later; UnreservedSegments the segments
	// begun without their space set aside (the filesystem cannot
	// preallocate, or the disk had not the room for a whole segment).
	RollsPutOff        uint64
	UnreservedSegments uint64
	LastCompacted      time.Time
	LastCompactIn      time.Duration
	Recovery           RecoveryStats
	Work               WorkStats // summed over every Work call on the queue
	// Bodies says what the directory holds of its bodies in memory and
	// how deliveries got them (the same for every queue's Stats).
	Bodies BodyStats
	// Wakeups says how consumers and the directory's loops woke.
	Wakeups WakeStats
	dir     bool // DirStats
	// IndexMappedBytes is the memory the directory's items take outside
	// the Go heap: their entries, 80 bytes each, in chunks of 4096 IDs
	// mapped for them (on Unix), which runtime.MemStats leaves out.
	IndexMappedBytes int64
}

// Stalled reports a consumer stalled with work ready, which the queue must
// never leave for longer than its timer takes to act: a Get waits on the
// queue while the queue can lease more items (its ready ones, due items
// included, within MaxInFlight; none while it is paused) than Gets were
// signalled for. Tests check it after every step, once the timer has done
// what came due. It is false for DirStats.
func (s Stats) Stalled() bool {
	if s.Wakeups.Waiting == 0 || s.Paused || s.dir {
		return false
	}
	n := s.Ready
	if s.MaxInFlight > 0 {
		n = min(n, s.MaxInFlight-s.Leased)
	}
	return n > s.Wakeups.Woken
}

// WakeStats says how a queue's consumers and the directory's background
// loops wake. An idle directory (nothing put, the clock standing still)
// wakes its loops a bounded number of times, whatever waits on it; a Get
// waits only while its queue has no item to lease that no other waiting Get
// was signalled for.
type WakeStats struct {
	Waiting int // Gets blocked on the queue now (DirStats: on any queue)
	Woken   int // of those, signalled that an item is there and not yet back for it
	// Signalled counts the signals given to blocked Gets, TimerLoop the
	// rounds of the timer loop (it sleeps until the next lease end, due
	// time, deadline, pause end or key release) and Committer those of the
	// log's committer (one per batch written, sync and request), since
	// Open; all three are the directory's.
	Signalled, TimerLoop, Committer uint64
}

// BodyStats describes the bodies of a directory: stored in the log, and
// in memory only while recent (see Options.BodyCacheBytes).
type BodyStats struct {
	CacheBytes     int64 // bodies in the cache, until delivered
	CacheItems     int
	UnplacedBytes  int64 // bodies whose frames are not yet written (held until then)
	Hits, Misses   uint64
	ReadBytes      int64 // bytes of bodies read from the log
	Failures       uint64
	RelocatedBytes int64 // copied forward by compaction
}

// WorkStats counts what Work's handlers did.
type WorkStats struct {
	HandlerErrors    uint64 // handler calls that returned an error (panics apart)
	Panics           uint64
	Timeouts         uint64 // handler contexts cancelled at WorkOptions.Timeout
	Abandoned        uint64 // handlers that ignored their cancelled context past the grace
	AbandonedRunning int64  // abandoned handlers that have not returned yet
	LeasesLost       uint64 // heartbeats that found the lease gone
}

// Stats reports the queue's gauges and counters, and the directory's log,
// compaction and recovery figures (which every queue of the directory
// shares). On a handle whose queue was deleted the queue's figures are
// zero.
func (q *Queue) Stats() Stats {
	return q.stats(false)
}

// DirStats is Stats summed over every queue of the directory: the gauges
// and counters of its queues added up (of the queues that exist now), and
// Work's counters of Queue.Work on each.
func (q *Queue) DirStats() Stats {
	return q.stats(true)
}

func (q *Queue) stats(all bool) Stats {
	return q.statsWith(all, q.log.Segments())
}

// statsWith is stats with the log's segments already listed.
func (q *Queue) statsWith(all bool, segs []wal.Segment) Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.dirStatsLocked(segs)
	q.queueStatsLocked(&st, all)
	return st
}

// dirStatsLocked returns the figures every queue of the directory shares
// (the log, the disk, compaction, bodies, recovery), segs being the log's
// segments; Queues reads them once for all its queues. The queue's own
// figures are zero (queueStatsLocked fills them).
func (q *Queue) dirStatsLocked(segs []wal.Segment) Stats {
	var logBytes int64
	for _, s := range segs {
		logBytes += s.Size
	}
	// A fresh reading: the estimate the puts use between readings counts
	// what was appended as taken, and not what compaction gave back.
	diskFree, _ := q.roomLocked(0, 0)
	q.bodies.drainLocked(q.st)
	bs := BodyStats{CacheBytes: q.bodies.cacheBytes, CacheItems: len(q.bodies.cache)}
	for _, b := range q.bodies.unplaced {
		bs.UnplacedBytes += int64(len(b))
	}
	bs.Hits, bs.Misses = q.metrics.bodyHits.Load(), q.metrics.bodyMisses.Load()
	bs.ReadBytes, bs.Failures = q.metrics.bodyReadBytes.Load(), q.metrics.bodyFailures.Load()
	bs.RelocatedBytes = q.metrics.relocatedBytes.Load()
	st := Stats{
		Fsync:              q.metrics.fsync.snapshot(),
		CommitBatch:        q.metrics.batch.snapshot(),
		LogBytes:           logBytes,
		LogSegments:        len(segs),
		KeptBytes:          q.metrics.keptBytes.Load(),
		WrittenBytes:       q.metrics.writtenBytes.Load(),
		PutBytes:           q.metrics.putBytes.Load(),
		KeptSegments:       int(q.metrics.keptFiles.Load()),
		LastLSN:            q.st.LastLSN(),
		DurableLSN:         q.log.DurableLSN(),
		FsyncedLSN:         q.log.FsyncedLSN(),
		SnapshotLSN:        q.snapLSN.Load(),
		LiveBytes:          q.liveBytesLocked(),
		Compactions:        q.metrics.compactions.Load(),
		CompactionsFailed:  q.metrics.compactFailed.Load(),
		CopiesSkipped:      q.metrics.copiesSkipped.Load(),
		DiskFree:           diskFree,
		DiskRefused:        q.disk.refused,
		RollsPutOff:        q.log.RollFailures(),
		UnreservedSegments: q.log.Unreserved(),
		LastCompactIn:      time.Duration(q.metrics.lastCompactDur.Load()),
		Recovery:           q.recovery.clone(),
		Bodies:             bs,
		Wakeups: WakeStats{
			Signalled: q.metrics.wakes.Load(),
			TimerLoop: q.metrics.timerWakes.Load(),
			Committer: q.log.Wakes(),
		},
		IndexMappedBytes: q.st.MappedBytes(),
	}
	if t := q.metrics.lastCompaction.Load(); t != 0 {
		st.LastCompacted = q.qt.toWall(t)
	}
	return st
}

// queueStatsLocked sets st's queue figures: those of q's queue (zero when
// it was deleted), or with all, those of every queue summed.
func (q *Queue) queueStatsLocked(st *Stats, all bool) {
	now := q.qt.now()
	var g state.Gauges
	var c state.Counters
	add := func(qs *state.QueueState, rt *queueRT) {
		qg := qs.GaugesAt(now)
		if rt != nil {
			qg.Keys = qs.KeysAt(now, int64(rt.set.keyWindow)) // as a Put would find them
		}
		g.Ready, g.Delayed, g.Leased, g.Dead = g.Ready+qg.Ready, g.Delayed+qg.Delayed, g.Leased+qg.Leased, g.Dead+qg.Dead
		g.Items, g.Bytes, g.Keys = g.Items+qg.Items, g.Bytes+qg.Bytes, g.Keys+qg.Keys
		if qg.OldestReadyDue != 0 && (g.OldestReadyDue == 0 || qg.OldestReadyDue < g.OldestReadyDue) {
			g.OldestReadyDue = qg.OldestReadyDue
		}
		if qg.DelayedHeadDue != 0 && (g.DelayedHeadDue == 0 || qg.DelayedHeadDue < g.DelayedHeadDue) {
			g.DelayedHeadDue = qg.DelayedHeadDue
		}
		c = c.Add(qs.Counters())
		if rt != nil {
			st.LateAcks += rt.lateAcks.Load()
			st.Work = st.Work.add(rt.work.Stats())
			st.Wakeups.Waiting += rt.waiters.len()
			st.Wakeups.Woken += rt.woken
		}
	}
	if all {
		q.st.EachQueue(func(qs *state.QueueState) { add(qs, q.rts[qs.ID()]) })
	} else if qs := q.st.Queue(q.rt.id); qs != nil && !q.rt.gone {
		add(qs, q.rt)
		st.Queue, st.Paused, st.MaxInFlight = q.rt.name, qs.Paused(now), q.rt.set.maxInFlight
	}
	st.dir = all
	st.Ready, st.Delayed, st.Leased, st.Dead = g.Ready, g.Delayed, g.Leased, g.Dead
	st.Items, st.Bytes, st.Keys = g.Items, g.Bytes, g.Keys
	st.Put, st.Delivered, st.Acked, st.Nacked, st.Expired = c.Put, c.Delivered, c.Acked, c.Nacked, c.Expired
	st.DeadLettered, st.Discarded, st.Redriven, st.Purged = c.DeadLettered, c.Discarded, c.Redriven, c.Purged
	st.MovedIn, st.MovedOut = c.MovedIn, c.MovedOut
	if g.OldestReadyDue != 0 && now > g.OldestReadyDue {
		st.OldestReady = time.Duration(now - g.OldestReadyDue)
	}
	if g.DelayedHeadDue != 0 && now > g.DelayedHeadDue {
		st.DelayedPastDue = time.Duration(now - g.DelayedHeadDue)
	}
}

func (w WorkStats) add(v WorkStats) WorkStats {
	return WorkStats{
		HandlerErrors: w.HandlerErrors + v.HandlerErrors, Panics: w.Panics + v.Panics, Timeouts: w.Timeouts + v.Timeouts,
		Abandoned: w.Abandoned + v.Abandoned, AbandonedRunning: w.AbandonedRunning + v.AbandonedRunning,
		LeasesLost: w.LeasesLost + v.LeasesLost,
	}
}

func (r RecoveryStats) clone() RecoveryStats {
	r.ForeignEntries = append([]string(nil), r.ForeignEntries...)
	return r
}
