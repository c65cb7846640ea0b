package walq

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/walq/walq/internal/layout"
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

// reserveStep is how far the reserve may fall short of the next
// snapshot's estimate before puts ask the compaction loop to grow it.
const reserveStep = 1 << 20

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

	snapshot int64 // a snapshot being written: the room set aside for it
	written  int64 // of which it wrote so far (counted in appended too)
	units    int   // the entries it holds (snapshotUnits)
	copies   int64 // a round of copies: its bytes not appended yet

	// reserve is the size of the RESERVE file: room set aside on the disk
	// for the next snapshot (and for a recovery's writes), which a
	// compaction on a disk without room frees to write its snapshot into.
	reserve int64
	// snapFile is the size of the newest snapshot file: room the next
	// compaction gives back once its own snapshot is written.
	snapFile int64
	// reserveStuck: the last refill stopped short for want of room; puts
	// do not ask for another until a compaction has run (and refilled).
	reserveStuck bool
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
	unreserved := q.snapshotUnreservedLocked()
	if unreserved >= max(reserveStep, q.disk.reserve/8) && !q.disk.reserveStuck {
		select { // the compaction loop grows the reserve
		case q.reserveSignal <- struct{}{}:
		default:
		}
	}
	held := q.disk.held() + unreserved
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

// roomForIDsLocked refuses, with ErrDiskFull, a call whose record names n
// items (DeleteItems, Redrive, PurgeDeadLetters) when it would leave less
// than the snapshot floor free beside what compaction set aside. Such a
// call frees room and may take the watermark's, but one record of up to
// MaxIDs IDs is larger than the watermark itself: written on a disk
// without its room it would fail the queue. Smaller calls go through.
func (q *Queue) roomForIDsLocked(call string, ids []uint64) error {
	n := len(ids)
	if q.opts.DiskWatermark < 0 || n < 1024 {
		return nil // a few IDs fit in what the tail set aside
	}
	need := int64(wal.HeaderSize + 64)
	for _, id := range ids { // as msgpack writes them
		switch {
		case id < 1<<7:
			need++
		case id < 1<<8:
			need += 2
		case id < 1<<16:
			need += 3
		case id < 1<<32:
			need += 5
		default:
			need += 9
		}
	}
	free, ok := q.freeLocked(need + q.disk.held() + q.snapshotFloor())
	if !ok || free-need-q.disk.held() >= q.snapshotFloor() {
		return nil
	}
	return fmt.Errorf("%w: %s of %d items is a record of about %d bytes, and %d bytes are free on the disk of %s (%d set aside for compaction): name fewer items in a call",
		ErrDiskFull, call, n, need, free, q.dir, q.disk.held())
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

// roomForSnapshotLocked returns an error when a snapshot of the state
// (snapshotEstimateLocked) would leave less than snapshotReserve free (a
// quarter of the watermark when smaller): the room acks and nacks need
// meanwhile. The snapshot is what lets a compaction remove the files that
// drained, so it may take the rest of the watermark's room, and the
// reserve file: when the disk has the room only with it, the reserve is
// freed for the snapshot (set aside again after the compaction,
// refillReserve). When there is room, it is set aside until
// snapshotWrittenLocked.
func (q *Queue) roomForSnapshotLocked() error {
	wm := q.opts.DiskWatermark
	if wm < 0 {
		return nil
	}
	est := q.snapshotEstimateLocked()
	free, room, err := q.snapshotRoomLocked(est)
	if err != nil {
		return err
	}
	if room {
		q.disk.snapshot, q.disk.written, q.disk.units = est, 0, snapshotUnits(q.st)
		return nil
	}
	return fmt.Errorf("no room for a snapshot of about %d bytes: %d bytes free on the disk of %s (a reserve of %d), Options.DiskWatermark %d: %w",
		est, free, q.dir, q.disk.reserve, wm, ErrDiskFull)
}

// snapshotGrowLocked is called before each piece of a snapshot goes to
// its file, with the size the file reaches with it: past the room set
// aside for the snapshot (an estimate too small: long keys, long errors),
// it sets aside more where the disk has it, the reserve's too, and
// otherwise stops the snapshot with ErrDiskFull before it takes the room
// acks need. The estimate then learns: the next is twice what this one
// reached, for its entries, and puts keep that room too.
func (q *Queue) snapshotGrowLocked(upto int64) error {
	d := &q.disk
	if q.opts.DiskWatermark < 0 || d.snapshot == 0 || upto <= d.snapshot {
		return nil
	}
	more := upto - d.snapshot + max(upto/4, 256<<10)
	free, room, err := q.snapshotRoomLocked(more)
	if err != nil {
		return err
	}
	if room {
		d.snapshot += more
		return nil
	}
	q.lastSnapBytes, q.lastSnapUnits = 2*upto, max(d.units, 1)
	return fmt.Errorf("a snapshot would pass the %d bytes set aside for it, with %d bytes free on the disk of %s: %w",
		d.snapshot, free, q.dir, ErrDiskFull)
}

// snapshotRoomLocked reports whether n more bytes of snapshot leave the
// snapshot floor free, freeing the reserve when only its room makes it so.
func (q *Queue) snapshotRoomLocked(n int64) (free int64, room bool, err error) {
	keep := q.snapshotFloor()
	free, room = q.roomLocked(n, keep)
	if !room && q.disk.reserve > 0 && free+q.disk.reserve-n-q.disk.held() >= keep {
		if err := q.releaseReserveLocked(); err != nil {
			return 0, false, err
		}
		free, room = q.roomLocked(n, keep)
	}
	return free, room, nil
}

// snapshotUnreservedLocked is what the reserve is short of its target
// (none while a snapshot is written: that one's room is held): room that
// puts leave to compaction, so that producers stopped by the watermark
// leave the next snapshot its room on the disk.
func (q *Queue) snapshotUnreservedLocked() int64 {
	if q.disk.snapshot > 0 {
		return 0
	}
	return max(0, q.reserveTargetLocked()-q.disk.reserve)
}

// reserveTargetLocked is the size the reserve file is kept at for the
// state now (at least reserveSize): the next snapshot's estimate and a
// quarter more, the room that snapshot leaves the acks (snapshotFloor),
// and, while the newest snapshot file is smaller than the estimate (none
// yet), the difference: a compaction writes its snapshot into the reserve
// and sets the reserve aside again from what the snapshot it replaces
// gives back, so that a drain on a disk that producers (or anyone) filled
// to the watermark can compact again and again.
func (q *Queue) reserveTargetLocked() int64 {
	if q.opts.DiskWatermark < 0 {
		return reserveSize // no watermark: no room kept for compaction
	}
	est := q.snapshotEstimateLocked()
	return max(reserveSize, est+est/4+q.snapshotFloor()+max(0, est-q.disk.snapFile))
}

// snapshotFloor is the free space a snapshot leaves to the acks written
// while it is: a quarter of the watermark, at most snapshotReserve.
func (q *Queue) snapshotFloor() int64 { return min(q.opts.DiskWatermark/4, snapshotReserve) }

// releaseReserveLocked removes the reserve file, for a snapshot.
func (q *Queue) releaseReserveLocked() error {
	err := q.opts.fs.Remove(filepath.Join(q.dir, layout.ReserveName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("free the reserve for a snapshot: %w", err)
	}
	q.opts.Logger.Info("walq: freed the reserve for a snapshot", "dir", q.dir, "bytes", q.disk.reserve)
	q.disk.reserve = 0
	q.rereadDiskLocked()
	return nil
}

// refillReserve grows the reserve file to its target, after a compaction
// (which may have freed it, and gave back the snapshot its own replaced),
// when puts find it short by a step, and at Open, which writes its first
// reserveSize bytes whatever the disk holds (keeping what could be, as a
// recovery on a full disk needs) and leaves the rest to the compaction
// loop. Beyond those it leaves the
// snapshot floor free: producers were held back for its room
// (snapshotUnreservedLocked), and where someone else took that room the
// reserve, which lets compaction free the disk, comes before the acks'
// last room under the watermark.
func (q *Queue) refillReserve(atOpen bool) {
	q.mu.Lock()
	target, have := q.reserveTargetLocked(), q.disk.reserve
	q.mu.Unlock()
	if have >= target || have >= reserveSize && target-have < max(reserveStep, have/8) {
		return
	}
	var err error
	n := have
	if atOpen {
		// The rest is written by the compaction loop, not before Open
		// returns: a large index would make it wait for the disk.
		if n < reserveSize {
			n, err = writeReserve(q.opts.fs, q.dir, q.opts.FileMode, reserveSize, -1)
		}
		select {
		case q.reserveSignal <- struct{}{}:
		default:
		}
	} else if target > n {
		n, err = writeReserve(q.opts.fs, q.dir, q.opts.FileMode, target, max(q.snapshotFloor(), 0))
	}
	q.mu.Lock()
	q.disk.reserve = n
	q.disk.reserveStuck = !atOpen && n < target
	q.rereadDiskLocked()
	q.mu.Unlock()
	if err != nil {
		q.opts.Logger.Warn("walq: the reserve file is short: a later recovery or snapshot on a full disk may fail", "dir", q.dir, "bytes", n, "want", target, "err", err)
	}
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

// roomForCopies returns how many of want bytes of bodies compaction may
// copy forward in a round (at most relocateRound): what leaves at least
// half the watermark free, which puts never take, so copies cannot fill
// the disk under acks; 0 when that is less than a smallest round (64 KiB,
// or want). A round that fits only in part is copied in part: each frees
// the files it empties, so the next finds more room. What it returns is
// set aside, each byte given back as a copy is appended, the rest by
// copiesDone.
func (q *Queue) roomForCopies(want int64) int64 {
	n := min(want, relocateRound)
	if q.opts.DiskWatermark < 0 {
		return n
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// A fresh reading: the snapshot and the last round's files moved the disk.
	free, room := q.roomLocked(n, q.opts.DiskWatermark/2)
	if !room {
		n = min(n, free-q.disk.held()-q.opts.DiskWatermark/2)
		if n < min(want, 64<<10) {
			return 0
		}
	}
	q.disk.copies = n
	return n
}

// copiedLocked gives back what n bytes of copies appended had set aside.
func (q *Queue) copiedLocked(n int64) { q.disk.copies = max(0, q.disk.copies-n) }

// copiesDone gives back what a round of copies set aside and did not take.
func (q *Queue) copiesDone() {
	q.mu.Lock()
	q.disk.copies = 0
	q.mu.Unlock()
}
