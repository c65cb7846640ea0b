package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/walq/walq/wal"
)

// logReader reads a queue's log read-only: a format-2 log with wal.Scan,
// every segment checked against the directory ID of the marker, or a
// format-1 log with wal.ScanFormat1.
type logReader struct {
	dir     string    // the log directory
	format1 bool      // read it as format 1
	want    wal.DirID // format 2: the ID every segment must carry (zero: not known)
}

// errStopFormat1 ends a format-1 scan at its "to".
var errStopFormat1 = errors.New("stop")

// scan calls fn for the records with from <= LSN <= to (to 0: to the end),
// as wal.Scan does. A format-2 segment of another directory is a
// *wal.CorruptionError naming it. A format-1 segment that vanishes while
// it is read is reported as wal.ErrCompacted, so that the caller starts
// over as it does when a format-2 log is truncated under it.
func (lr *logReader) scan(from, to uint64, fn func(wal.Position, wal.Record) error) (wal.ScanResult, error) {
	if lr.format1 {
		return lr.scanFormat1(from, to, fn)
	}
	segs, _, err := wal.ListSegments(lr.dir)
	if err != nil {
		return wal.ScanResult{}, err
	}
	if err := lr.checkDirs(segs, from, to); err != nil {
		return wal.ScanResult{}, err
	}
	res, err := wal.Scan(lr.dir, from, to, fn)
	if err == nil && !lr.want.IsZero() && !res.Dir.IsZero() && res.Dir != lr.want {
		// Only when segments were replaced after checkDirs read them.
		err = &wal.CorruptionError{Dir: lr.dir, Err: fmt.Errorf("the segments read belong to directory %s, but the marker says %s", res.Dir, lr.want)}
	}
	return res, err
}

// checkDirs reads the header of every segment wal.Scan reads for
// [from, to] and refuses one that verifies but carries another directory's
// ID. wal.Scan checks that every segment carries the ID of the first one it
// reads, but knows nothing of the marker: a single segment copied in from
// another queue would pass, and a copied-in first segment would make it
// blame the segment after it.
func (lr *logReader) checkDirs(segs []wal.Segment, from, to uint64) error {
	if lr.want.IsZero() {
		return nil
	}
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].First <= from || to != 0 && s.First > to {
			continue // wal.Scan does not read it
		}
		id, ok, err := segmentDir(s.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // truncated away; wal.Scan starts over
		}
		if err != nil {
			return fmt.Errorf("read segment header %s: %w", s.Name, err)
		}
		if ok && id != lr.want {
			return &wal.CorruptionError{Dir: lr.dir, File: s.Name, Index: s.First, Offset: segOffDir,
				Err: fmt.Errorf("segment of directory %s, but this directory is %s: copied in from another queue", id, lr.want)}
		}
	}
	return nil
}

// The parts of the format-2 layout (wal/format.go, frozen) this tool reads
// itself: the directory ID in a segment header, and a frame header's
// fields. wal.Scan verifies both before this tool reads them; the header
// is read again here only for what wal does not return.
const (
	segmentMagic   = "WALQLOG\n"
	segOffDir      = 12
	segOffCRC      = 52
	frameMagic     = "WQF2"
	frOffCount     = 4
	frOffFirst     = 8
	frOffWatermark = 16
	frOffPayload   = 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentDir returns the directory ID in a segment's header; ok is false
// when the header does not verify (wal.Scan says why).
func segmentDir(path string) (id wal.DirID, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return id, false, err
	}
	defer f.Close()
	var h [wal.SegmentHeaderSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		if errors.Is(err, io.EOF) {
			return id, false, nil
		}
		return id, false, err
	}
	if string(h[:len(segmentMagic)]) != segmentMagic ||
		binary.BigEndian.Uint32(h[segOffCRC:]) != crc32.Checksum(h[:segOffCRC], castagnoli) {
		return id, false, nil
	}
	copy(id[:], h[segOffDir:])
	return id, true, nil
}

func (lr *logReader) scanFormat1(from, to uint64, fn func(wal.Position, wal.Record) error) (wal.ScanResult, error) {
	res, err := wal.ScanFormat1(nil, lr.dir, from, false, nil, func(pos wal.Position, rec wal.Record) error {
		if to != 0 && rec.LSN > to {
			return errStopFormat1
		}
		if fn == nil {
			return nil
		}
		return fn(pos, rec)
	})
	if err == errStopFormat1 {
		err = nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(lr.dir); serr == nil {
			err = fmt.Errorf("%w: a format-1 segment vanished while it was read (%v)", wal.ErrCompacted, err)
		}
	}
	return res, err
}

// segments lists the log's segment files (format 1: with the leftovers of
// interrupted truncations, marked Leftover).
func (lr *logReader) segments() ([]wal.Segment, error) {
	if lr.format1 {
		return wal.ListFormat1Segments(lr.dir)
	}
	segs, _, err := wal.ListSegments(lr.dir)
	return segs, err
}

// segmentName is the name of the segment whose first LSN is lsn.
func (lr *logReader) segmentName(lsn uint64) string {
	if lr.format1 {
		return wal.Format1SegmentName(lsn)
	}
	return wal.SegmentName(lsn)
}

// start returns the LSN of the log's first record as its files are named,
// without reading them (1 for a log with no segment yet). In a format-1
// log an interrupted TruncateFront leaves "<index>.START", which then is
// the start.
func (lr *logReader) start() (uint64, error) {
	segs, err := lr.segments()
	if errors.Is(err, fs.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	if len(segs) == 0 {
		return 1, nil
	}
	first := segs[0].First
	for _, s := range segs {
		if strings.HasSuffix(s.Name, ".START") {
			first = s.First
		}
	}
	return first, nil
}

// exists reports whether the log directory exists.
func (lr *logReader) exists() bool {
	_, err := os.Stat(lr.dir)
	return !errors.Is(err, fs.ErrNotExist)
}

// frameInfo is a frame header, as this tool reads it.
type frameInfo struct {
	Segment   string
	Offset    int64
	Records   uint32
	First     uint64
	Watermark uint64
	Size      int64
}

func (f frameInfo) last() uint64 { return f.First + uint64(f.Records) - 1 }

// frameReader reads the headers of frames wal.Scan has verified, to give
// what it does not return: the watermark, the count and the size.
type frameReader struct {
	dir  string
	name string
	f    *os.File
}

// header reads the header of the frame holding the record at pos. A
// segment that vanished was truncated away: that is wal.ErrCompacted.
func (fr *frameReader) header(pos wal.Position) (frameInfo, error) {
	if fr.f == nil || fr.name != pos.File {
		fr.close()
		f, err := os.Open(filepath.Join(fr.dir, pos.File))
		if errors.Is(err, fs.ErrNotExist) {
			return frameInfo{}, fmt.Errorf("%w: segment %s vanished", wal.ErrCompacted, pos.File)
		}
		if err != nil {
			return frameInfo{}, err
		}
		fr.f, fr.name = f, pos.File
	}
	var h [wal.FrameHeaderSize]byte
	if _, err := fr.f.ReadAt(h[:], pos.Frame); err != nil {
		return frameInfo{}, fmt.Errorf("read the frame at offset %d of segment %s: %w", pos.Frame, pos.File, err)
	}
	fi := frameInfo{Segment: pos.File, Offset: pos.Frame,
		Records:   binary.BigEndian.Uint32(h[frOffCount:]),
		First:     binary.BigEndian.Uint64(h[frOffFirst:]),
		Watermark: binary.BigEndian.Uint64(h[frOffWatermark:]),
		Size:      wal.FrameHeaderSize + int64(binary.BigEndian.Uint32(h[frOffPayload:]))}
	if string(h[:len(frameMagic)]) != frameMagic || fi.Records == 0 || pos.Index < fi.First || pos.Index > fi.last() {
		return fi, fmt.Errorf("the frame at offset %d of segment %s does not hold record %d as it did when it was verified",
			pos.Frame, pos.File, pos.Index)
	}
	return fi, nil
}

func (fr *frameReader) close() {
	if fr.f != nil {
		fr.f.Close()
		fr.f = nil
	}
}
