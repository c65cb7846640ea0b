package walq

import (
	"errors"
	"fmt"
	"time"

	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Compaction bounds the log by the live data.
//
//  1. Sync the log: every record up to LSN S is on disk, so no crash can
//     leave the log behind the snapshot.
//  2. Build the index at S apart from the queue: load the newest snapshot
//     and replay the log up to S into a private state. The queue's lock is
//     not held at all (the copy is built from the durable log, exactly as
//     recovery would build it), so puts and gets go on meanwhile. The cost
//     is a second copy of the index (not of the bodies) while it runs.
//  3. Write it as snapshot-S: temp file, fsync, rename, directory fsync.
//     It holds where each body is, not the bodies.
//  4. Copy forward the live bodies that lie in the sealed segments S
//     covers: read each (outside the lock, checked by its CRC) and append
//     Relocate records through the sequencer, like any other record, in
//     pieces of relocateChunk bytes. Then sync them.
//  5. Remove the sealed segments wholly below both S and the lowest body
//     still in the log, oldest first: whole files, never the tail segment,
//     nothing rewritten. Directory fsync. A read in flight that still
//     names a removed segment looks the body up again (bodies.go).
//  6. Only then delete the older snapshots.
//
// A crash between any two steps leaves either the old snapshot with a log
// that reaches back to it, or the new snapshot with a log that reaches back
// to S and holds every body the state names: relocated bodies are durable
// before a segment that held them is removed, and recovery never removes a
// segment below the lowest body its state names. Recovery handles both
// and removes leftover temp files.
//
// Why copy forward, and not a snapshot that carries the bodies or a body
// log of its own: the copies go through the one log and its group commit
// (no second file to fsync on the hot path); a body consumed soon after
// its put is never copied (it is gone before its segment is compacted);
// one old item costs a copy of its own body, never a kept segment; and
// the free disk a compaction needs is the index snapshot and the copies,
// not a rewrite of everything live at once.

// Compact runs a compaction now. It returns when it is done; automatic
// compaction waits meanwhile.
func (q *Queue) Compact() error {
	q.mu.Lock()
	err := q.usableLocked()
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.compact()
}

var errCompactionStopped = errors.New("walq: compaction stopped: queue closing")

func (q *Queue) compactLoop() {
	defer q.wg.Done()
	for {
		select {
		case <-q.compactSignal:
			err := q.compact()
			if err != nil && !errors.Is(err, errCompactionStopped) {
				q.opts.Logger.Error("walq: compaction failed", "err", err)
			}
			if q.opts.onCompact != nil {
				q.opts.onCompact(err)
			}
		case <-q.done:
			return
		case <-q.failed:
			return
		}
	}
}

func (q *Queue) compact() (err error) {
	q.compactMu.Lock()
	defer q.compactMu.Unlock()
	start := time.Now()
	defer func() {
		if err != nil {
			q.metrics.compactFailed.Add(1)
			// Do not try again on every append: wait for the log to double.
			q.mu.Lock()
			q.compactAfter = 2 * q.logBytes
			q.mu.Unlock()
		}
	}()

	// After a queue was deleted the tail is sealed too, so that the
	// truncation below removes every segment the snapshot covers: the
	// deleted queue's bodies leave the disk with this compaction, not with
	// the one after the tail fills. (Otherwise the tail stays: a log that
	// still reaches back past the snapshot is what recovery falls back on
	// when the snapshot does not verify.)
	sync := q.log.Sync
	roll := q.rollAtCompaction.Swap(false)
	if roll {
		sync = q.log.SyncRoll
	}
	covered, err := sync()
	if err != nil && roll {
		q.rollAtCompaction.Store(true)
	}
	if err != nil {
		return fmt.Errorf("walq: compaction: sync log: %w", err)
	}
	prev := q.snapLSN.Load()
	if covered > prev {
		shadow, err := q.stateAt(prev, covered)
		if err != nil {
			return err
		}
		// Keys are pruned at the snapshot's own time, the newest time in
		// the records it covers, not at the queue's time now: a reopen with
		// the wall clock behind resumes queue time at the log's newest
		// time, which may be earlier than now, and a key pruned at now
		// would be missing there while its window still held it.
		windows := make(map[uint64]int64)
		q.mu.Lock()
		for id, rt := range q.rts {
			windows[id] = int64(rt.set.keyWindow)
		}
		q.mu.Unlock()
		shadow.PruneKeysBy(shadow.LastTime(), func(queue uint64) int64 {
			if w, ok := windows[queue]; ok {
				return w
			}
			return int64(q.opts.KeyWindow)
		})
		body, err := shadow.MarshalSnapshot()
		if err != nil {
			return fmt.Errorf("walq: compaction: encode snapshot: %w", err)
		}
		if _, err := wal.WriteSnapshot(q.opts.fs, q.dir, q.dirID, covered, body, q.opts.FileMode); err != nil {
			return fmt.Errorf("walq: compaction: write snapshot: %w", err)
		}
		q.snapLSN.Store(covered)
	}
	floor, err := q.relocateBelow(covered)
	if err != nil {
		return err
	}
	keep := covered
	if floor > 0 {
		keep = min(keep, floor-1)
	}
	if err := q.truncateLog(keep); err != nil {
		return err
	}
	if err := q.removeSnapshotsBefore(covered); err != nil {
		return err
	}
	var logBytes int64
	for _, s := range q.log.Segments() {
		logBytes += s.Size
	}
	q.mu.Lock()
	q.logBytes = logBytes // records appended meanwhile are already in the files, or nearly
	q.compactAfter = 0
	q.mu.Unlock()
	q.metrics.compactions.Add(1)
	q.metrics.lastCompaction.Store(q.qt.now())
	q.metrics.lastCompactDur.Store(int64(time.Since(start)))
	q.opts.Logger.Info("walq: compacted", "snapshot_lsn", covered, "log_bytes", logBytes, "duration", time.Since(start))
	return nil
}

// stateAt rebuilds the state at LSN to from the snapshot at from (0: none)
// and the log, without touching the queue's own state.
func (q *Queue) stateAt(from, to uint64) (*state.State, error) {
	st, err := rebuild.StateAt(q.dir, q.dirID, from, to, func(uint64) error {
		select {
		case <-q.done:
			return errCompactionStopped
		default:
			return nil
		}
	})
	if err != nil {
		return nil, fmt.Errorf("walq: compaction: %w", err)
	}
	return st, nil
}

// truncateLog removes the sealed segments whose records the snapshot at
// covered holds, whole files only (the tail segment is never removed).
func (q *Queue) truncateLog(covered uint64) error {
	segs := q.log.Segments()
	if len(segs) < 2 || segs[1].First > covered+1 {
		return nil
	}
	if err := q.log.TruncateFront(covered + 1); err != nil {
		return fmt.Errorf("walq: compaction: truncate log before %d: %w", covered+1, err)
	}
	return nil
}

func (q *Queue) removeSnapshotsBefore(lsn uint64) error {
	snaps, err := wal.ListSnapshots(q.dir)
	if err != nil {
		return fmt.Errorf("walq: compaction: list snapshots: %w", err)
	}
	removed := false
	for _, s := range snaps {
		if s.LSN < lsn {
			if err := q.opts.fs.Remove(s.Path); err != nil {
				return fmt.Errorf("walq: compaction: remove old snapshot %s: %w", s.Name, err)
			}
			removed = true
		}
	}
	if removed {
		if err := q.opts.fs.SyncDir(q.dir); err != nil {
			return fmt.Errorf("walq: compaction: sync %s: %w", q.dir, err)
		}
	}
	return nil
}

// relocateChunk bounds the bodies one Relocate record carries, and so
// what relocation holds in memory at once.
const relocateChunk = 4 << 20

// relocateBelow copies forward every live body that lies in a sealed
// segment that the snapshot at covered lets go (step 4 above) and returns
// the lowest record truncation must keep: the first record of the first
// segment it did not empty (the segments are listed once, at its start:
// its own records may roll the tail meanwhile, and a segment sealed since
// was not emptied), or lower, the record of a body that failed its check
// and was not copied (its item is dead-lettered when delivered).
func (q *Queue) relocateBelow(covered uint64) (uint64, error) {
	segs := q.log.Segments()
	i := 0
	for i+1 < len(segs) && segs[i+1].First <= covered+1 {
		i++
	}
	if len(segs) == 0 {
		return 1, nil
	}
	below := segs[i].First
	if i == 0 {
		return below, nil // no segment to let go
	}
	floor := below
	var last *wal.Commit
	for next := uint64(1); ; {
		// Under the lock, for a moment: the next piece of items whose
		// bodies lie below the first segment kept.
		var srcs []bodySource
		var bytes int64
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return 0, err
		}
		q.bodies.drainLocked(q.st)
		seen, done := 0, true
		q.st.EachFrom(next, func(it *state.Item) bool {
			next = it.ID + 1
			if seen++; seen > 64<<10 || bytes >= relocateChunk {
				done = false
				next = it.ID
				return false
			}
			if it.Body.Len > 0 && it.Body.LSN != 0 && it.Body.LSN < below {
				srcs = append(srcs, q.sourceLocked(it, false))
				bytes += int64(it.Body.Len)
			}
			return true
		})
		q.mu.Unlock()

		// Outside it: the bodies, read and checked.
		type copied struct {
			src  bodySource
			body []byte
		}
		var got []copied
		for _, src := range srcs {
			body, err := q.loadBody(src)
			if err != nil {
				q.metrics.bodyFailures.Add(1)
				q.opts.Logger.Error("walq: compaction: a stored body failed its check; it stays where it is, and its item goes to the dead letters when delivered",
					"id", src.id, "err", err)
				floor = min(floor, src.ref.LSN)
				continue
			}
			got = append(got, copied{src, body})
		}

		// Under the lock again: the bodies of the items still there with
		// the same body in the same place go into one record.
		if len(got) > 0 {
			q.mu.Lock()
			rec := &state.Relocate{Time: q.qt.now()}
			var ids []uint64
			var bodies [][]byte
			for _, c := range got {
				// The same record still holds it (its place in the record's
				// segment may have become known meanwhile).
				if it := q.st.Item(c.src.id); it != nil && it.Body.LSN == c.src.ref.LSN && it.Body.Len > 0 {
					rec.Items = append(rec.Items, state.Relocated{ID: c.src.id, Body: c.body})
					ids = append(ids, c.src.id)
					bodies = append(bodies, c.body)
				}
			}
			if len(rec.Items) > 0 {
				lsn, c, err := q.appendToLocked(state.DefaultQueue, rec)
				if err != nil {
					q.mu.Unlock()
					return 0, err
				}
				offs := make([]int, len(rec.Items))
				var n int64
				for j := range rec.Items {
					offs[j] = rec.Items[j].BodyOffset
					n += int64(len(rec.Items[j].Body))
				}
				q.bodies.addLocked(lsn, ids, offs, bodies)
				q.metrics.relocatedBytes.Add(n)
				last = c
			}
			q.mu.Unlock()
		}
		if done {
			break
		}
		select {
		case <-q.done:
			return 0, errCompactionStopped
		default:
		}
	}
	if last != nil {
		// The copies are durable before any segment that held the
		// originals is removed, whatever the sync policy. Sealing the
		// tail also leaves that on disk for anyone to see: a segment
		// after the copies exists only once they were fsynced (the crash
		// harness finds what was promised that way, and recovery reads
		// nothing else).
		if _, err := q.log.SyncRoll(); err != nil {
			return 0, fmt.Errorf("walq: compaction: sync relocated bodies: %w", err)
		}
	}
	// What truncation may remove is checked, not assumed: a last pass, in
	// pieces under the lock, finds any body still below (one that failed
	// its check, or a case this code did not foresee) and keeps its
	// segment. A dangling reference would be a lost put.
	for next := uint64(1); ; {
		q.mu.Lock()
		seen, done := 0, true
		q.st.EachFrom(next, func(it *state.Item) bool {
			if seen++; seen > 64<<10 {
				done, next = false, it.ID
				return false
			}
			if it.Body.Len > 0 && it.Body.LSN < floor {
				floor = it.Body.LSN
			}
			return true
		})
		q.mu.Unlock()
		if done {
			break
		}
	}
	return floor, nil
}
