package wal

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Format 1: read-only, for migration.
//
// A format-1 log (walq up to 4fb10c1; its directory has no marker file) is a
// tidwall/wal log: segment files named after the index of their first entry
// in 20 decimal digits, each entry uvarint(length) followed by one record in
// the envelope of envelope.go. Nothing in it marks batch boundaries or what
// was fsynced. This build never writes format 1: it reads such a log once,
// when Open carries the directory forward to format 2, with the rules it was
// written under:
//
//   - an entry that does not frame, decode or verify at the end of the last
//     segment, with no later record after it, is a torn tail: the records
//     before it are the log (a later record is a framed entry with a good
//     CRC and a greater LSN, searched from the end the damaged entry's own
//     length prefix declares, so no body byte of the damaged entry is ever
//     taken for one);
//   - anything else bad (an older segment, a later record after the damage,
//     a record at the wrong index, a gap between segments) is corruption.
//
// An interrupted tidwall TruncateFront or TruncateBack leaves "<index>.START"
// or "<index>.END" (and ".TEMP" copies); the reader resolves them as
// tidwall/wal's Open would, without touching the files.

// tidwall/wal names a segment after the index of its first entry, in 20
// decimal digits so that names sort in index order. An interrupted
// TruncateFront leaves "<index>.START", an interrupted TruncateBack
// "<index>.END", and their temporary copies end in ".TEMP".

// Format1SegmentName returns the file name of the format-1 segment whose
// first index is index.
func Format1SegmentName(index uint64) string {
	return fmt.Sprintf("%0*d", segmentDigits, index)
}

// parseFormat1Name returns the first index of a segment file name and its
// leftover suffix ("" for a plain segment). Index 0 is never a segment, as in
// tidwall/wal.
func parseFormat1Name(name string) (first uint64, suffix string, ok bool) {
	if len(name) < segmentDigits {
		return 0, "", false
	}
	suffix = name[segmentDigits:]
	if suffix != "" && suffix != startSuffix && suffix != endSuffix {
		return 0, "", false
	}
	for _, c := range name[:segmentDigits] {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	first, err := strconv.ParseUint(name[:segmentDigits], 10, 64)
	if err != nil || first == 0 {
		return 0, "", false
	}
	return first, suffix, true
}

// Format1Segment is one format-1 segment file.
type Format1Segment = Segment

// ListFormat1Segments lists the format-1 segment files in dir (leftovers of
// interrupted truncations included, marked Leftover) sorted by name.
func ListFormat1Segments(dir string) ([]Segment, error) {
	return listFormat1(OSFS(), dir)
}

func listFormat1(fsys FS, dir string) ([]Segment, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list format-1 segments: %w", err)
	}
	var segs []Segment
	for _, e := range entries {
		first, suffix, ok := parseFormat1Name(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("list format-1 segments: %w", err)
		}
		segs = append(segs, Segment{Name: e.Name(), Path: filepath.Join(dir, e.Name()), First: first,
			Size: info.Size(), Leftover: suffix != ""})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].Name < segs[j].Name })
	return segs, nil
}

// IsFormat1Name reports whether name (in a log directory) is a file of a
// format-1 log: a segment, a truncation leftover or its temp copy.
func IsFormat1Name(name string) bool {
	if _, _, ok := parseFormat1Name(name); ok {
		return true
	}
	base, ok := strings.CutSuffix(name, tempSuffix)
	if !ok {
		return false
	}
	_, suffix, ok := parseFormat1Name(base)
	return ok && suffix != ""
}

// ScanFormat1 reads the format-1 log in dir and calls fn for every record
// with LSN >= from, in order. It verifies as format 1 did; a torn tail is
// reported in ScanResult.Tail and corruption is a *CorruptionError. It only
// reads; fromDisk makes each segment read see the disk, not the page cache
// (see readFromDisk).
func ScanFormat1(fsys FS, dir string, from uint64, fromDisk bool, logger *slog.Logger, fn func(Position, Record) error) (ScanResult, error) {
	var res ScanResult
	if fsys == nil {
		fsys = OSFS()
	}
	segs, err := listFormat1(fsys, dir)
	if err != nil {
		return res, err
	}
	segs, err = logicalSegments(dir, segs)
	if err != nil || len(segs) == 0 {
		return res, err
	}
	res.First = segs[0].First
	res.Last = res.First - 1
	var expect uint64
	for i, seg := range segs {
		last := i == len(segs)-1
		if !last && segs[i+1].First <= from {
			continue
		}
		var data []byte
		if fromDisk {
			data, err = readFromDisk(fsys, seg.Path, logger)
		} else {
			data, err = readFile(fsys, seg.Path)
		}
		if err != nil {
			return res, fmt.Errorf("read format-1 segment %s: %w", seg.Name, err)
		}
		if expect != 0 && seg.First != expect {
			return res, &CorruptionError{Dir: dir, File: seg.Name, Index: seg.First, Err: segmentMismatch(expect, seg.First)}
		}
		w, err := walkSegment(data, seg.First, func(off int, rec Record) error {
			if rec.LSN < from {
				return nil
			}
			if fn != nil {
				if err := fn(Position{File: seg.Name, Index: rec.LSN, Offset: int64(off), Frame: int64(off)}, rec); err != nil {
					return err
				}
			}
			res.Records++
			return nil
		})
		res.Last = seg.First + w.count - 1
		if err != nil {
			return res, err
		}
		if w.bad != nil {
			if last && !w.whole && laterRecordAfter(data, w.end, seg.First+w.count) < 0 {
				res.Tail = &TailInfo{File: seg.Name, Offset: int64(w.end),
					Bytes: int64(len(data) - w.end), Reason: w.bad.Error()}
				return res, nil
			}
			reason := w.bad
			if !w.whole {
				if off := laterRecordAfter(data, w.end, seg.First+w.count); off >= 0 {
					reason = reasonf("%v; a valid record follows at offset %d", w.bad, off)
				}
			}
			return res, &CorruptionError{Dir: dir, File: seg.Name, Index: seg.First + w.count,
				Offset: int64(w.end), Err: reason}
		}
		expect = seg.First + w.count
	}
	return res, nil
}

// logicalSegments resolves leftovers the way tidwall/wal's Open would,
// without touching the files: segments listed before a .START were
// truncated away, segments after an .END too.
func logicalSegments(dir string, segs []Segment) ([]Segment, error) {
	start, end := -1, -1
	for i, s := range segs {
		switch {
		case strings.HasSuffix(s.Name, startSuffix):
			start = i
		case strings.HasSuffix(s.Name, endSuffix) && end == -1:
			end = i
		}
	}
	if start != -1 && end != -1 {
		return nil, &CorruptionError{Dir: dir, File: segs[start].Name,
			Err: corruptReason("both .START and .END leftovers present")}
	}
	if start != -1 {
		segs = segs[start:]
	}
	if end != -1 {
		segs = segs[:end+1]
		if n := len(segs); n > 1 && segs[n-2].First == segs[n-1].First {
			segs = append(segs[:n-2:n-2], segs[n-1])
		}
	}
	return segs, nil
}

// nextEntry returns the tidwall/wal binary entry (uvarint length, then the
// data) at off.
func nextEntry(data []byte, off int) (entry []byte, next int, err error) {
	size, n := binary.Uvarint(data[off:])
	switch {
	case n == 0:
		return nil, off, corruptReason("incomplete entry length")
	case n < 0:
		return nil, off, corruptReason("entry length overflows")
	case size > uint64(len(data)-off-n):
		return nil, off, reasonf("entry of %d bytes runs past the end of the segment", size)
	}
	end := off + n + int(size)
	return data[off+n : end], end, nil
}

// segmentWalk is what walkSegment found in one segment.
type segmentWalk struct {
	count uint64 // records that verified, from the start of the segment
	end   int    // offset just after the last record that verified
	bad   error  // why the entry at end is bad; nil when the whole segment verified
	// whole is set when the bad entry is framed and passes its CRC, but sits
	// at the wrong index: that was written whole, so it is never a torn write.
	whole bool
}

// walkSegment verifies the records of a segment whose first index is first,
// calling fn with the offset of each entry and its record, and stops at the
// first entry that does not verify or when fn returns an error.
func walkSegment(data []byte, first uint64, fn func(off int, rec Record) error) (segmentWalk, error) {
	var w segmentWalk
	for w.end < len(data) {
		entry, next, err := nextEntry(data, w.end)
		if err != nil {
			w.bad = err
			return w, nil
		}
		rec, err := DecodeRecord(entry)
		if err != nil {
			w.bad = err
			return w, nil
		}
		if want := first + w.count; rec.LSN != want {
			w.bad, w.whole = lsnMismatch(want, rec.LSN), true
			return w, nil
		}
		if fn != nil {
			if err := fn(w.end, rec); err != nil {
				return w, err
			}
		}
		w.count++
		w.end = next
	}
	return w, nil
}

func lsnMismatch(want, got uint64) error {
	if got > want {
		return reasonf("lsn gap: want %d, got %d", want, got)
	}
	return reasonf("lsn out of order: want %d, got %d", want, got)
}

// laterRecordAfter returns the offset of the first framed entry with a good
// CRC and an LSN above want that starts where the torn-tail rule of
// repair.go lets a later write start, or -1 when there is none. bad is the
// offset of the damaged entry and want the LSN it should have carried.
//
// When the damaged entry's length prefix decodes, the search starts at the
// end that prefix declares, so that no byte of the entry's own body is ever
// taken for a record; an end past the end of data means nothing can follow.
// Only a prefix that does not decode makes the search start at bad+1.
func laterRecordAfter(data []byte, bad int, want uint64) int {
	start := bad + 1
	if size, n := binary.Uvarint(data[bad:]); n > 0 {
		if size > uint64(len(data)-bad-n) {
			return -1
		}
		start = bad + n + int(size)
	}
	for off := start; off < len(data); off++ {
		entry, _, err := nextEntry(data, off)
		// Cheap tests before the CRC, so that megabytes of garbage do not
		// cost a CRC at most offsets: the version, a type, and an LSN below
		// 2^48 (no queue writes that many records).
		if err != nil || len(entry) <= HeaderSize || entry[offVersion] != Version1 || entry[offType] == 0 ||
			entry[offLSN] != 0 || entry[offLSN+1] != 0 {
			continue
		}
		if rec, err := DecodeRecord(entry); err == nil && rec.LSN > want {
			return off
		}
	}
	return -1
}

// KeepFormat1Tail keeps the first 64 KiB of a format-1 torn tail (as
// ScanFormat1 reported it) in "<segment>.broken" beside it, without changing
// the segment, and returns the copy's name. Migration uses it: the records
// before the tail are carried forward, and the segment is removed after.
func KeepFormat1Tail(fsys FS, dir string, tail *TailInfo, perm os.FileMode) (string, error) {
	kept, err := readCutStart(fsys, filepath.Join(dir, tail.File), tail.Offset)
	if err != nil {
		return "", err
	}
	return writeBroken(fsys, dir, tail.File, kept, perm)
}
