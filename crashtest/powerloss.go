package crashtest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/walq/walq/wal"
)

// powerLoss makes the log look as a power loss could have left it, given
// that every record up to LSN durable was fsynced (and, under SyncAlways,
// nothing was reported done past it) while everything after it sat in the
// page cache:
//
//   - tidwall/wal fsyncs a segment before it creates the next, so of the
//     segments that hold records past durable, a prefix survives whole;
//   - the next one (the torn one) keeps a random prefix of what was written
//     to it, never less than what was fsynced, and the rest of its length
//     reads as zeros, as garbage, or is gone (the size never reached disk);
//   - the segments after the torn one are gone: their directory entries
//     were never fsynced.
//
// It returns a description of what it did.
func (h *harness) powerLoss(durable uint64) (string, error) {
	logDir := filepath.Join(h.queueDir, "log")
	segs, _, err := wal.ListSegments(logDir)
	if err != nil || len(segs) == 0 {
		return "no log", nil
	}
	for _, s := range segs {
		if s.Leftover {
			// A truncation was interrupted: which files are durable depends on
			// renames the simulation cannot see. Leave it to kill -9 alone.
			return "skipped: interrupted truncation", nil
		}
	}
	// k is the segment holding record durable (or the first one, when the
	// durable point is before the log, as for a fresh log).
	k := 0
	for i, s := range segs {
		if s.First <= durable {
			k = i
		}
	}
	keep := int64(0) // fsynced bytes of segment k
	if durable >= segs[k].First {
		found := false
		_, err := wal.Scan(logDir, durable, durable, func(pos wal.Position, rec wal.Record) error {
			n := wal.HeaderSize + len(rec.Body)
			keep = pos.Offset + int64(uvarintLen(uint64(n))+n)
			found = pos.File == segs[k].Name
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("the log after the kill: %w", err)
		}
		if !found {
			return "", fmt.Errorf("record %d, reported durable, is not in segment %s", durable, segs[k].Name)
		}
	}
	torn := k + h.rng.IntN(len(segs)-k)
	what := ""
	for i := len(segs) - 1; i > torn; i-- {
		if err := os.Remove(segs[i].Path); err != nil {
			return what, err
		}
		h.sum.SegmentsDropped++
		what += fmt.Sprintf("removed %s; ", segs[i].Name)
	}
	s := segs[torn]
	if torn > k {
		keep = 0
	}
	if torn > 0 && torn > k && h.rng.IntN(3) == 0 {
		// A whole segment created after the durable point, directory entry
		// and all, can vanish (but not the only one: a fresh log's first
		// segment is created and its directory fsynced by Open).
		h.sum.SegmentsDropped++
		return what + fmt.Sprintf("removed %s", s.Name), os.Remove(s.Path)
	}
	if h.cfg.PageLoss {
		return what + h.losePages(s, keep), nil
	}
	cut := keep + h.rng.Int64N(s.Size-keep+1)
	if cut == s.Size {
		return what + fmt.Sprintf("kept %s whole (%d bytes, %d fsynced)", s.Name, s.Size, keep), nil
	}
	h.sum.TailsCut++
	f, err := os.OpenFile(s.Path, os.O_WRONLY, 0)
	if err != nil {
		return what, err
	}
	defer f.Close()
	fill := s.Size - cut
	switch h.rng.IntN(3) {
	case 0:
		what += fmt.Sprintf("cut %s from %d to %d bytes (%d fsynced)", s.Name, s.Size, cut, keep)
		err = f.Truncate(cut)
	case 1:
		what += fmt.Sprintf("zeroed %s from %d to %d (%d fsynced)", s.Name, cut, s.Size, keep)
		_, err = f.WriteAt(make([]byte, fill), cut)
	default:
		what += fmt.Sprintf("garbage in %s from %d to %d (%d fsynced)", s.Name, cut, s.Size, keep)
		junk := make([]byte, fill)
		for i := range junk {
			junk[i] = byte(h.rng.Uint32())
		}
		_, err = f.WriteAt(junk, cut)
	}
	if err != nil {
		return what, err
	}
	return what, f.Close()
}

// pageSize is the unit in which the simulated page cache reaches the disk.
const pageSize = 4096

// losePages is the out-of-order power loss of Config.PageLoss, after
// pebble's crashable file system that keeps a random share of what was not
// synced: of the pages of s that hold bytes written after its last fsync
// (from keep on), each independently reached the disk or did not, and one
// that did not reads as zeros or as garbage; the file's size may also not
// have reached the disk, leaving it cut at a page boundary. The page holding
// keep itself reaches the disk whole or not at all: the disk writes pages,
// so its fsynced part stays and the rest reads as zeros when it did not.
func (h *harness) losePages(s wal.Segment, keep int64) string {
	f, err := os.OpenFile(s.Path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Sprintf("page loss in %s: %v", s.Name, err)
	}
	defer f.Close()
	size := s.Size
	if h.rng.IntN(4) == 0 {
		// The size never reached the disk past some page.
		first := keep / pageSize * pageSize
		size = min(size, first+pageSize*h.rng.Int64N((size-first)/pageSize+2))
		size = max(size, keep)
	}
	lost, zeroed := 0, 0
	for page := keep / pageSize * pageSize; page < size; page += pageSize {
		from, to := max(page, keep), min(page+pageSize, size)
		if from >= to || h.rng.IntN(2) == 0 {
			continue // this page reached the disk
		}
		lost++
		junk := make([]byte, to-from)
		if from == keep || h.rng.IntN(2) == 0 {
			zeroed++
		} else {
			for i := range junk {
				junk[i] = byte(h.rng.Uint32())
			}
		}
		if _, err := f.WriteAt(junk, from); err != nil {
			return fmt.Sprintf("page loss in %s: %v", s.Name, err)
		}
	}
	if size < s.Size {
		if err := f.Truncate(size); err != nil {
			return fmt.Sprintf("page loss in %s: %v", s.Name, err)
		}
	}
	if lost > 0 || size < s.Size {
		h.sum.TailsCut++
		h.sum.PagesLost += lost
	}
	return fmt.Sprintf("lost %d pages (%d zeroed) of %s past its fsynced %d bytes, size %d of %d", lost, zeroed, s.Name, keep, size, s.Size)
}

func uvarintLen(x uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], x)
}
