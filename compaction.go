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
//  2. Build the state at S apart from the queue: load the newest snapshot
//     and replay the log up to S into a private state. The queue's lock is
//     not held at all (the copy is built from the durable log, exactly as
//     recovery would build it), so puts and gets go on meanwhile. The cost
//     is a second copy of the live data in memory while it runs.
//  3. Write it as snapshot-S: temp file, fsync, rename, directory fsync.
//  4. Remove the sealed segments whose records S covers, oldest first:
//     whole files, never the tail segment, nothing rewritten. Directory
//     fsync.
//  5. Only then delete the older snapshots.
//
// A crash between any two steps leaves either the old snapshot with a log
// that reaches back to it, or the new snapshot with a log that reaches back
// to S; recovery handles both and removes leftover temp files.

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
	if err := q.truncateLog(covered); err != nil {
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
