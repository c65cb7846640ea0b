package walq

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Compaction bounds the log by the live data.
//
//  1. Freeze the live state under the lock at its last record, S
//     (state.Freeze): a moment, whatever the state holds.
//  2. Sync the log: every record up to S is on disk, so no crash can leave
//     the log behind the snapshot; the bodies of those records now have
//     their places.
//  3. Write the frozen state as snapshot-S a chunk of 4096 IDs at a time,
//     taking the lock for each chunk only: puts and gets go on meanwhile,
//     and a record about to change an item of a chunk not yet written
//     copies that chunk first, so the extra memory is what changes while
//     it is written, never a second copy of the index (a queue's deletion
//     keeps only the items it removes, and does not stop it). Temp file written
//     in 1 MiB pieces, lengths and CRC last, fsync, rename, directory
//     fsync. It holds where each body is, not the bodies.
//  4. Each sealed segment S covers (and each segment kept in bodies/)
//     leaves: removed when no live body lies in it, moved whole to bodies/
//     when at least half of it is live, else its live bodies are copied
//     forward first: read (outside the lock, checked by their CRC) and
//     appended as Relocate records through the sequencer, like any other
//     record, in pieces of relocateChunk bytes, then synced. On a nearly
//     full disk (Options.DiskWatermark) nothing is copied and such a
//     segment is moved whole. See compactBodies.
//  5. Removals are whole files, oldest first, never the tail segment,
//     nothing rewritten; directory fsync. A read in flight that still
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
// one old item in a sparse segment costs a copy of its own body; and
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

// compactRetryMin and compactRetryMax bound the wait before an automatic
// compaction is tried again after one failed: the wait doubles with each
// failure in a row, from the first to the second.
const (
	compactRetryMin = time.Second
	compactRetryMax = time.Minute
)

// compactLoop runs the automatic compactions: when an append finds the log
// over its bounds (compactSignal), and after a failed one, again on a
// timer of the queue's clock, as long as the log is still over them. While
// that timer runs, appends do not start one sooner.
func (q *Queue) compactLoop() {
	defer q.wg.Done()
	var retry Timer
	var retryC <-chan time.Time
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		var run bool
		select {
		case <-q.compactSignal:
			// A signal sent while the last compaction ran is stale: the
			// bounds are read again.
			run = retry == nil && q.compactDue()
		case <-q.reserveSignal:
			q.compactMu.Lock()
			q.refillReserve(false)
			q.compactMu.Unlock()
			if q.opts.onReserve != nil {
				q.opts.onReserve()
			}
		case <-retryC:
			retry, retryC = nil, nil
			if run = q.compactDue(); !run {
				q.compactWait.Store(int64(compactRetryMin)) // the log is within bounds again
			}
		case <-q.done:
			return
		case <-q.failed:
			return
		}
		if !run {
			continue
		}
		err := q.compact()
		if err != nil && !errors.Is(err, errCompactionStopped) {
			wait := time.Duration(q.compactWait.Load())
			q.opts.Logger.Error("walq: compaction failed", "err", err, "retry_in", wait)
			retry = q.clock.NewTimer(wait)
			retryC = retry.C()
			q.compactWait.Store(int64(min(2*wait, compactRetryMax)))
		}
		if q.opts.onCompact != nil {
			q.opts.onCompact(err)
		}
	}
}

func (q *Queue) compactDue() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.compactDueLocked()
}

// compactDueLocked reports whether the log is over the bounds at which
// compaction runs by itself.
func (q *Queue) compactDueLocked() bool {
	if q.opts.DisableAutoCompact {
		return false
	}
	if q.logBytes >= q.opts.CompactMinBytes && q.logBytes >= q.compactAfter &&
		float64(q.logBytes) > q.opts.CompactRatio*float64(q.liveBytesLocked()) {
		return true
	}
	return q.diskTightLocked()
}

// diskTightLocked reports whether the disk is below the watermark (puts
// refused, acks taking its room) while the log has grown by tightStep
// since the last compaction: a drain on a tight disk, whose acks only a
// compaction gives back their room, must not wait for the ratio (a log
// all live until a third of it drained would take more than the room).
// The disk is read only once the log's counts say so.
func (q *Queue) diskTightLocked() bool {
	wm := q.opts.DiskWatermark
	if wm <= 0 || q.logBytes < q.tightAfter {
		return false
	}
	free, ok := q.freeLocked(wm)
	return ok && free < wm
}

// tightStepLocked is how far the log grows between two compactions on a
// tight disk: a snapshot's size (writing them then costs at most a byte
// per byte appended), but no more than half the watermark, so that the
// acks' room lasts, and at least the snapshot floor.
func (q *Queue) tightStepLocked() int64 {
	return max(q.snapshotFloor(), 64<<10, min(q.lastSnapBytes, q.opts.DiskWatermark/2))
}

func (q *Queue) compact() (err error) {
	q.compactMu.Lock()
	defer q.compactMu.Unlock()
	start := time.Now()
	defer func() {
		q.mu.Lock()
		q.rereadDiskLocked()        // files written and removed: the next put reads the disk
		q.disk.reserveStuck = false // and the reserve may grow again
		q.mu.Unlock()
		q.refillReserve(false) // freed for the snapshot, or short of the next one
		if err != nil {
			// compactLoop tries again on a timer; compactAfter stays.
			q.metrics.compactFailed.Add(1)
		} else {
			q.compactWait.Store(int64(compactRetryMin)) // failures in a row start over
		}
	}()

	// A deleted queue's bodies are garbage like any other: the files that
	// hold them are copied from and let go by the density rule of
	// compactBodies, so a delete costs what the queue held, never a copy
	// of every other queue's held backlog.
	covered, err := q.snapshot()
	if err != nil {
		return err
	}
	// The new snapshot is durable: the older ones go whatever happens to
	// the files below (stopped by Close between them, or failed), which
	// the next compaction deals with. Kept after a failure, a snapshot a
	// try would pile up, each the index's size.
	berr := q.compactBodies(covered)
	if err := q.removeSnapshotsBefore(covered); err != nil {
		return errors.Join(berr, err)
	}
	if berr != nil {
		return berr
	}
	var logBytes int64
	for _, s := range q.log.Segments() {
		logBytes += s.Size
	}
	logBytes += q.keptBytes() // what compaction may free counts toward the next one
	q.mu.Lock()
	q.logBytes = logBytes // records appended meanwhile are already in the files, or nearly
	// The next one waits until the log has grown by what this one's
	// snapshot took (at least CompactMinBytes): writing snapshots then
	// costs at most a byte per byte appended, however often the ratio
	// would ask (kept segments still dense count toward the log, and a
	// compaction cannot free them).
	q.compactAfter = logBytes + max(q.opts.CompactMinBytes, q.lastSnapBytes)
	q.tightAfter = logBytes + q.tightStepLocked()
	q.mu.Unlock()
	q.metrics.compactions.Add(1)
	q.metrics.lastCompaction.Store(q.qt.now())
	q.metrics.lastCompactDur.Store(int64(time.Since(start)))
	q.opts.Logger.Info("walq: compacted", "snapshot_lsn", covered, "log_bytes", logBytes, "duration", time.Since(start))
	return nil
}

// snapshot writes a snapshot of the live state as it is now, unless the
// newest snapshot covers it already, and returns the LSN the newest
// snapshot covers. The state is frozen under the lock (see state.Freeze)
// and written a chunk at a time, the lock released between chunks, so the
// queue goes on meanwhile and no second copy of the index is made. The
// records it holds are made durable before it is. A queue deleted
// meanwhile does not stop it (state.Freeze keeps what the deletion
// removes).
func (q *Queue) snapshot() (lsn uint64, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("walq: compaction: %w", err)
		}
		q.mu.Lock()
		q.snapshotWrittenLocked() // what roomForSnapshotLocked set aside
		q.mu.Unlock()
	}()
	prev := q.snapLSN.Load()
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	var f *state.Freeze
	var units int
	if q.st.LastLSN() > prev {
		if err = q.roomForSnapshotLocked(); err == nil {
			f, err = q.st.Freeze()
			units = snapshotUnits(q.st)
		}
	}
	q.mu.Unlock()
	if err != nil {
		return 0, err
	}
	covered, err := q.log.Sync()
	if err == nil && f != nil && covered < f.LSN() {
		err = fmt.Errorf("log synced to %d, the snapshot holds records to %d", covered, f.LSN())
	}
	if err != nil {
		q.endFreeze(f)
		return 0, fmt.Errorf("sync log: %w", err)
	}
	if f == nil {
		return prev, nil
	}
	n, err := q.writeFrozen(f, true)
	q.mu.Lock()
	q.rereadDiskLocked() // the snapshot took disk that no append counted
	q.mu.Unlock()
	if err != nil {
		return 0, err
	}
	q.metrics.writtenBytes.Add(n)
	q.mu.Lock()
	q.lastSnapBytes, q.lastSnapUnits, q.disk.snapFile = n, units, n
	q.mu.Unlock()
	q.snapLSN.Store(f.LSN())
	return f.LSN(), nil
}

// endFreeze gives up f, if any.
func (q *Queue) endFreeze(f *state.Freeze) {
	if f != nil {
		q.mu.Lock()
		f.Close()
		q.mu.Unlock()
	}
}

// writeFrozen writes the snapshot f into the directory, a piece at a time
// (locked: taking q.mu for each piece, as the queue runs), and returns its
// size. Every record f holds must be in the log's files: their bodies are
// placed before each piece.
func (q *Queue) writeFrozen(f *state.Freeze, locked bool) (int64, error) {
	end := f.Close // gives up f, under q.mu as the caller holds it
	if locked {
		end = func() { q.endFreeze(f) }
	}
	w, err := wal.CreateSnapshot(q.opts.fs, q.dir, q.dirID, f.LSN(), wal.SectionDirIndex4, q.opts.FileMode)
	if err != nil {
		end()
		return 0, err
	}
	var buf []byte
	for {
		var done bool
		if locked {
			q.mu.Lock()
			if q.closed {
				err = errCompactionStopped
			}
		}
		if err == nil {
			if locked {
				q.disk.snapshotFlushed(w.Flushed())
			}
			q.bodies.drainLocked(q.st)
			buf, done, err = f.Next(buf[:0])
			if err == nil && locked {
				err = q.snapshotGrowLocked(w.Size() + int64(len(buf)))
			}
		}
		if err != nil {
			f.Close()
		}
		if locked {
			q.mu.Unlock()
		}
		if err == nil {
			if _, err = w.Write(buf); err != nil {
				// A failed write (a full disk) ends the Freeze too: left
				// open, it would refuse every later snapshot and go on
				// copying chunks.
				end()
			}
		}
		if err != nil {
			w.Abort()
			return 0, err
		}
		if done {
			break
		}
		if len(buf) > 4<<20 {
			buf = nil // a piece of large items: let it go
		}
	}
	if _, err := w.Commit(); err != nil {
		return 0, err
	}
	return w.Size(), nil
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
// what relocation holds in memory at once; relocateRound bounds what is
// copied before the segments it emptied are removed, and so the free disk
// a compaction needs beyond the index snapshot.
const (
	relocateChunk = 4 << 20
	relocateRound = 16 << 20
	// denseShare: a sealed segment whose live bodies are at least this
	// share of its bytes is kept (moved out of the log, not copied); one
	// below it is copied forward and removed, so that disk stays within
	// about twice the live data and a body is copied again only after
	// half of what lay beside it went.
	denseShare = 0.5
	// scanPiece is how many items one hold of the lock visits.
	scanPiece = 64 << 10
)

// bodyFile is a file that holds bodies and is not replayed: a sealed log
// segment the snapshot covers, or a kept segment.
type bodyFile struct {
	first, last uint64 // its records
	size        int64
	kept        bool
	name, path  string
	live        int64 // bytes of live bodies in it
	copy        bool  // its live bodies are copied forward, then it is removed
}

// bodyFiles lists the kept segments and the sealed log segments that the
// snapshot at covered covers wholly, by their records, ascending (kept
// ones all come before the log's).
func (q *Queue) bodyFiles(covered uint64) ([]*bodyFile, error) {
	kept, err := q.log.Kept()
	if err != nil {
		return nil, fmt.Errorf("list kept segments: %w", err)
	}
	return listBodyFiles(q.opts.fs, q.dir, kept, q.log.Segments(), covered)
}

// listBodyFiles is bodyFiles of the directory dir from its kept segments
// and its log segments as listed.
func listBodyFiles(fsys wal.FS, dir string, kept []wal.KeptFile, segs []wal.Segment, covered uint64) ([]*bodyFile, error) {
	var files []*bodyFile
	for _, k := range kept {
		path := filepath.Join(dir, layout.BodiesDirName, k.Name)
		info, err := fsys.Stat(path)
		if err != nil {
			return nil, err
		}
		files = append(files, &bodyFile{first: k.First, last: k.Last, size: info.Size(), kept: true, name: k.Name, path: path})
	}
	for i := 0; i+1 < len(segs) && segs[i+1].First <= covered+1; i++ {
		s := segs[i]
		files = append(files, &bodyFile{first: s.First, last: segs[i+1].First - 1, size: s.Size, name: s.Name, path: s.Path})
	}
	return files, nil
}

// fileHolding returns the file of files (as bodyFiles lists them) that
// holds record lsn, or nil.
func fileHolding(files []*bodyFile, lsn uint64) *bodyFile {
	i := sort.Search(len(files), func(i int) bool { return files[i].last >= lsn })
	if i < len(files) && files[i].first <= lsn {
		return files[i]
	}
	return nil
}

// compactBodies deals with the files that hold bodies once the snapshot at
// covered holds the index (steps 4 and 5 above). Each sealed log segment
// the snapshot covers wholly leaves the log: removed when no live body
// lies in it, moved to the bodies directory (renamed, nothing copied) when
// its live bodies are at least denseShare of it, else its live bodies are
// copied forward first and it is removed. Each kept segment is removed, or
// copied forward and removed, by the same rule. A copy goes through the
// sequencer in relocate records, is fsynced and sealed before any file
// that held an original goes, and rounds of relocateRound bytes bound the
// free disk it needs. A last pass checks, before a file is removed, that
// no live body names it. A deleted queue's bodies are not live: they are
// reclaimed by the same rule.
func (q *Queue) compactBodies(covered uint64) error {
	files, err := q.bodyFiles(covered)
	if err != nil {
		return fmt.Errorf("walq: compaction: %w", err)
	}
	if len(files) == 0 {
		return nil
	}
	// Live bytes per file, in pieces under the lock.
	fileOf := func(lsn uint64) *bodyFile { return fileHolding(files, lsn) }
	if err := q.eachBody(func(_ uint64, b state.BodyRef) {
		if f := fileOf(b.LSN); f != nil {
			f.live += int64(b.Len)
		}
	}); err != nil {
		return err
	}
	for _, f := range files {
		f.copy = f.live > 0 && float64(f.live) < denseShare*float64(f.size)
	}

	// Copy forward, round by round, and let go of what each round emptied.
	for {
		var want int64 // what this round would copy, at most
		for _, f := range files {
			if f.copy && f.size > 0 {
				want += f.live
			}
		}
		round := int64(relocateRound)
		if want > 0 {
			round = q.roomForCopies(want)
		}
		if want > 0 && round == 0 {
			// On a tight disk the copies would take what acks need: the
			// files are kept as they are (moved, not copied), and the
			// ones emptied are still removed.
			for _, f := range files {
				f.copy = false
			}
			q.metrics.copiesSkipped.Add(1)
			q.opts.Logger.Warn("walq: compaction copies no body forward: the disk is nearly full",
				"dir", q.dir, "watermark", q.opts.DiskWatermark)
		}
		n, err := q.relocateFrom(fileOf, max(round, 1))
		q.copiesDone()
		if err != nil {
			return err
		}
		if n > 0 {
			// The copies are durable before any file that held the
			// originals goes, whatever the sync policy; sealing the tail
			// also shows it on disk (the crash harness finds what was
			// promised that way).
			if _, err := q.log.SyncRoll(); err != nil {
				return fmt.Errorf("walq: compaction: sync relocated bodies: %w", err)
			}
		}
		if err := q.releaseFiles(files, fileOf, n == 0); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-q.done:
			return errCompactionStopped
		default:
		}
	}
}

// eachBody calls fn for every stored item whose body is in the log, in
// pieces of scanPiece items under the lock.
func (q *Queue) eachBody(fn func(id uint64, body state.BodyRef)) error {
	for next := uint64(1); ; {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return errCompactionStopped
		}
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return err
		}
		q.bodies.drainLocked(q.st)
		seen, done := 0, true
		q.st.EachBody(next, func(id uint64, b state.BodyRef) bool {
			if seen++; seen > scanPiece {
				done, next = false, id
				return false
			}
			if b.InLog() {
				fn(id, b)
			}
			return true
		})
		q.mu.Unlock()
		if done {
			return nil
		}
	}
}

// relocateFrom copies forward up to max bytes of the live bodies that lie
// in files marked copy, and returns how many it copied.
func (q *Queue) relocateFrom(fileOf func(uint64) *bodyFile, max int64) (int64, error) {
	var srcs []bodySource
	var total int64
	if err := q.eachBody(func(id uint64, b state.BodyRef) {
		// A round stays within the room set aside for it (a full round
		// may pass it by one body: its segment is set aside whole).
		if total >= max || max < relocateRound && total+int64(b.Len) > max {
			return
		}
		if f := fileOf(b.LSN); f != nil && f.copy {
			srcs = append(srcs, q.sourceLocked(id, b, false))
			total += int64(b.Len)
		}
	}); err != nil {
		return 0, err
	}
	var copied int64
	for len(srcs) > 0 {
		var piece []bodySource
		var n int64
		for len(srcs) > 0 && (n == 0 || n < relocateChunk) {
			piece = append(piece, srcs[0])
			n += int64(srcs[0].ref.Len)
			srcs = srcs[1:]
		}
		c, err := q.relocate(piece)
		if err != nil {
			return 0, err
		}
		copied += c
	}
	return copied, nil
}

// relocate reads the bodies srcs name (outside the lock, checked by their
// CRC) and appends one relocate record of those whose items still hold
// them where they were. A body that fails its check is not copied: it
// stays where it is, and its item goes to the dead letters when delivered.
func (q *Queue) relocate(srcs []bodySource) (int64, error) {
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
			continue
		}
		got = append(got, copied{src, body})
	}
	if len(got) == 0 {
		return 0, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	rec := &state.Relocate{Time: q.qt.now()}
	for _, c := range got {
		// The same record still holds it (its place in the record's
		// segment may have become known meanwhile).
		if it := q.st.Item(c.src.id); it != nil && it.Body.LSN == c.src.ref.LSN && it.Body.Len > 0 {
			rec.Items = append(rec.Items, state.Relocated{ID: c.src.id, Body: c.body})
		}
	}
	if len(rec.Items) == 0 {
		return 0, nil
	}
	n, err := q.appendRelocateLocked(rec)
	if err != nil {
		return 0, err
	}
	q.metrics.relocatedBytes.Add(n)
	return n, nil
}

// releaseFiles lets go of the files that no live body needs any more: a
// last pass counts what still lies in each (a body copied since is
// elsewhere, one that failed its check is not), then the log's covered
// front goes segment by segment, in order (removed when empty, moved to
// the bodies directory when not; a segment marked copy that still holds
// bodies waits for the next round unless final), and empty kept segments
// are removed.
func (q *Queue) releaseFiles(files []*bodyFile, fileOf func(uint64) *bodyFile, final bool) error {
	for _, f := range files {
		f.live = 0
	}
	if err := q.eachBody(func(_ uint64, b state.BodyRef) {
		if f := fileOf(b.LSN); f != nil {
			f.live += int64(b.Len)
		}
	}); err != nil {
		return err
	}
	// The pass saw the state as applied, which may hold an ack or a purge
	// not yet durable (under SyncNever, or an instant before an fsync):
	// a crash could bring such an item back, with its body in a file
	// removed here. So what the pass saw is made durable (and, by the
	// seal, seen to be) before anything is removed.
	remove := false
	for _, f := range files {
		remove = remove || (f.size > 0 && f.live == 0)
	}
	if remove {
		if _, err := q.log.SyncRoll(); err != nil {
			return fmt.Errorf("walq: compaction: sync before removing: %w", err)
		}
	}
	for _, f := range files {
		if f.kept {
			if f.live == 0 && f.size > 0 {
				if err := q.log.RemoveKept(f.first); err != nil {
					return fmt.Errorf("walq: compaction: %w", err)
				}
				f.size = 0 // gone
			}
			continue
		}
		if f.size == 0 {
			continue // left the log in an earlier round
		}
		if f.copy && f.live > 0 && !final {
			return nil // its bodies are copied in a later round; the front stays here
		}
		var err error
		if f.live == 0 {
			err = q.log.TruncateFront(f.last + 1)
		} else {
			err = q.log.MoveFront(f.last + 1)
		}
		if err != nil {
			return fmt.Errorf("walq: compaction: let segment %s go: %w", f.name, err)
		}
		f.size = 0
	}
	return nil
}

// keptBytes lists the kept segments and returns their size (0 when they
// cannot be listed: the next compaction lists them again), and keeps it
// and their number for Stats, which does not list them.
func (q *Queue) keptBytes() int64 {
	kept, err := q.log.Kept()
	if err != nil {
		return 0
	}
	var n int64
	for _, k := range kept {
		if info, err := q.opts.fs.Stat(filepath.Join(q.dir, layout.BodiesDirName, k.Name)); err == nil {
			n += info.Size()
		}
	}
	q.metrics.keptBytes.Store(n)
	q.metrics.keptFiles.Store(int64(len(kept)))
	return n
}
