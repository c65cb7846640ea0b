package walq

import (
	"fmt"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// A full disk stops the producers, not the queue. A put that would leave
// less than Options.DiskWatermark free on the directory's disk is refused
// (ErrDiskFull, with ErrFull) before anything is appended, so the records
// that end items, and compaction, which frees the files they emptied,
// keep the room under the watermark. A user's record that still meets a
// full disk (another process took the room) fails the queue, as any failed
// write of the log does.
//
// The free space is read with statfs under the queue's lock, and the bytes
// appended since the last reading count as taken: no put of this queue
// can pass another's reading. It is read again once 1 MiB was appended,
// and at every put while the estimate is within 1 MiB of the watermark,
// so that space freed by a compaction (or by anyone) is seen at once when
// it matters.

// snapshotReserve is the most free space a snapshot leaves to the records
// written while it is (a quarter of the watermark when that is smaller).
const snapshotReserve = 1 << 20

// diskResample is how many bytes may be appended between two readings of
// the free space while it is far above the watermark.
const diskResample = 1 << 20

// diskSpace is the last reading of the directory's free disk, and what
// maintenance has set aside of it.
//
// Compaction reserves what it is about to write before it starts, and
// puts count that as taken: a snapshot its estimated size until it is
// written (less what it wrote, which the disk shows), a round of copies
// its bytes until they are appended (the records count as appended). So a
// producer cannot take, while compaction runs, the room compaction found
// it had and the acks keep. The log's own segments are preallocated
// (wal.Preallocator): the records that go into one cannot find the disk
// full, whoever else fills it.
type diskSpace struct {
	free     int64 // bytes free at the reading
	at       int64 // appended when it was taken
	appended int64 // bytes of records appended since Open
	read     bool  // a reading was taken
	refused  uint64

	snapshot int64 // a snapshot being written: its estimated size
	written  int64 // of which it wrote so far (counted in appended too)
	copies   int64 // a round of copies: its bytes not appended yet
}

// snapshotFlushed counts what a snapshot being written has handed to its
// file, flushed in all: as taken (like an append, so that the estimate
// between two readings of the disk goes down by it), and no longer held.
func (d *diskSpace) snapshotFlushed(flushed int64) {
	if flushed > d.written {
		d.appended += flushed - d.written
		d.written = flushed
	}
}

// held is what maintenance has set aside and not written yet.
func (d *diskSpace) held() int64 { return max(0, d.snapshot-d.written) + d.copies }

// freeLocked returns the free space of the directory's disk as it stands
// after what was appended since the last reading, reading it again when
// the estimate comes near limit; ok is false where it cannot be read.
func (q *Queue) freeLocked(limit int64) (free int64, ok bool) {
	d := &q.disk
	since := d.appended - d.at
	est := d.free - since
	if !d.read || since >= diskResample || est < limit+diskResample {
		f, ok := diskFree(q.dir)
		if !ok {
			return 0, false
		}
		d.free, d.at, d.read = f, d.appended, true
		est = f
	}
	return est, true
}

// checkDiskLocked refuses n items whose record takes about need bytes
// (bodies, keys and each item's fields) when it would take the disk below
// the watermark.
func (q *Queue) checkDiskLocked(n int, need int64) error {
	wm := q.opts.DiskWatermark
	if wm < 0 || n == 0 {
		return nil
	}
	need += wal.HeaderSize + 64 // the record's header and the frame's, roughly
	held := q.disk.held()
	free, ok := q.freeLocked(wm + need + held)
	if !ok || free-need-held >= wm {
		return nil
	}
	q.disk.refused++
	if held > 0 {
		return fmt.Errorf("%w: %w: %d bytes free on the disk of %s, %d of them set aside for compaction; %d items in a record of about %d bytes would leave less than Options.DiskWatermark (%d)",
			ErrFull, ErrDiskFull, free, q.dir, held, n, need, wm)
	}
	return fmt.Errorf("%w: %w: %d bytes free on the disk of %s; %d items in a record of about %d bytes would leave less than Options.DiskWatermark (%d)",
		ErrFull, ErrDiskFull, free, q.dir, n, need, wm)
}

// rereadDiskLocked makes the next check read the free space again: called
// when the queue wrote or removed files outside the log (a snapshot, a
// compaction's removals), which the bytes appended do not count.
func (q *Queue) rereadDiskLocked() { q.disk.read = false }

// roomLocked reads the free space now and reports whether n more bytes
// leave at least keep of it (always where it cannot be read).
func (q *Queue) roomLocked(n, keep int64) (free int64, room bool) {
	q.rereadDiskLocked()
	free, ok := q.freeLocked(0)
	return free, !ok || free-n-q.disk.held() >= keep
}

// roomForSnapshotLocked returns an error when a snapshot of the state, of
// about the size of the last one or 64 bytes an item, would leave less
// than snapshotReserve free: the room acks and nacks need meanwhile. The
// snapshot is what lets a compaction remove the files that drained, so it
// may take the rest of the watermark's room. When there is room, it is
// set aside until snapshotWrittenLocked.
func (q *Queue) roomForSnapshotLocked() error {
	wm := q.opts.DiskWatermark
	if wm < 0 {
		return nil
	}
	est := q.snapshotEstimateLocked()
	free, room := q.roomLocked(est, min(wm/4, snapshotReserve))
	if room {
		q.disk.snapshot, q.disk.written = est, 0
		return nil
	}
	return fmt.Errorf("no room for a snapshot of about %d bytes: %d bytes free on the disk of %s, Options.DiskWatermark %d: %w",
		est, free, q.dir, wm, ErrDiskFull)
}

// snapshotUnits counts what a snapshot of st holds an entry for: its
// items and the keys still held after their items went.
func snapshotUnits(st *state.State) int { return st.TotalLen() + st.KeysReleased() }

// snapshotEstimateLocked is about what a snapshot of the state now takes:
// the last snapshot's size per entry times the entries now (keys can make
// an entry far larger than the item's fields), and at least 64 bytes an
// entry. A queue drained since the last snapshot asks for what its
// snapshot now takes, not for the backlog's.
func (q *Queue) snapshotEstimateLocked() int64 {
	units := int64(snapshotUnits(q.st))
	est := units * 64
	if q.lastSnapUnits > 0 {
		est = max(est, q.lastSnapBytes*units/int64(q.lastSnapUnits))
	}
	return est + 4<<10 // the header, the queues and their settings
}

// snapshotWrittenLocked gives back what roomForSnapshotLocked set aside.
func (q *Queue) snapshotWrittenLocked() { q.disk.snapshot, q.disk.written = 0, 0 }

// roomForCopies reports whether compaction may copy n bytes of bodies
// forward: while at least half the watermark stays free, which puts never
// take, so copies cannot fill the disk under acks. When there is room, the
// n bytes are set aside, each given back as a copy is appended, the rest
// by copiesDone.
func (q *Queue) roomForCopies(n int64) bool {
	if q.opts.DiskWatermark < 0 {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// A fresh reading: the snapshot and the last round's files moved the disk.
	_, room := q.roomLocked(n, q.opts.DiskWatermark/2)
	if room {
		q.disk.copies = n
	}
	return room
}

// copiedLocked gives back what n bytes of copies appended had set aside.
func (q *Queue) copiedLocked(n int64) { q.disk.copies = max(0, q.disk.copies-n) }

// copiesDone gives back what a round of copies set aside and did not take.
func (q *Queue) copiesDone() {
	q.mu.Lock()
	q.disk.copies = 0
	q.mu.Unlock()
}
