package wal

// The recovery rule: what Open cuts, and what it refuses.
//
// Frames are written one at a time, each by one write, at the end of the
// newest segment; a segment is fsynced (and the next one's header with its
// directory entry) before the next segment gets a frame. Each frame carries
// a watermark: the last LSN known fsynced when it was written. A record is
// promised durable once it is at or below some watermark, at or below the
// covered LSN of a snapshot (Options.MustReach), or in a segment older than
// the newest. The MAC of every frame header is keyed with its segment's
// salt, so a frame that verifies was written by this log as a frame, never
// by a producer inside a body.
//
// Open walks the frames of each segment from its header. At the first frame
// that does not verify (a bad magic, MAC, LSN, record header or body CRC, or
// a frame that runs past the end of the file) it looks for the highest
// watermark the segment states: that of every frame before the damage, of
// the damaged frame's own header when it verifies (it may fail only on its
// LSN, a record header or a body), and of every frame header after it that
// verifies (found by trying each offset
// that holds the frame magic; a copy of a real frame in a body is a real
// frame's true statement, so it may count too). Then:
//
//	damage at LSN N in                          watermark W stated on disk   Open
//	------------------------------------------  ---------------------------  -------------------------------
//	the newest segment                          N > W (nothing at N promised) cut from the damaged frame on
//	the newest segment                          N <= W                        refuse: *CorruptionError
//	an older segment                            (all of it promised)          refuse: *CorruptionError
//	a segment header (any segment)              (written and fsynced first)   refuse: *CorruptionError
//	a log shorter than MustReach                                              refuse: *CorruptionError
//
// Cases this covers, by cause:
//
//   - kill -9 during a write: the file keeps a prefix of the frame, which
//     runs past its end; it was never fsynced, so N > W: cut. Under
//     SyncNever and SyncInterval, frames written before the kill are whole
//     in the page cache and survive as they are: nothing is cut.
//   - power loss with an unsynced range whose pages reached the disk in any
//     order (zeros, stale bytes or the right bytes per page): the first
//     damaged frame is unsynced, and so is every frame after it, whose
//     watermarks are below it: cut there, even when later frames are whole
//     (they cannot be kept without the records before them).
//   - bit rot in a record that a later frame's watermark covers, or in an
//     older segment: refused, because cutting would drop records callers
//     were told are durable. Nothing on disk changes.
//   - a body that embeds copies of real frames (of this queue or any other):
//     a copy inside a frame that verifies is skipped with its body; after
//     damage, a copy's watermark is the watermark its original stated, a
//     true fact, so it never makes an unpromised record look promised.
//
// The one case the rule cannot tell apart: bit rot in the newest frames
// when no frame was written after the last fsync. Under SyncAlways the last
// batch is promised once its fsync returns, and no frame states that until
// the next batch is written; damage there (which a crash cannot cause: it
// was fsynced) is cut as if torn. Compaction and Close write nothing that
// would state it either.
//
// Cutting: Open copies the first brokenKeep bytes (64 KiB) of what it cuts
// to "<segment>.broken" ("<segment>.broken.N" when that exists, so an
// earlier copy is never overwritten) and fsyncs the copy, truncates the
// segment to the end of its last whole frame, fsyncs it, and logs the full
// length cut (OpenInfo.CutBytes has it too). The copy is bounded and best
// effort: when it cannot be written (a full disk is the likely reason after
// a torn write) the partial copy is removed, a warning logged, and the cut
// goes ahead, so a full disk never stops the open. A refused open changes
// nothing on disk.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
)

// verdict is the rule's answer for damage found by walkFrames.
type verdict struct {
	cut       bool
	watermark uint64 // highest LSN stated promised
	later     int    // frames after the damage that verified
	laterAt   int64  // offset of the first of them, -1 when none
	statedAt  int64  // offset of the frame whose watermark is the highest, -1 when it came from elsewhere
}

// judgeDamage applies the rule above to the damage w stopped at. promised
// is the LSN known promised from outside the segment's frames.
func judgeDamage(data []byte, hdr segmentHeader, w frameWalk, promised uint64) verdict {
	v := verdict{watermark: max(promised, w.watermark), laterAt: -1, statedAt: -1}
	m := newMacer(hdr.salt)
	// The damaged frame's own header states a watermark too when it
	// verifies (the frame failed on its LSN, a record or a body): a frame
	// at the wrong LSN, after a lost one, can be the only statement that
	// the lost records were fsynced. It is not a later frame.
	if h, err := checkFrameHeader(m, data[w.end:]); err == nil && h.watermark > v.watermark {
		v.watermark, v.statedAt = h.watermark, w.end
	}
	magic := []byte(frameMagic)
	for off := w.end + 1; off+FrameHeaderSize <= int64(len(data)); off++ {
		i := bytes.Index(data[off:], magic)
		if i < 0 {
			break
		}
		off += int64(i)
		h, err := checkFrameHeader(m, data[off:])
		if err != nil {
			continue
		}
		if v.later == 0 {
			v.laterAt = off
		}
		v.later++
		if h.watermark > v.watermark {
			v.watermark, v.statedAt = h.watermark, off
		}
	}
	v.cut = w.next > v.watermark
	return v
}

// reason says why damage is refused.
func (v verdict) reason(last bool, w frameWalk) error {
	switch {
	case !last:
		return reasonf("%v, in a segment older than the newest (all of it was fsynced)", w.bad)
	case v.statedAt >= 0:
		return reasonf("%v; the frame at offset %d states records up to %d were fsynced", w.bad, v.statedAt, v.watermark)
	default:
		return reasonf("%v; records up to %d were promised durable", w.bad, v.watermark)
	}
}

// brokenKeep bounds the .broken copy of a cut tail. A torn PutBatch can be
// tens of megabytes, and a copy of all of it could fill the disk that the cut
// is meant to bring back into service; the first bytes (the damaged entry's
// length prefix, header and LSN, and what follows them) are the evidence
// worth keeping.
const brokenKeep = 64 << 10

// cutTornTail applies rule 1 of the torn-tail policy to the tail Scan
// reported and returns the name of the .broken copy ("" when none could be
// written: the copy is evidence, never a reason to refuse the open).
func cutTornTail(fsys FS, dir string, tail *TailInfo, perm os.FileMode, logger *slog.Logger) (string, error) {
	segPath := filepath.Join(dir, tail.File)
	kept, err := readCutStart(fsys, segPath, tail.Offset)
	if err != nil {
		return "", fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	broken, err := writeBroken(fsys, dir, tail.File, kept, perm)
	if err != nil {
		logger.Warn("walq: could not keep a copy of the torn tail; cutting it all the same",
			"dir", dir, "segment", tail.File, "offset", tail.Offset, "bytes", tail.Bytes, "err", err)
		broken = ""
	}
	f, err := fsys.OpenFile(segPath, os.O_WRONLY, perm)
	if err != nil {
		return broken, fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	err = f.Truncate(tail.Offset)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return broken, fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	return broken, nil
}

// readCutStart reads the first brokenKeep bytes from offset on.
func readCutStart(fsys FS, path string, offset int64) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() < offset {
		return nil, fmt.Errorf("shrank to %d bytes, below the cut at %d", info.Size(), offset)
	}
	kept := make([]byte, min(info.Size()-offset, brokenKeep))
	if _, err := f.ReadAt(kept, offset); err != nil {
		return nil, err
	}
	return kept, nil
}

// writeBroken saves kept durably under a name no earlier repair used. When
// it fails it removes what it created, so a failed copy leaves nothing
// behind (and a later repair does not number around it).
func writeBroken(fsys FS, dir, segment string, kept []byte, perm os.FileMode) (string, error) {
	for n := 0; ; n++ {
		name := segment + ".broken"
		if n > 0 {
			name += "." + strconv.Itoa(n)
		}
		path := filepath.Join(dir, name)
		f, err := fsys.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(kept)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if rerr := fsys.Remove(path); rerr != nil {
				return "", fmt.Errorf("%w (and removing the partial copy %s: %v)", err, name, rerr)
			}
			return "", err
		}
		return name, nil
	}
}
