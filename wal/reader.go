package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// This file reads segments without ever writing, so walq-inspect can run it
// next to a live queue.

// A format-2 segment is named after the LSN of its first record, in 20
// decimal digits so that names sort in LSN order, with the suffix ".seg". It
// is created as "<name>.tmp" (header written and fsynced) and renamed.
const (
	segmentDigits    = 20
	segmentSuffix    = ".seg"
	segmentTmpSuffix = ".seg.tmp"
	startSuffix      = ".START" // format 1 only
	endSuffix        = ".END"   // format 1 only
	tempSuffix       = ".TEMP"  // format 1 only
)

// SegmentName returns the file name of the segment whose first LSN is lsn.
func SegmentName(lsn uint64) string {
	return fmt.Sprintf("%0*d%s", segmentDigits, lsn, segmentSuffix)
}

func segmentTmpName(lsn uint64) string {
	return fmt.Sprintf("%0*d%s", segmentDigits, lsn, segmentTmpSuffix)
}

// parseSegmentName returns the first LSN of a format-2 segment file name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != segmentDigits {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	first, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || first == 0 {
		return 0, false
	}
	return first, true
}

// IsSegmentTemp reports whether name is the temp file of a segment being
// created.
func IsSegmentTemp(name string) bool {
	base, ok := strings.CutSuffix(name, ".tmp")
	if !ok {
		return false
	}
	_, ok = parseSegmentName(base)
	return ok
}

// Segment is one segment file.
type Segment struct {
	Name     string
	Path     string
	First    uint64 // LSN of its first record, from the name
	Size     int64
	Leftover bool // format 1: a .START or .END file of an interrupted truncation
}

// ListSegments lists the format-2 segment files in dir sorted by First, and
// the names of every other entry.
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
		first, ok := parseSegmentName(name)
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
		segs = append(segs, Segment{Name: name, Path: filepath.Join(dir, name), First: first, Size: info.Size()})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].First < segs[j].First })
	return segs, others, nil
}

// Position says where a record is.
type Position struct {
	File   string // segment file name
	Index  uint64 // the record's LSN
	Offset int64  // offset of the record's body in File (format 1: of its entry)
	Frame  int64  // offset of the frame holding it (format 1: of its entry)
	// Watermark is the watermark of the frame holding it: the last LSN
	// fsynced when the frame was written (format 1: 0).
	Watermark uint64
}

// ScanResult summarizes a Scan.
type ScanResult struct {
	First   uint64    // LSN the log starts at (the first segment's first LSN)
	Last    uint64    // LSN of the last record verified (First-1 when none)
	Records int       // records passed to fn
	Frames  int       // frames read whole in the last pass over the listing, skipped records' included
	Dir     DirID     // the directory ID the segments carry (zero when no segment was read)
	Tail    *TailInfo // bytes at the end of the last segment to be cut (see repair.go), or nil
}

// TailInfo describes bytes at the end of the last segment that recovery
// cuts: they start with a frame that does not verify, and no frame on disk
// says that any record in them was promised durable (repair.go).
type TailInfo struct {
	File   string // segment file name
	Offset int64  // where the bad bytes start: the end of the last whole frame
	Bytes  int64  // how many bytes follow
	Reason string // why they do not verify
	// Watermark is the highest LSN that the segment says was promised
	// durable (below the first LSN cut), and Later counts the frames after
	// the damage that verified (out-of-order pages of an unsynced range).
	Watermark uint64
	Later     int
}

// errStopScan ends a walk once the records up to "to" were read.
var errStopScan = errors.New("stop scan")

// errVanished means a listed segment file disappeared before it was read.
var errVanished = errors.New("segment vanished")

// maxScanRestarts bounds how often Scan starts over because segments
// vanished; each restart means a TruncateFront ran while scanning.
const maxScanRestarts = 100

// Scan calls fn for every record with from <= LSN <= to (to == 0: to the
// end of the log) in LSN order. It verifies every segment header (format
// version, the same directory ID in every segment, first LSN equal to the
// name), every frame it reads (MAC, LSNs, record headers, body CRCs) and
// that segments follow each other without gap or overlap. Segments that lie
// wholly before from are not read.
//
// Damage at the end of the last segment that the rule of repair.go would cut
// is reported in ScanResult.Tail, not as an error; anything else bad is a
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
	// want is the directory ID every segment must carry; zero: whatever
	// the first segment read carries.
	want DirID
	// promised is an LSN the owner knows was promised durable (0: none):
	// damage at or below it is corruption whatever the frames say.
	promised uint64

	res  ScanResult
	next uint64 // LSN of the next record fn must see; 0 before the first
}

func (s *scanner) run() (ScanResult, error) {
	for restarts := 0; ; restarts++ {
		segs, _, err := listSegments(s.fsys, s.dir)
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
	s.res.Tail, s.res.Frames = nil, 0
	if len(segs) == 0 {
		return nil
	}
	s.res.First = segs[0].First
	if s.res.Records == 0 {
		s.res.Last = segs[0].First - 1
	} else if segs[0].First > s.next {
		return fmt.Errorf("scan %s: need LSN %d but the log now starts at %d: %w",
			s.dir, s.next, segs[0].First, ErrCompacted)
	}
	lower := max(s.from, s.next) // records below were not asked for or were already seen
	// The segments to read: those that hold records at or after lower and
	// (when to is set) not wholly after to.
	var want []Segment
	for i, seg := range segs {
		if i < len(segs)-1 && segs[i+1].First <= lower {
			continue
		}
		if s.to != 0 && seg.First > s.to && len(want) > 0 {
			break
		}
		want = append(want, seg)
	}
	newest := segs[len(segs)-1].First
	rd := s.readAhead(want)
	defer rd.stop()
	var expect uint64 // first LSN of the next segment read; 0 before the first
	for _, seg := range want {
		last := seg.First == newest
		data, err := rd.next()
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
		hdr, err := s.header(seg, data)
		if err != nil {
			return err
		}
		w, err := walkFrames(data, hdr, func(pos Position, rec Record) error {
			if rec.LSN < lower {
				return nil
			}
			if s.to != 0 && rec.LSN > s.to {
				return errStopScan
			}
			if s.fn != nil {
				pos.File = seg.Name
				if err := s.fn(pos, rec); err != nil {
					return err
				}
			}
			s.res.Records++
			s.next = rec.LSN + 1
			return nil
		})
		s.res.Frames += w.frames
		s.res.Last = w.next - 1
		if err == errStopScan {
			return nil
		}
		if err != nil {
			return err
		}
		if w.bad != nil {
			// Records in older segments were fsynced before this one was
			// made, so everything before it was promised.
			v := judgeDamage(data, hdr, w, max(s.promised, seg.First-1))
			if last && v.cut {
				s.res.Tail = &TailInfo{File: seg.Name, Offset: w.end, Bytes: int64(len(data)) - w.end,
					Reason: w.bad.Error(), Watermark: v.watermark, Later: v.later}
				return nil
			}
			return &CorruptionError{Dir: s.dir, File: seg.Name, Index: w.next, Offset: w.end, Err: v.reason(last, w)}
		}
		expect = w.next
	}
	return nil
}

// readAhead reads segs in order on a goroutine of its own, one segment
// ahead of the caller, so that reading the next segment (from the disk,
// in recovery) overlaps verifying and replaying this one. At most two
// segments are held beyond the one the caller works on.
func (s *scanner) readAhead(segs []Segment) *segmentReader {
	r := &segmentReader{out: make(chan segmentRead, 1), quit: make(chan struct{})}
	go func() {
		defer close(r.out)
		for _, seg := range segs {
			var sr segmentRead
			if s.fromDisk {
				sr.data, sr.err = readFromDisk(s.fsys, seg.Path, s.logger)
			} else {
				sr.data, sr.err = readFile(s.fsys, seg.Path)
			}
			select {
			case r.out <- sr:
			case <-r.quit:
				return
			}
			if sr.err != nil {
				return
			}
		}
	}()
	return r
}

type segmentRead struct {
	data []byte
	err  error
}

// segmentReader hands out what readAhead read, in order.
type segmentReader struct {
	out  chan segmentRead
	quit chan struct{}
}

func (r *segmentReader) next() ([]byte, error) {
	sr, ok := <-r.out
	if !ok {
		return nil, errors.New("segment reader stopped early")
	}
	return sr.data, sr.err
}

// stop ends the reading goroutine and waits for it, so that no read of
// this pass outlives the scan.
func (r *segmentReader) stop() {
	close(r.quit)
	for range r.out {
	}
}

// header verifies a segment's header against its name and the directory.
func (s *scanner) header(seg Segment, data []byte) (segmentHeader, error) {
	hdr, err := decodeSegmentHeader(data)
	if err == nil && hdr.first != seg.First {
		err = reasonf("segment header says first LSN %d, its name %d", hdr.first, seg.First)
	}
	if err == nil {
		if s.want.IsZero() {
			s.want = hdr.dir
		}
		if hdr.dir != s.want {
			err = reasonf("segment belongs to directory %s, not %s", hdr.dir, s.want)
		}
	}
	if err != nil {
		return hdr, &CorruptionError{Dir: s.dir, File: seg.Name, Index: seg.First, Err: err}
	}
	s.res.Dir = hdr.dir
	return hdr, nil
}

// frameWalk is what walkFrames found in one segment.
type frameWalk struct {
	frames    int
	next      uint64 // LSN of the next record expected
	end       int64  // offset just after the last frame that verified
	watermark uint64 // highest watermark of the frames that verified
	bad       error  // why the frame at end is bad; nil when the whole segment verified
}

// walkFrames verifies the frames of a segment, calling fn for each record,
// and stops at the first frame that does not verify or when fn returns an
// error.
func walkFrames(data []byte, hdr segmentHeader, fn func(Position, Record) error) (frameWalk, error) {
	w := frameWalk{next: hdr.first, end: SegmentHeaderSize}
	m := newMacer(hdr.salt)
	var f decodedFrame
	for w.end < int64(len(data)) {
		err := decodeFrameInto(m, data[w.end:], &f)
		if err == nil && f.first != w.next {
			err = lsnMismatch(w.next, f.first)
		}
		if err != nil {
			w.bad = err
			return w, nil
		}
		if fn != nil {
			for i, rec := range f.records {
				pos := Position{Index: rec.LSN, Offset: w.end + f.offsets[i], Frame: w.end, Watermark: f.watermark}
				if err := fn(pos, rec); err != nil {
					return w, err
				}
			}
		}
		w.frames++
		w.watermark = max(w.watermark, f.watermark)
		w.next = f.last() + 1
		w.end += f.size()
	}
	return w, nil
}

func segmentMismatch(want, got uint64) error {
	if got > want {
		return gapReason{corruptReason(fmt.Sprintf("lsn gap: segment starts at %d, want %d", got, want))}
	}
	return reasonf("lsn overlap: segment starts at %d, want %d", got, want)
}
