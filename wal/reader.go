package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// This file reads segments without ever writing: it never calls wal.Open
// (which creates directories, opens the tail for writing and renames or
// removes leftovers), so walq-inspect can run it next to a live queue.

// tidwall/wal names a segment after the index of its first entry, in 20
// decimal digits so that names sort in index order. An interrupted
// TruncateFront leaves "<index>.START", an interrupted TruncateBack
// "<index>.END", and their temporary copies end in ".TEMP".
const (
	segmentDigits = 20
	startSuffix   = ".START"
	endSuffix     = ".END"
	tempSuffix    = ".TEMP"
)

// SegmentName returns the file name of the segment whose first index is
// index.
func SegmentName(index uint64) string {
	return fmt.Sprintf("%0*d", segmentDigits, index)
}

// parseSegmentName returns the first index of a segment file name and its
// leftover suffix ("" for a plain segment). Index 0 is never a segment, as in
// tidwall/wal.
func parseSegmentName(name string) (first uint64, suffix string, ok bool) {
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

// Segment is one segment file.
type Segment struct {
	Name     string
	Path     string
	First    uint64 // index of its first record, from the name
	Size     int64
	Leftover bool // a .START or .END file of an interrupted truncation
}

// ListSegments lists the segment files in dir sorted by First (for equal
// First, the plain segment before its leftover, the order tidwall/wal
// resolves leftovers in), and the names of every other entry: temporary
// files, .broken copies, snapshots, foreign files.
func ListSegments(dir string) ([]Segment, []string, error) {
	return listSegments(OSFS(), dir)
}

func listSegments(fsys FS, dir string) ([]Segment, []string, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list segments: %w", err)
	}
	var segs []Segment
	var others []string
	for _, e := range entries {
		name := e.Name()
		first, suffix, ok := parseSegmentName(name)
		if !ok || e.IsDir() {
			others = append(others, name)
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed by a concurrent TruncateFront
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list segments: %w", err)
		}
		segs = append(segs, Segment{
			Name:     name,
			Path:     filepath.Join(dir, name),
			First:    first,
			Size:     info.Size(),
			Leftover: suffix != "",
		})
	}
	// Names share a 20-digit prefix, so name order is First order with the
	// plain segment first; ReadDir sorts already, this only makes it explicit.
	sort.Slice(segs, func(i, j int) bool { return segs[i].Name < segs[j].Name })
	return segs, others, nil
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

// Position says where a record is.
type Position struct {
	File   string // segment file name
	Index  uint64 // log index, equal to the record's LSN
	Offset int64  // offset of the entry (its length prefix) in File
}

// ScanResult summarizes a Scan.
type ScanResult struct {
	First   uint64    // index the log starts at (the first segment's first index)
	Last    uint64    // index of the last record verified (First-1 when none)
	Records int       // records passed to fn
	Tail    *TailInfo // an incomplete or undecodable end of the last segment, or nil
}

// TailInfo describes the bytes at the end of the last segment that are not
// a whole record and are followed by nothing valid: a write in progress, or
// the torn tail a crash left (Open cuts those).
type TailInfo struct {
	File   string // segment file name
	Offset int64  // where the bad bytes start: the end of the last whole record
	Bytes  int64  // how many bytes follow
	Reason string // why they do not verify
}

// errStopScan ends a walk once the records up to "to" were read.
var errStopScan = errors.New("stop scan")

// errVanished means a listed segment file disappeared before it was read.
var errVanished = errors.New("segment vanished")

// maxScanRestarts bounds how often Scan starts over because segments
// vanished; each restart means a TruncateFront ran while scanning.
const maxScanRestarts = 100

// Scan calls fn for every record with from <= LSN <= to (to == 0: to the
// end of the log) in LSN order. It verifies framing, CRCs, that each LSN
// equals its tidwall index, and that segments follow each other without gap
// or overlap. Segments that lie wholly before from are not read.
//
// Bad bytes at the end of the last segment with nothing valid after them are
// reported in ScanResult.Tail, not as an error; anything else bad is a
// *CorruptionError. Scan is read-only and safe to run while a Log writes and
// truncates the same directory: a segment that vanishes under it makes it
// start over from the current listing, and when records it still needed
// were truncated away it returns an error wrapping ErrCompacted.
// When the log already starts after from (it was truncated before the scan
// began), Scan starts at the first record there is: compare from with
// ScanResult.First, or with the first Position fn sees, when every record
// from on is needed.
// An error returned by fn stops the scan and is returned as is.
func Scan(dir string, from, to uint64, fn func(Position, Record) error) (ScanResult, error) {
	s := &scanner{fsys: OSFS(), dir: dir, from: from, to: to, fn: fn}
	return s.run()
}

type scanner struct {
	fsys     FS
	dir      string
	from, to uint64
	fn       func(Position, Record) error
	// fromDisk makes each segment read see the disk, not the page cache
	// (readFromDisk); recovery sets it, read-only Scans do not.
	fromDisk bool
	logger   *slog.Logger // for fromDisk's warnings

	res  ScanResult
	next uint64 // LSN of the next record fn must see; 0 before the first
}

func (s *scanner) run() (ScanResult, error) {
	for restarts := 0; ; restarts++ {
		segs, _, err := listSegments(s.fsys, s.dir)
		if err != nil {
			return s.res, err
		}
		segs, err = logicalSegments(s.dir, segs)
		if err != nil {
			return s.res, err
		}
		err = s.pass(segs)
		if !errors.Is(err, errVanished) {
			return s.res, err
		}
		if restarts == maxScanRestarts {
			return s.res, fmt.Errorf("scan %s: segments kept vanishing after %d restarts", s.dir, restarts)
		}
	}
}

// pass scans one listing of the directory.
func (s *scanner) pass(segs []Segment) error {
	s.res.Tail = nil
	if len(segs) == 0 {
		return nil
	}
	s.res.First = segs[0].First
	if s.res.Records == 0 {
		s.res.Last = segs[0].First - 1
	} else if segs[0].First > s.next {
		return fmt.Errorf("scan %s: need index %d but the log now starts at %d: %w",
			s.dir, s.next, segs[0].First, ErrCompacted)
	}
	lower := max(s.from, s.next) // records below were not asked for or were already seen
	var expect uint64            // first index of the next segment read; 0 before the first
	for i, seg := range segs {
		last := i == len(segs)-1
		if !last && segs[i+1].First <= lower {
			continue
		}
		var data []byte
		var err error
		if s.fromDisk {
			data, err = readFromDisk(s.fsys, seg.Path, s.logger)
		} else {
			data, err = readFile(s.fsys, seg.Path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return errVanished
		}
		if err != nil {
			return fmt.Errorf("scan segment %s: %w", seg.Name, err)
		}
		if expect != 0 && seg.First != expect {
			return &CorruptionError{Dir: s.dir, File: seg.Name, Index: seg.First,
				Err: segmentMismatch(expect, seg.First)}
		}
		w, err := walkSegment(data, seg.First, func(off int, rec Record) error {
			if rec.LSN < lower {
				return nil
			}
			if s.to != 0 && rec.LSN > s.to {
				return errStopScan
			}
			if s.fn != nil {
				if err := s.fn(Position{File: seg.Name, Index: rec.LSN, Offset: int64(off)}, rec); err != nil {
					return err
				}
			}
			s.res.Records++
			s.next = rec.LSN + 1
			return nil
		})
		s.res.Last = seg.First + w.count - 1
		if err == errStopScan {
			return nil
		}
		if err != nil {
			return err
		}
		if w.bad != nil {
			if last && !w.whole && laterRecordAfter(data, w.end, seg.First+w.count) < 0 {
				s.res.Tail = &TailInfo{File: seg.Name, Offset: int64(w.end),
					Bytes: int64(len(data) - w.end), Reason: w.bad.Error()}
				return nil
			}
			return s.corruptAt(seg, w, data)
		}
		expect = seg.First + w.count
	}
	return nil
}

// corruptAt describes the bad entry a walk stopped at.
func (s *scanner) corruptAt(seg Segment, w segmentWalk, data []byte) error {
	reason := w.bad
	if !w.whole {
		if off := laterRecordAfter(data, w.end, seg.First+w.count); off >= 0 {
			reason = reasonf("%v; a valid record follows at offset %d", w.bad, off)
		}
	}
	return &CorruptionError{Dir: s.dir, File: seg.Name, Index: seg.First + w.count,
		Offset: int64(w.end), Err: reason}
}

func segmentMismatch(want, got uint64) error {
	if got > want {
		return reasonf("lsn gap: segment starts at %d, want %d", got, want)
	}
	return reasonf("lsn overlap: segment starts at %d, want %d", got, want)
}
