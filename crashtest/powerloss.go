package crashtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// Power loss. After the kill, the harness makes the log look as a power
// loss could have left it. It damages only what it cannot show was
// fsynced, and it holds the queue to exactly what it can show was: a
// completion counts as promised (the ledger's "done") only when everything
// it wrote is at or below the fsynced LSN computed here, and every record
// at or below it is kept byte for byte.
//
// What was fsynced, as an LSN F, is the largest of:
//
//   - the floor: every record on disk when the child started. After the
//     previous power loss the files are what the disk holds, and after the
//     parent's check the queue was closed, which fsyncs (and recovery
//     itself fsyncs each segment before it reads it);
//   - under SyncAlways, the DurableLSN the child read after a call
//     returned (Stats().DurableLSN is the committer's fsynced LSN under
//     SyncAlways; under SyncInterval and SyncNever it is only what was
//     written to the OS, so it does not count);
//   - the LSN of every snapshot on disk: compaction syncs the log and
//     writes the snapshot at the LSN that sync returned;
//   - the highest watermark any frame on disk states: the log writes into
//     each frame the last LSN fsynced at that moment (wal/format.go), so a
//     watermark is a fact about the disk, whatever the policy; this is what
//     shows the fsyncs of SyncInterval's timer and of Sync calls. That
//     includes the authentic header of a frame the kill tore (a large
//     write is cut short by SIGKILL at a page) and copies of frames inside
//     bodies past the last whole frame: recovery reads them too;
//   - the first LSN of the newest segment, less one: a segment is fsynced
//     whole before the next one is created.
//
// In bytes: segments older than the newest are whole on the disk, and in
// the newest (the tail) everything up to the end of the frame that holds F
// was written before the fsync that made F durable, so it is on the disk;
// and so is the segment's header (fsynced, with its directory entry,
// before any frame). Past that offset, keep, nothing is known to have
// reached the disk: that range is what a power loss may damage. Bytes in
// it may in fact have been fsynced (a SyncAlways batch whose fsync returned
// just before the kill, before the child could report it; a timer fsync
// that no later frame states); damaging them gives the state a power loss
// a moment earlier, before that fsync, would have left, and the ledger
// trusts none of the calls that wrote them, so the check stays exact.
//
// The tail is then damaged in one of two ways. The plain power loss
// (Config.PowerLoss) cuts it at a random offset at or past keep and fills
// the rest with zeros, garbage or nothing. The page loss
// (Config.PageLoss), in the manner of pebble's crashable file system that
// keeps a random share of unsynced writes, keeps a random subset of the
// 4 KiB pages from keep on and replaces each of the others with zeros or
// garbage (chosen per page), and sometimes also cuts the file at a random
// page boundary (the size never reached the disk), sometimes keeps its
// length with the holes inside. A tail that holds no frame at all may also
// vanish, its directory entry not yet durable (a kill between its rename
// and the directory fsync): nothing in it was written.
//
// Nothing else is touched: not the snapshots, not older segments, not the
// report files.

// fsyncedPoint is what the harness knows fsynced after a kill.
type fsyncedPoint struct {
	lsn  uint64 // F above
	why  string // which source gave it
	segs []wal.Segment
	tail *segmentFile // the newest segment, parsed; nil when there is no log
	// data is the tail's bytes after the kill.
	data []byte
}

// fsynced computes the fsynced point after a kill. always says whether the
// child ran under SyncAlways.
func (h *harness) fsynced(events []event, always bool) (fsyncedPoint, error) {
	p := fsyncedPoint{lsn: h.floor, why: "on disk at the child's start"}
	raise := func(lsn uint64, why string) {
		if lsn > p.lsn {
			p.lsn, p.why = lsn, why
		}
	}
	if always {
		for _, ev := range events {
			if ev.kind == 'D' || ev.kind == 'R' {
				raise(ev.dlsn, "reported durable under SyncAlways")
			}
		}
	}
	snaps, err := listSnapshotLSNs(h.queueDir)
	if err != nil {
		return p, err
	}
	for _, lsn := range snaps {
		raise(lsn, "a snapshot covers it")
	}
	logDir := filepath.Join(h.queueDir, layout.LogDirName)
	p.segs, _, err = wal.ListSegments(logDir)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil // killed before the log directory was made
	}
	if err != nil || len(p.segs) == 0 {
		return p, err
	}
	for i, s := range p.segs {
		seg, data, err := readSegmentFile(s.Path)
		if err != nil {
			return p, fmt.Errorf("segment %s after the kill: %w", s.Name, err)
		}
		raise(seg.watermark(), "a frame's watermark in "+s.Name)
		if seg.bad != "" {
			// A frame the kill tore (a large write cut short) still has
			// its authentic header, and its watermark is as much a fact:
			// recovery reads it, and refuses a log whose records up to it
			// are damaged. So do copies of the segment's frames inside
			// bodies: each states what was fsynced when it was written.
			for _, f := range authenticHeaders(data, seg.end, seg.salt) {
				raise(f.watermark, "the watermark of an authentic frame header past the last whole frame of "+s.Name)
			}
		}
		if i == len(p.segs)-1 {
			p.tail, p.data = seg, data
			raise(seg.first-1, "a newer segment was created after it")
		}
	}
	return p, nil
}

// keepOffset returns the tail's bytes that were fsynced: up to the end of
// the frame that holds the fsynced LSN, or the header alone when that LSN
// lies before the tail. An fsynced LSN past the tail's last whole frame is
// a promised record missing after a kill alone: an error.
func (p *fsyncedPoint) keepOffset() (int64, error) {
	t := p.tail
	if p.lsn < t.first {
		return segHeaderSize, nil
	}
	f, ok := t.frameHolding(p.lsn)
	if !ok {
		return 0, fmt.Errorf("record %d was fsynced (%s) but the tail %s holds records %d..%d (then: %s)",
			p.lsn, p.why, p.segs[len(p.segs)-1].Name, t.first, t.last(), t.bad)
	}
	return f.end, nil
}

// powerLoss applies a power loss to the log after the kill, given what was
// fsynced, and sets the floor for the next child. It returns a description
// of what it did.
func (h *harness) powerLoss(p fsyncedPoint) (string, error) {
	if p.tail == nil {
		return "no log", nil
	}
	keep, err := p.keepOffset()
	if err != nil {
		return "", err
	}
	tail := p.segs[len(p.segs)-1]
	h.floor = p.lsn // raised below to what the damaged tail still holds
	if len(p.tail.frames) == 0 && p.tail.size == segHeaderSize && len(p.segs) > 1 && h.rng.IntN(3) == 0 {
		h.sum.SegmentsDropped++
		return fmt.Sprintf("removed %s, which held no frame (F=%d: %s)", tail.Name, p.lsn, p.why), os.Remove(tail.Path)
	}
	h.sum.UnsyncedBytes += p.tail.size - keep
	var what string
	if h.cfg.PageLoss {
		what, err = h.losePages(tail, p.data, keep)
	} else {
		what, err = h.cutTail(tail, p.data, keep)
	}
	if err != nil {
		return what, err
	}
	// The next child starts from what the disk now holds: the frames that
	// verify from the header on.
	after, data, err := readSegmentFile(tail.Path)
	if err != nil {
		return what, fmt.Errorf("the tail after the power loss: %w", err)
	}
	if after.last() < p.lsn {
		return what, fmt.Errorf("the simulation damaged fsynced record %d: the tail verifies to %d only", p.lsn, after.last())
	}
	h.floor = after.last()
	if after.bad != "" {
		if n := framesAfter(data, after.end+1, after.salt); n > 0 {
			h.sum.FramesPastHoles += n
			h.sum.Holes++
			what += fmt.Sprintf("; %d authentic frame headers lie past the damage at %d", n, after.end)
		}
	}
	return fmt.Sprintf("%s (fsynced: LSN %d, %s, %d bytes of %s)", what, p.lsn, p.why, keep, tail.Name), nil
}

// cutTail is the plain power loss: the tail keeps a random prefix of what
// was written to it, never less than keep, and the rest of its length reads
// as zeros, as garbage, or is gone.
func (h *harness) cutTail(s wal.Segment, data []byte, keep int64) (string, error) {
	size := int64(len(data))
	cut := keep + h.rng.Int64N(size-keep+1)
	if cut == size {
		return fmt.Sprintf("kept %s whole (%d bytes)", s.Name, size), nil
	}
	h.sum.TailsCut++
	f, err := os.OpenFile(s.Path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var what string
	switch h.rng.IntN(3) {
	case 0:
		what = fmt.Sprintf("cut %s from %d to %d bytes", s.Name, size, cut)
		err = f.Truncate(cut)
	case 1:
		what = fmt.Sprintf("zeroed %s from %d to %d", s.Name, cut, size)
		_, err = f.WriteAt(make([]byte, size-cut), cut)
	default:
		what = fmt.Sprintf("garbage in %s from %d to %d", s.Name, cut, size)
		_, err = f.WriteAt(h.garbage(int(size-cut)), cut)
	}
	if err != nil {
		return what, err
	}
	return what, f.Close()
}

// pageSize is the unit in which the simulated page cache reaches the disk.
const pageSize = 4096

// losePages is the page loss of Config.PageLoss. Of the pages that hold
// bytes from keep on, each independently reached the disk or did not, with
// a share kept that is drawn per power loss (sometimes none, sometimes
// all); one that did not reads as zeros or as garbage. The page holding
// keep, when keep is inside it, is special: its bytes before keep are on
// the disk (they were fsynced with it), so when it did not reach the disk
// again only its bytes from keep on are lost, and they read as zeros (the
// page was written whole at that fsync, past the file's end then). Half the time the file keeps
// its length, holes and all; otherwise its size did not reach the disk
// past a random page boundary at or after keep (or keep itself, when that
// boundary is below it).
func (h *harness) losePages(s wal.Segment, data []byte, keep int64) (string, error) {
	f, err := os.OpenFile(s.Path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	size := int64(len(data))
	if size == keep {
		return fmt.Sprintf("nothing past the fsynced %d bytes of %s", keep, s.Name), nil
	}
	first := keep / pageSize * pageSize
	pages := (size - first + pageSize - 1) / pageSize
	newSize := size
	if h.rng.IntN(2) == 0 {
		newSize = max(keep, first+pageSize*h.rng.Int64N(pages+1))
	}
	keepPct := []int{0, 25, 50, 75, 100}[h.rng.IntN(5)]
	lost, zeroed := 0, 0
	for page := first; page < newSize; page += pageSize {
		from, to := max(page, keep), min(page+pageSize, newSize)
		if h.rng.IntN(100) < keepPct {
			continue // this page reached the disk
		}
		lost++
		junk := make([]byte, to-from)
		if (from == keep && keep%pageSize != 0) || h.rng.IntN(2) == 0 {
			zeroed++
		} else {
			junk = h.garbage(len(junk))
		}
		if _, err := f.WriteAt(junk, from); err != nil {
			return "", err
		}
	}
	if newSize < size {
		if err := f.Truncate(newSize); err != nil {
			return "", err
		}
	}
	if lost > 0 || newSize < size {
		h.sum.TailsCut++
		h.sum.PagesLost += lost
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return fmt.Sprintf("lost %d of %d pages (%d zeroed, %d%% kept) of %s past its fsynced %d bytes, size %d of %d",
		lost, pages, zeroed, keepPct, s.Name, keep, newSize, size), nil
}

func (h *harness) garbage(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(h.rng.Uint32())
	}
	return b
}
