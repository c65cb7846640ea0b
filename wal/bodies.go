package wal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// This file reads single record bodies where Written or Position says they
// lie, with one positioned read each, so that the queue can keep bodies on
// disk rather than in memory. Like reader.go it never writes.

// DefaultMaxOpenSegments is the number of segment files a BodyReader keeps
// open when it is given no bound.
const DefaultMaxOpenSegments = 32

// ErrBodyGone is returned, wrapped with the record, file and offset, by a
// body read whose segment is no longer there: the log starts after the
// record, or its segment was removed by TruncateFront before the read could
// take hold of the file. It is not corruption: the record was compacted
// away.
var ErrBodyGone = errors.New("walq: record body's segment is gone")

// BodyReader reads record bodies out of the segments of one directory. It
// keeps the first LSNs of the segments in memory and an LRU of at most
// maxOpen open files, so a read costs one positioned read and, when its
// file is not open, one open (and the close of the least recently used
// file no read holds).
//
// It is safe for concurrent use, also while a Log appends to, rolls and
// truncates the same directory. Reads of one file or of different files run
// in parallel; a lock is held only to find and take hold of the file. A file
// that is evicted or whose segment is removed while reads hold it is closed
// when the last of them finishes, so a read that took hold of its file
// before the segment was removed still returns the body (an open file
// outlives its unlinking), and one that starts after gets ErrBodyGone.
//
// A Log's own reader (Log.ReadAt) is told by the Log of every segment it
// creates or removes and never lists the directory. A reader made by
// NewBodyReader lists it on its first read and again on a miss: when the
// record is before the first segment it knows of, when its segment file is
// gone, and when the record falls in the newest segment it knows of and
// after every record it has seen there, since a segment made since may hold
// it.
type BodyReader struct {
	fsys    FS
	dir     string
	maxOpen int
	// owned is set for a Log's own reader: the Log tells it of every
	// segment (added, removed), so a miss is an answer, not a reason to
	// list the directory.
	owned bool
	// listMu serializes listings (standalone readers only), so that a
	// listing is never replaced by one that started before it. It is taken
	// before mu, never while holding it.
	listMu sync.Mutex

	mu sync.Mutex
	// changed is signalled (on mu) when a file finishes opening, a slot
	// frees up or the reader closes.
	changed sync.Cond
	closed  bool
	listed  bool     // firsts holds a listing (or, owned, what the Log said)
	firsts  []uint64 // first LSNs of the known segments, ascending
	// sure is the highest LSN known to lie in a segment of firsts
	// (standalone readers): a record up to it that falls in the newest
	// known segment is there, not in a segment made after the listing.
	sure  uint64
	files map[uint64]*bodyFile // files of known segments, open or opening
	open  int                  // files open or opening, dropped ones still read included
	tick  uint64               // LRU clock

	// keepDir holds sealed segments moved out of the log (Log.MoveFront)
	// for the bodies they still hold; kept lists them by range, ascending
	// and disjoint, all before the log's first segment ("" and nil: none).
	keepDir    string
	kept       []KeptFile
	keptListed bool
}

// KeptFile is a sealed segment moved out of the log into the keep
// directory, which still holds live bodies: the records First..Last.
type KeptFile struct {
	First, Last uint64
	Name        string
}

// keptName is the name of a kept segment of records first..last.
func keptName(first, last uint64) string {
	return fmt.Sprintf("%0*d-%0*d%s", segmentDigits, first, segmentDigits, last, segmentSuffix)
}

// parseKeptName is the inverse of keptName.
func parseKeptName(name string) (first, last uint64, ok bool) {
	if len(name) != 2*segmentDigits+1+len(segmentSuffix) || name[segmentDigits] != '-' {
		return 0, 0, false
	}
	first, ok1 := parseSegmentName(name[:segmentDigits] + segmentSuffix)
	last, ok2 := parseSegmentName(name[segmentDigits+1:])
	if !ok1 || !ok2 || last < first {
		return 0, 0, false
	}
	return first, last, true
}

// IsKeptName reports whether name is that of a kept segment.
func IsKeptName(name string) bool {
	_, _, ok := parseKeptName(name)
	return ok
}

// KeptFileName returns the name of the kept segment of records first..last.
func KeptFileName(first, last uint64) string { return keptName(first, last) }

// ListKept lists the kept segments in dir (none when it does not exist),
// by first LSN; names that are not kept segments are returned apart.
func ListKept(fsys FS, dir string) ([]KeptFile, []string, error) {
	entries, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out []KeptFile
	var others []string
	for _, e := range entries {
		first, last, ok := parseKeptName(e.Name())
		if !ok || !e.Type().IsRegular() {
			others = append(others, e.Name())
			continue
		}
		out = append(out, KeptFile{First: first, Last: last, Name: e.Name()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	for i := 1; i < len(out); i++ {
		if out[i].First <= out[i-1].Last {
			return nil, nil, &CorruptionError{Dir: dir, File: out[i].Name, Err: reasonf("overlaps %s", out[i-1].Name)}
		}
	}
	return out, others, nil
}

// SetKeepDir makes the reader look for records in the segments kept in dir
// too (listed at the first read that needs them, and again on a miss).
func (r *BodyReader) SetKeepDir(dir string) {
	r.mu.Lock()
	r.keepDir, r.keptListed = dir, false
	r.mu.Unlock()
}

// keptLocked returns the kept file holding lsn, or nil.
func (r *BodyReader) keptLocked(lsn uint64) *KeptFile {
	i := sort.Search(len(r.kept), func(i int) bool { return r.kept[i].Last >= lsn })
	if i < len(r.kept) && r.kept[i].First <= lsn {
		return &r.kept[i]
	}
	return nil
}

// relistKept lists the keep directory (standalone readers, or a Log's at
// Open).
func (r *BodyReader) relistKept() error {
	r.listMu.Lock()
	defer r.listMu.Unlock()
	r.mu.Lock()
	dir := r.keepDir
	r.mu.Unlock()
	kept, _, err := ListKept(r.fsys, dir)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.kept, r.keptListed = kept, true
	r.mu.Unlock()
	return nil
}

// keptAdded tells a Log's reader that a segment moved to the keep
// directory; keptRemoved that kept files were removed.
func (r *BodyReader) keptAdded(k KeptFile) {
	r.mu.Lock()
	i := sort.Search(len(r.kept), func(i int) bool { return r.kept[i].First >= k.First })
	r.kept = append(r.kept, KeptFile{})
	copy(r.kept[i+1:], r.kept[i:])
	r.kept[i] = k
	// Its log segment's open file, if any, is dropped: it has a new name.
	var drop []*bodyFile
	if bf := r.files[k.First]; bf != nil && !bf.kept {
		drop = r.dropLocked(bf)
	}
	r.mu.Unlock()
	r.closeDropped(drop)
}

func (r *BodyReader) keptRemoved(first uint64) {
	r.mu.Lock()
	out := r.kept[:0]
	for _, k := range r.kept {
		if k.First != first {
			out = append(out, k)
		}
	}
	r.kept = out
	var drop []*bodyFile
	if bf := r.files[first]; bf != nil && bf.kept {
		drop = r.dropLocked(bf)
	}
	r.mu.Unlock()
	r.closeDropped(drop)
}

// bodyFile is one segment file a BodyReader holds open.
type bodyFile struct {
	first uint64
	name  string
	path  string // the file opened: name in the log directory or the keep directory
	kept  bool   // a kept segment
	f     File   // nil while opening
	refs  int    // reads holding f (the opener, while opening)
	used  uint64 // tick of the last read that took it
	// cached is set while the file is in files. A file out of it (evicted,
	// its segment removed, the reader closed) is closed once refs is 0.
	cached bool
}

// NewBodyReader returns a reader of record bodies in the segments of dir,
// keeping at most maxOpen files open (maxOpen <= 0: DefaultMaxOpenSegments).
// It opens nothing until the first read. It is for readers without a Log,
// such as tools that open a directory read-only while the queue runs; a
// Log reads its own bodies with Log.ReadAt.
func NewBodyReader(fsys FS, dir string, maxOpen int) *BodyReader {
	if maxOpen <= 0 {
		maxOpen = DefaultMaxOpenSegments
	}
	r := &BodyReader{fsys: fsys, dir: dir, maxOpen: maxOpen, files: map[uint64]*bodyFile{}}
	r.changed.L = &r.mu
	return r
}

// newLogBodyReader returns a Log's own reader, which knows the segments
// whose first LSNs are firsts and is told of later changes.
func newLogBodyReader(fsys FS, dir string, maxOpen int, firsts []uint64) *BodyReader {
	r := NewBodyReader(fsys, dir, maxOpen)
	r.owned, r.listed = true, true
	r.firsts = append(r.firsts, firsts...)
	return r
}

// ReadAt reads len(p) bytes at offset off of the segment that holds record
// lsn (the segment with the greatest first LSN <= lsn), with one positioned
// read (File.ReadAt; more only when the file returns fewer bytes without an
// error). lsn must be a record already written (as Written or Position
// tell), or the reader may look in the wrong segment.
//
// A segment that is gone gives an error wrapping ErrBodyGone; a file that
// ends before off+len(p) one for which errors.Is(err, ErrCorrupt) holds
// (a *CorruptionError); after Close an error wrapping ErrClosed. Every error
// names the record, and those past finding the segment its file and off.
func (r *BodyReader) ReadAt(lsn uint64, off int64, p []byte) error {
	if off < SegmentHeaderSize {
		return fmt.Errorf("read body of record %d at offset %d in %s: offset inside the segment header", lsn, off, r.dir)
	}
	bf, err := r.acquire(lsn, off)
	if err != nil {
		return err
	}
	defer r.release(bf)
	for n := 0; n < len(p); {
		m, err := bf.f.ReadAt(p[n:], off+int64(n))
		n += m
		switch {
		case n == len(p):
			return nil // a ReaderAt may return io.EOF with the last byte
		case err == io.EOF:
			return &CorruptionError{Dir: r.dir, File: bf.name, Index: lsn, Offset: off,
				Err: reasonf("body of %d bytes runs past the end of the segment (%d bytes there)", len(p), n)}
		case err != nil:
			return fmt.Errorf("read body of record %d: segment %s offset %d: %w", lsn, bf.name, off, err)
		case m == 0:
			return fmt.Errorf("read body of record %d: segment %s offset %d: %w", lsn, bf.name, off, io.ErrNoProgress)
		}
	}
	return nil
}

// acquire returns the open file of the segment holding lsn with a reference
// taken, which the caller gives back with release.
func (r *BodyReader) acquire(lsn uint64, off int64) (*bodyFile, error) {
	relisted := false // listed during this call: a miss now is final
	relistedKept := false
	movedCheck := false // a log segment found gone was looked for among the kept
	missing := ""       // the segment file found gone during this call
	var missingFirst uint64
	r.mu.Lock()
	for {
		if r.closed {
			r.mu.Unlock()
			return nil, fmt.Errorf("read body of record %d: body reader of %s closed: %w", lsn, r.dir, ErrClosed)
		}
		// A kept segment's entry is in the list before its log name goes
		// (MoveFront links, tells, then unlinks), so the list answers
		// first.
		if r.keepDir != "" {
			stale := !r.owned && !relistedKept && r.keptLocked(lsn) == nil &&
				(!r.listed || len(r.firsts) == 0 || lsn < r.firsts[0] || missing != "")
			if !r.keptListed || stale {
				r.mu.Unlock()
				if err := r.relistKept(); err != nil {
					return nil, fmt.Errorf("read body of record %d at offset %d: %w", lsn, off, err)
				}
				relistedKept = true
				r.mu.Lock()
				continue
			}
			if k := r.keptLocked(lsn); k != nil {
				bf, retry, err := r.takeLocked(k.First, k.Name, filepath.Join(r.keepDir, k.Name), true, lsn, off)
				if retry {
					continue
				}
				if errors.Is(err, fs.ErrNotExist) {
					err = fmt.Errorf("read body of record %d: kept segment %s offset %d: %w", lsn, k.Name, off, ErrBodyGone)
				}
				return bf, err
			}
		}
		i := sort.Search(len(r.firsts), func(i int) bool { return r.firsts[i] > lsn }) - 1
		newest := i == len(r.firsts)-1
		if !r.owned && !relisted && (!r.listed || i < 0 || (newest && lsn > r.sure)) {
			r.mu.Unlock()
			if err := r.relist(lsn); err != nil {
				return nil, fmt.Errorf("read body of record %d at offset %d: %w", lsn, off, err)
			}
			relisted = true
			r.mu.Lock()
			continue
		}
		// A segment older than one found gone is no answer either: they
		// are removed oldest first, so such a listing is damage.
		if i < 0 || r.firsts[i] < missingFirst {
			start := "no segment"
			if len(r.firsts) > 0 {
				start = "segment " + SegmentName(r.firsts[0])
			}
			r.mu.Unlock()
			if missing != "" {
				return nil, fmt.Errorf("read body of record %d: segment %s offset %d: removed, the log now starts with %s: %w",
					lsn, missing, off, start, ErrBodyGone)
			}
			return nil, fmt.Errorf("read body of record %d at offset %d: before the log in %s, which starts with %s: %w",
				lsn, off, r.dir, start, ErrBodyGone)
		}
		first := r.firsts[i]
		name := SegmentName(first)
		bf, retry, err := r.takeLocked(first, name, filepath.Join(r.dir, name), false, lsn, off)
		switch {
		case retry:
			continue
		case err == nil:
			return bf, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		// The segment file is gone (takeLocked released mu).
		r.mu.Lock()
		if r.owned && r.keepDir != "" && !movedCheck {
			// Moved to the keep directory since it was looked up: the
			// kept list has it now (the move tells before it unlinks).
			movedCheck = true
			continue
		}
		if r.owned || relisted {
			r.mu.Unlock()
			return nil, fmt.Errorf("read body of record %d: segment %s offset %d: %w", lsn, name, off, ErrBodyGone)
		}
		missing, missingFirst = name, first
		r.mu.Unlock()
		if err := r.relist(lsn); err != nil {
			return nil, fmt.Errorf("read body of record %d at offset %d: %w", lsn, off, err)
		}
		relisted = true
		r.mu.Lock()
	}
}

// takeLocked takes a reference on the file of the segment first (a log
// segment, or a kept one when kept is set), opening it at path when it is
// not open, in the slot of the least recently used file no read holds when
// maxOpen are open. It is called with mu held and returns with it
// released, unless retry is set (mu held again: look again). An error
// opening the file wraps the open's, so that a file gone shows as
// fs.ErrNotExist.
func (r *BodyReader) takeLocked(first uint64, name, path string, kept bool, lsn uint64, off int64) (*bodyFile, bool, error) {
	if bf := r.files[first]; bf != nil && bf.kept == kept {
		if bf.f == nil {
			r.changed.Wait()
			return nil, true, nil
		}
		bf.refs++
		r.tick++
		bf.used = r.tick
		r.mu.Unlock()
		return bf, false, nil
	} else if bf != nil {
		// The same segment under its other name (it moved): drop that one.
		drop := r.dropLocked(bf)
		r.mu.Unlock()
		r.closeDropped(drop)
		r.mu.Lock()
		return nil, true, nil
	}
	if r.open >= r.maxOpen {
		victim := r.leastRecent()
		if victim == nil { // every open file is being read
			r.changed.Wait()
			return nil, true, nil
		}
		delete(r.files, victim.first)
		victim.cached = false
		r.mu.Unlock()
		victim.f.Close() // a read-only file: nothing to lose
		r.mu.Lock()
		r.open--
		r.changed.Broadcast()
		return nil, true, nil
	}
	// Take the slot and open outside the lock; reads of this segment
	// meanwhile wait for the open, those of others go on.
	r.tick++
	bf := &bodyFile{first: first, name: name, path: path, kept: kept, refs: 1, used: r.tick, cached: true}
	r.files[first] = bf
	r.open++
	r.mu.Unlock()
	f, err := r.fsys.OpenFile(path, os.O_RDONLY, 0)
	r.mu.Lock()
	if err != nil {
		if r.files[first] == bf {
			delete(r.files, first)
		}
		r.open--
		r.changed.Broadcast()
		r.mu.Unlock()
		return nil, false, fmt.Errorf("read body of record %d: open %s (offset %d): %w", lsn, path, off, err)
	}
	// The file was there when it was opened, so the read goes ahead even
	// if the segment was removed (or the reader closed) meanwhile: bf is
	// then out of files, and release closes it.
	bf.f = f
	r.changed.Broadcast()
	r.mu.Unlock()
	return bf, false, nil
}

// leastRecent returns the cached open file no read holds that was used
// longest ago, or nil when every open file is being read. It is called with
// mu held.
func (r *BodyReader) leastRecent() *bodyFile {
	var victim *bodyFile
	for _, bf := range r.files {
		if bf.f != nil && bf.refs == 0 && (victim == nil || bf.used < victim.used) {
			victim = bf
		}
	}
	return victim
}

// release gives back a reference acquire took, closing the file when it was
// the last one of a file out of the cache.
func (r *BodyReader) release(bf *bodyFile) {
	r.mu.Lock()
	bf.refs--
	if bf.refs > 0 || bf.cached {
		if bf.refs == 0 {
			r.changed.Broadcast() // a wait for a slot may evict it now
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	bf.f.Close()
	r.mu.Lock()
	r.open--
	r.changed.Broadcast()
	r.mu.Unlock()
}

// relist lists the directory and makes the listing the known segments
// (standalone readers only). lsn is the record that missed: it was written
// before the listing started, so once the listing is in, it lies in a
// segment the listing knows of (or in none).
func (r *BodyReader) relist(lsn uint64) error {
	r.listMu.Lock()
	defer r.listMu.Unlock()
	segs, _, err := listSegments(r.fsys, r.dir)
	if err != nil {
		return err
	}
	firsts := make([]uint64, len(segs))
	for i, s := range segs {
		firsts[i] = s.First
	}
	r.mu.Lock()
	r.firsts, r.listed = firsts, true
	if len(firsts) > 0 && lsn >= firsts[0] {
		r.sure = max(r.sure, lsn)
	}
	var drop []*bodyFile
	for first, bf := range r.files {
		if i := sort.Search(len(firsts), func(i int) bool { return firsts[i] >= first }); i == len(firsts) || firsts[i] != first {
			drop = append(drop, r.dropLocked(bf)...)
		}
	}
	r.mu.Unlock()
	r.closeDropped(drop)
	return nil
}

// added tells a Log's reader of the segment it just created.
func (r *BodyReader) added(first uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.firsts), func(i int) bool { return r.firsts[i] >= first })
	if i < len(r.firsts) && r.firsts[i] == first {
		return
	}
	r.firsts = append(r.firsts, 0)
	copy(r.firsts[i+1:], r.firsts[i:])
	r.firsts[i] = first
}

// removed tells a Log's reader that TruncateFront removed the segment whose
// first LSN is first, and so every older one (it removes oldest first). The
// files are dropped from the cache and closed once no read holds them.
func (r *BodyReader) removed(first uint64) {
	r.mu.Lock()
	n := sort.Search(len(r.firsts), func(i int) bool { return r.firsts[i] > first })
	r.firsts = append(r.firsts[:0], r.firsts[n:]...)
	var drop []*bodyFile
	for f, bf := range r.files {
		if f <= first && !bf.kept {
			drop = append(drop, r.dropLocked(bf)...)
		}
	}
	r.mu.Unlock()
	r.closeDropped(drop)
}

// dropLocked takes bf out of the cache and returns it when it is to be
// closed now (no read holds it, and it is not being opened); otherwise the
// last release closes it. It is called with mu held.
func (r *BodyReader) dropLocked(bf *bodyFile) []*bodyFile {
	delete(r.files, bf.first)
	bf.cached = false
	if bf.refs == 0 && bf.f != nil {
		return []*bodyFile{bf}
	}
	return nil
}

// closeDropped closes files dropLocked returned, outside the lock, and then
// frees their slots. It returns the first close error.
func (r *BodyReader) closeDropped(drop []*bodyFile) error {
	if len(drop) == 0 {
		return nil
	}
	var first error
	for _, bf := range drop {
		if err := bf.f.Close(); err != nil && first == nil {
			first = fmt.Errorf("close segment %s: %w", bf.name, err)
		}
	}
	r.mu.Lock()
	r.open -= len(drop)
	r.changed.Broadcast()
	r.mu.Unlock()
	return first
}

// Close closes the files no read holds; those still being read are closed
// when their reads finish. Later reads return an error wrapping ErrClosed.
// It is idempotent.
func (r *BodyReader) Close() error {
	r.mu.Lock()
	r.closed = true
	var drop []*bodyFile
	for _, bf := range r.files {
		drop = append(drop, r.dropLocked(bf)...)
	}
	r.changed.Broadcast() // waiters see closed
	r.mu.Unlock()
	if err := r.closeDropped(drop); err != nil {
		return fmt.Errorf("close body reader of %s: %w", r.dir, err)
	}
	return nil
}
