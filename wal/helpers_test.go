package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testBody is the body of the record with this LSN in every test log, so a
// replayed record can be checked against its LSN alone.
func testBody(lsn uint64) []byte {
	return fmt.Appendf(nil, "body-%04d-%s", lsn, strings.Repeat("x", int(lsn%7)))
}

// withDir fills in the test directory ID when opts has none.
func withDir(opts Options) Options {
	if opts.Dir.IsZero() {
		opts.Dir = testDir
	}
	return opts
}

// openLog opens dir with the test directory ID, failing the test on error.
func openLog(t *testing.T, dir string, opts Options) (*Log, OpenInfo) {
	t.Helper()
	l, info, err := Open(dir, withDir(opts), 0, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l, info
}

// writeLog appends n records (testBody), one batch each, to a new or
// existing log and closes it.
func writeLog(t *testing.T, dir string, opts Options, n int) {
	t.Helper()
	l, info := openLog(t, dir, opts)
	for i := 0; i < n; i++ {
		want := info.Last + uint64(i) + 1
		lsn, c := l.Append(1, testBody(want))
		if lsn != want {
			t.Fatalf("append %d got lsn %d, want %d", i, lsn, want)
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("wait: %v", err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// appendAndWait appends the test record of the next LSN and waits for it.
func appendAndWait(l *Log) error {
	_, c := l.Append(1, testBody(l.LastLSN()+1))
	return c.Wait()
}

// gateFS can hold the committer inside its next "write" check (right before
// it writes a frame) until the test lets it go, so that records appended
// meanwhile all join one batch.
type gateFS struct {
	FS
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func newGateFS(inner FS) *gateFS { return &gateFS{FS: inner} }

// arm makes the next "write" check block until open is called.
func (g *gateFS) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
	g.entered = make(chan struct{})
	g.release = make(chan struct{})
}

func (g *gateFS) open() { close(g.release) }

func (g *gateFS) Check(op string) error {
	if op == "write" {
		g.mu.Lock()
		armed, entered, release := g.armed, g.entered, g.release
		g.armed = false
		g.mu.Unlock()
		if armed {
			close(entered)
			<-release
		}
	}
	return g.FS.Check(op)
}

// appendFrame appends the test records of the next n LSNs so that they are
// written as one frame: a barrier record (its own frame) holds the committer
// while the n records join one pending batch. The log must have been opened
// on gate. It returns the LSN of the last record.
func appendFrame(t *testing.T, l *Log, gate *gateFS, n int) uint64 {
	t.Helper()
	gate.arm()
	_, barrier := l.Append(1, testBody(l.LastLSN()+1))
	<-gate.entered
	var c *Commit
	var lsn uint64
	for range n {
		lsn, c = l.Append(1, testBody(l.LastLSN()+1))
	}
	gate.open()
	if err := barrier.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// frameInfo is where one frame lies in its segment.
type frameInfo struct {
	Seg       string
	Off, Size int64
	First     uint64
	Last      uint64
	Watermark uint64
	Count     int
	Bodies    []int64 // offset of each record's body in the segment
}

func (f frameInfo) End() int64 { return f.Off + f.Size }

// recHeaderOff returns the offset of record i's header in the segment.
func (f frameInfo) recHeaderOff(i int) int64 {
	return f.Off + FrameHeaderSize + int64(i)*RecordHeaderSize
}

// segInfo is one segment of a test log and its frames.
type segInfo struct {
	Segment
	Hdr    segmentHeader
	Frames []frameInfo
}

// logLayout describes a clean test log: its segments and every frame.
type logLayout struct {
	dir  string
	segs []segInfo
	last uint64
}

// readLayout decodes every frame of a log that must verify in full.
func readLayout(t *testing.T, dir string) logLayout {
	t.Helper()
	segs, _, err := ListSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	ll := logLayout{dir: dir}
	for _, s := range segs {
		data := readFileT(t, s.Path)
		hdr, err := decodeSegmentHeader(data)
		if err != nil {
			t.Fatalf("layout: %s: %v", s.Name, err)
		}
		si := segInfo{Segment: s, Hdr: hdr}
		m := newMacer(hdr.salt)
		for off := int64(SegmentHeaderSize); off < int64(len(data)); {
			f, err := decodeFrame(m, data[off:])
			if err != nil {
				t.Fatalf("layout: %s offset %d: %v", s.Name, off, err)
			}
			fi := frameInfo{Seg: s.Name, Off: off, Size: f.size(), First: f.first, Last: f.last(),
				Watermark: f.watermark, Count: int(f.count)}
			for _, b := range f.offsets {
				fi.Bodies = append(fi.Bodies, off+b)
			}
			si.Frames = append(si.Frames, fi)
			ll.last = f.last()
			off += f.size()
		}
		ll.segs = append(ll.segs, si)
	}
	res, err := Scan(dir, 0, 0, nil)
	if err != nil || res.Tail != nil || res.Last != ll.last {
		t.Fatalf("layout scan: %+v, %v, tail %+v", res, err, res.Tail)
	}
	return ll
}

func (ll logLayout) path(name string) string { return filepath.Join(ll.dir, name) }

func (ll logLayout) tail() segInfo { return ll.segs[len(ll.segs)-1] }

// frameOf returns the frame holding lsn.
func (ll logLayout) frameOf(lsn uint64) frameInfo {
	for _, s := range ll.segs {
		for _, f := range s.Frames {
			if f.First <= lsn && lsn <= f.Last {
				return f
			}
		}
	}
	panic(fmt.Sprintf("no frame holds lsn %d", lsn))
}

// seg returns the segment called name.
func (ll logLayout) seg(name string) segInfo {
	for _, s := range ll.segs {
		if s.Name == name {
			return s
		}
	}
	panic("no segment " + name)
}

// sealer builds frames for a segment of a test log, with its salt: what the
// writer would write, or a forger who knows the salt.
type sealer struct {
	m *macer
}

func newSealer(hdr segmentHeader) sealer { return sealer{m: newMacer(hdr.salt)} }

// frame seals one frame of the test records first..first+n-1.
func (s sealer) frame(first uint64, n int, watermark uint64) []byte {
	var b frameBuilder
	for i := range n {
		body := testBody(first + uint64(i))
		b.add(1, 0, func(dst []byte) []byte { return append(dst, body...) })
	}
	return bytes.Clone(b.seal(s.m, first, watermark))
}

// frameOf seals one frame of records with the given bodies.
func (s sealer) frameOf(first, watermark uint64, bodies ...[]byte) []byte {
	var b frameBuilder
	for _, body := range bodies {
		b.add(1, 0, func(dst []byte) []byte { return append(dst, body...) })
	}
	return bytes.Clone(b.seal(s.m, first, watermark))
}

// remac recomputes the MAC of the frame header at the start of frame, after
// the test changed its first 32 bytes.
func (s sealer) remac(frame []byte) {
	copy(frame[frOffMAC:], s.m.mac(frame))
}

// fixHeaderCRC recomputes the record headers' CRC of frame (count taken
// from its header) and then its MAC.
func (s sealer) fixHeaderCRC(frame []byte) {
	n := int(binary.BigEndian.Uint32(frame[frOffCount:]))
	hdrs := frame[FrameHeaderSize : FrameHeaderSize+n*RecordHeaderSize]
	binary.BigEndian.PutUint32(frame[frOffHeaderCRC:], crc32.Checksum(hdrs, castagnoli))
	s.remac(frame)
}

// replayed collects records passed to apply, copying their bodies, and
// checks that each comes with its own position.
type replayed struct {
	recs []Record
	bad  []string // positions that do not name their record
}

func (r *replayed) apply(pos Position, rec Record) error {
	if pos.Index != rec.LSN || pos.File == "" || pos.Offset <= pos.Frame || pos.Frame < SegmentHeaderSize {
		r.bad = append(r.bad, fmt.Sprintf("record %d at %+v", rec.LSN, pos))
	}
	rec.Body = bytes.Clone(rec.Body)
	r.recs = append(r.recs, rec)
	return nil
}

// checkRecords checks that recs are exactly first..last with their test
// bodies, of type 1 and the default queue.
func checkRecords(t *testing.T, recs []Record, first, last uint64) {
	t.Helper()
	if want := int(last + 1 - first); len(recs) != want {
		t.Fatalf("got %d records, want %d (%d..%d)", len(recs), want, first, last)
	}
	for i, r := range recs {
		lsn := first + uint64(i)
		if r.LSN != lsn || r.Type != 1 || r.Queue != 0 || !bytes.Equal(r.Body, testBody(lsn)) {
			t.Fatalf("record %d: got lsn %d type %d queue %d body %q, want lsn %d", i, r.LSN, r.Type, r.Queue, r.Body, lsn)
		}
	}
}

// reopen opens dir with the OS FS, replays everything and closes it.
func reopen(t *testing.T, dir string, opts Options) ([]Record, OpenInfo) {
	t.Helper()
	opts.FS = nil
	var r replayed
	l, info, err := Open(dir, withDir(opts), 0, r.apply)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if len(r.bad) > 0 {
		t.Fatalf("replay passed records without their positions: %v", r.bad)
	}
	return r.recs, info
}

// dirContents maps every file name in dir to its bytes.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		m[strings.TrimPrefix(p, dir+string(filepath.Separator))] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameContents reports how a and b differ ("" when they do not).
func diffContents(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, k+" removed")
		} else if w != v {
			d = append(d, fmt.Sprintf("%s changed (%d -> %d bytes)", k, len(v), len(w)))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, k+" added")
		}
	}
	return strings.Join(d, ", ")
}

// copyDir copies the files of src into a new temp dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		writeFileT(t, filepath.Join(dst, e.Name()), readFileT(t, filepath.Join(src, e.Name())))
	}
	return dst
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFileT(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// flipBit flips bit (0..7) of the byte at off in the file.
func flipBit(t *testing.T, path string, off int64, bit uint) {
	t.Helper()
	data := readFileT(t, path)
	data[off] ^= 1 << bit
	writeFileT(t, path, data)
}

// asCorruption returns err as a *CorruptionError, failing the test when it
// is not one (or not an errors.Is match for ErrCorrupt).
func asCorruption(t *testing.T, what string, err error) *CorruptionError {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: got %v, want a *CorruptionError", what, err)
	}
	return ce
}

// The base logs of the corruption table: three segments, the tail holding
// single-record frames and one frame of baseBatch records. Under SyncAlways
// each frame states the LSN before it fsynced; under SyncNever every frame
// of a segment states only what the last roll fsynced (the last LSN of the
// segment before).
const (
	// Segments roll before a frame that would take them past this: single
	// frames of 74 to 80 bytes fill a segment with 15 of them.
	baseSegmentSize = 1240
	baseSingles     = 34 // records written one frame each, then a barrier frame
	baseBatch       = 4  // records in the multi-record frame of the tail
	baseAfter       = 6  // single-record frames after it
	baseSyncAt      = 41 // the "mixed" base log is fsynced after this LSN
	baseLast        = baseSingles + 1 + baseBatch + baseAfter
	batchFirst      = baseSingles + 2 // first LSN of the multi-record frame
)

var foreignDir = DirID{0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff}

// baseLog writes a base log of directory id under the policy named:
// "always" (SyncAlways), "never" (SyncNever) or "mixed" (SyncNever with a
// Sync after baseSyncAt, so the frames after it state baseSyncAt).
func baseLog(t *testing.T, policy string, id DirID) (string, logLayout) {
	t.Helper()
	dir := t.TempDir()
	gate := newGateFS(OSFS())
	opts := Options{SegmentSize: baseSegmentSize, FS: gate, Sync: SyncNever, Dir: id}
	if policy == "always" {
		opts.Sync = SyncAlways
	}
	l, _ := openLog(t, dir, opts)
	step := func() {
		if policy == "mixed" && l.LastLSN() == baseSyncAt {
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range baseSingles {
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
		step()
	}
	appendFrame(t, l, gate, baseBatch)
	step()
	for range baseAfter {
		if err := appendAndWait(l); err != nil {
			t.Fatal(err)
		}
		step()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ll := readLayout(t, dir)
	batch := ll.frameOf(batchFirst)
	if len(ll.segs) != 3 || ll.last != baseLast || batch.Count != baseBatch || batch.Seg != ll.tail().Name ||
		ll.tail().First != 31 || ll.segs[1].First != 16 {
		t.Fatalf("base log layout changed: %d segments, last %d, batch frame %+v, tail starts at %d",
			len(ll.segs), ll.last, batch, ll.tail().First)
	}
	return dir, ll
}

const pageSize = 4096

// pageLog writes a log of two segments whose frames (a barrier frame and a
// frame of 40 records, in turn) span pages, under SyncNever ("never", with
// a Sync early in the tail) or SyncInterval ("interval", where the timer's
// fsync sets the point), so that the tail ends in at least three pages
// that no frame states fsynced.
func pageLog(t *testing.T, policy string) (string, logLayout) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		dir := t.TempDir()
		gate := newGateFS(OSFS())
		var syncs atomic.Int64
		opts := Options{SegmentSize: 32 << 10, FS: gate, Sync: SyncNever, OnSync: func(time.Duration) { syncs.Add(1) }}
		if policy == "interval" {
			opts.Sync = SyncInterval(100 * time.Millisecond)
		}
		l, _ := openLog(t, dir, opts)
		for inTail := 0; inTail < 2; {
			appendFrame(t, l, gate, 40)
			if len(l.Segments()) == 2 {
				inTail++
			}
		}
		if policy == "never" {
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		} else {
			time.Sleep(300 * time.Millisecond) // the timer fsyncs what was written
		}
		for range 10 {
			appendFrame(t, l, gate, 40)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		ll := readLayout(t, dir)
		tail := ll.tail()
		if len(ll.segs) == 2 && statedMax(tail) > tail.First-1 && tail.Size-unsyncedPage(ll) >= 3*pageSize {
			return dir, ll
		}
		if attempt == 5 {
			t.Fatalf("page log: %d segments, tail of %d bytes, first unsynced page %d", len(ll.segs), tail.Size, unsyncedPage(ll))
		}
	}
}

// statedMax is the highest watermark the frames of s state.
func statedMax(s segInfo) uint64 {
	var wm uint64
	for _, f := range s.Frames {
		wm = max(wm, f.Watermark)
	}
	return wm
}

// unsyncedPage is the offset of the first page of the tail that holds
// nothing any frame states fsynced.
func unsyncedPage(ll logLayout) int64 {
	tail := ll.tail()
	end := int64(SegmentHeaderSize)
	if wm := statedMax(tail); wm >= tail.First {
		end = ll.frameOf(wm).End()
	}
	return (end + pageSize - 1) / pageSize * pageSize
}

// noSyncFS is the OS's file system with fsyncs that return at once: for
// tests of what Open decides about a directory's bytes, where a real
// fsync only costs time (nothing here simulates a crash after it).
type noSyncFS struct{ FS }

func (f noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{file}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ File }

func (noSyncFile) Sync() error { return nil }
