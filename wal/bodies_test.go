package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
)

// variedBody is the body of record lsn in the tests of this file: 1 to
// about 700 bytes, every byte depending on lsn, so a body read from the
// wrong place never passes for the right one.
func variedBody(lsn uint64) []byte {
	n := 1 + int((lsn*2654435761)%700)
	b := fmt.Appendf(make([]byte, 0, n+24), "r%d:", lsn)
	for i := len(b); i < n; i++ {
		b = append(b, byte(lsn*31+uint64(i)*7))
	}
	return b[:n]
}

// placement is where OnWritten said a body went.
type placement struct {
	seg uint64
	off int64
}

// placements collects OnWritten's reports, indexed by LSN; safe for
// concurrent use.
type placements struct {
	mu     sync.RWMutex
	at     map[uint64]placement
	frames int // OnWritten calls
	errs   []string
}

func newPlacements() *placements { return &placements{at: map[uint64]placement{}} }

func (p *placements) record(w Written) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frames++
	for i, off := range w.Bodies {
		lsn := w.First + uint64(i)
		if _, dup := p.at[lsn]; dup {
			p.errs = append(p.errs, fmt.Sprintf("record %d reported twice", lsn))
		}
		p.at[lsn] = placement{seg: w.Segment, off: off}
	}
}

func (p *placements) get(lsn uint64) (placement, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pl, ok := p.at[lsn]
	return pl, ok
}

func (p *placements) check(t *testing.T, last uint64) {
	t.Helper()
	p.mu.RLock()
	defer p.mu.RUnlock()
	if len(p.errs) > 0 {
		t.Fatal(p.errs)
	}
	for lsn := uint64(1); lsn <= last; lsn++ {
		if _, ok := p.at[lsn]; !ok {
			t.Fatalf("OnWritten never reported record %d", lsn)
		}
	}
}

// appendGroup appends bodies so that they are written as one batch (one
// frame, or several when they are large), behind a barrier record that is
// a frame of its own. The log must be open on gate.
func appendGroup(t *testing.T, l *Log, gate *gateFS, bodies ...[]byte) {
	t.Helper()
	gate.arm()
	_, barrier := l.Append(1, variedBody(l.LastLSN()+1))
	<-gate.entered
	var c *Commit
	for _, b := range bodies {
		_, c = l.Append(2, b)
	}
	gate.open()
	if err := barrier.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
}

// countFS counts the segment files opened for reading that are not closed
// yet, the most at once, and directory listings. With slow set, one read in
// eight of those files sleeps first, so that reads overlap truncations.
type countFS struct {
	FS
	slow     bool
	mu       sync.Mutex
	open     int
	most     int
	readDirs int
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || flag&(os.O_WRONLY|os.O_RDWR) != 0 || !strings.HasSuffix(name, segmentSuffix) {
		return f, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open++
	c.most = max(c.most, c.open)
	return &countFile{File: f, fs: c}, nil
}

func (c *countFS) ReadDir(name string) ([]os.DirEntry, error) {
	c.mu.Lock()
	c.readDirs++
	c.mu.Unlock()
	return c.FS.ReadDir(name)
}

func (c *countFS) counts() (open, most, readDirs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.most, c.readDirs
}

func (c *countFS) resetMost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.most = c.open
}

type countFile struct {
	File
	fs     *countFS
	closed atomic.Bool
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.slow && rand.IntN(8) == 0 {
		time.Sleep(200 * time.Microsecond)
	}
	return f.File.ReadAt(p, off)
}

func (f *countFile) Close() error {
	if f.closed.Swap(true) {
		return fmt.Errorf("close %s: %w", f.Name(), os.ErrClosed)
	}
	f.fs.mu.Lock()
	f.fs.open--
	f.fs.mu.Unlock()
	return f.File.Close()
}

// writeBodies appends records n varied bodies, one batch each, to l.
func writeBodies(t *testing.T, l *Log, n int) {
	t.Helper()
	var c *Commit
	for range n {
		_, c = l.Append(1, variedBody(l.LastLSN()+1))
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// readBody reads record lsn's body at its placement through read and checks
// it.
func readBody(read func(uint64, int64, []byte) error, pl placement, lsn uint64) error {
	want := variedBody(lsn)
	got := make([]byte, len(want))
	if err := read(lsn, pl.off, got); err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("record %d at %d in %s: read %q, want %q", lsn, pl.off, SegmentName(pl.seg), got, want)
	}
	return nil
}

// TestOnWrittenMatchesPositions: the offsets OnWritten reports are those
// Open's apply and Scan give for the same records, across single records,
// many-record frames, a batch of several frames and segment rolls, and the
// bytes there are the bodies.
func TestOnWrittenMatchesPositions(t *testing.T) {
	dir := t.TempDir()
	gate := newGateFS(OSFS())
	pl := newPlacements()
	var batches atomic.Int64
	l, _ := openLog(t, dir, Options{SegmentSize: 4096, FS: gate, OnWritten: pl.record,
		OnBatch: func(int, int) { batches.Add(1) }})
	bodies := map[uint64][]byte{}
	note := func(first uint64, bs ...[]byte) {
		for i, b := range bs {
			bodies[first+uint64(i)] = b
		}
	}
	for round := range 6 {
		first := l.LastLSN() + 1
		writeBodies(t, l, 3)
		note(first, variedBody(first), variedBody(first+1), variedBody(first+2))
		first = l.LastLSN() + 1
		group := make([][]byte, 2+round)
		for i := range group {
			group[i] = variedBody(first + 1 + uint64(i))
		}
		appendGroup(t, l, gate, group...)
		note(first, variedBody(first))
		note(first+1, group...)
	}
	// Three bodies past maxFrameBody in one batch: two frames, one write
	// each, reported one by one.
	first := l.LastLSN() + 1
	big := func(lsn uint64) []byte { return bytes.Repeat([]byte{byte(lsn), byte(lsn >> 8)}, maxFrameBody/4+500) }
	bigs := [][]byte{big(first + 1), big(first + 2), big(first + 3)}
	appendGroup(t, l, gate, bigs...)
	note(first, variedBody(first))
	note(first+1, bigs...)
	first = l.LastLSN() + 1
	writeBodies(t, l, 20)
	for i := range uint64(20) {
		note(first+i, variedBody(first+i))
	}
	last := l.LastLSN()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	pl.check(t, last)
	if got := int64(pl.frames); got <= batches.Load() {
		t.Fatalf("%d frames reported for %d batches: no batch of several frames", got, batches.Load())
	}
	if segs, _, _ := ListSegments(dir); len(segs) < 5 {
		t.Fatalf("only %d segments: no rolls to test", len(segs))
	}

	compare := func(what string, pos Position, rec Record) error {
		p, ok := pl.get(rec.LSN)
		switch {
		case !ok:
			return fmt.Errorf("%s: record %d was never reported written", what, rec.LSN)
		case SegmentName(p.seg) != pos.File || p.off != pos.Offset:
			return fmt.Errorf("%s: record %d: OnWritten said %s offset %d, %s says %s offset %d",
				what, rec.LSN, SegmentName(p.seg), p.off, what, pos.File, pos.Offset)
		case !bytes.Equal(rec.Body, bodies[rec.LSN]):
			return fmt.Errorf("%s: record %d has another body", what, rec.LSN)
		}
		return nil
	}
	replayed := 0
	l2, _, err := Open(dir, withDir(Options{SegmentSize: 4096}), 0, func(pos Position, rec Record) error {
		replayed++
		return compare("open", pos, rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := Scan(dir, 0, 0, func(pos Position, rec Record) error { return compare("scan", pos, rec) })
	if err != nil || replayed != int(last) || res.Records != int(last) {
		t.Fatalf("scan %+v, %v; %d replayed, want %d", res, err, replayed, last)
	}

	// The bytes at the reported offsets are the bodies.
	files := map[uint64]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for lsn := uint64(1); lsn <= last; lsn++ {
		p, _ := pl.get(lsn)
		f := files[p.seg]
		if f == nil {
			if f, err = os.Open(filepath.Join(dir, SegmentName(p.seg))); err != nil {
				t.Fatal(err)
			}
			files[p.seg] = f
		}
		got := make([]byte, len(bodies[lsn]))
		if _, err := f.ReadAt(got, p.off); err != nil || !bytes.Equal(got, bodies[lsn]) {
			t.Fatalf("record %d: the bytes at %s offset %d are not its body (%v)", lsn, SegmentName(p.seg), p.off, err)
		}
	}
}

// TestReadAtRoundTrip: bodies appended across several segments read back
// byte for byte through Log.ReadAt at the offsets OnWritten gave, without
// the Log's reader ever listing the directory, and through a BodyReader of
// the closed directory.
func TestReadAtRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cfs := &countFS{FS: OSFS()}
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 2048, FS: cfs, OnWritten: pl.record, MaxOpenSegments: 4})
	writeBodies(t, l, 400)
	last := l.LastLSN()
	pl.check(t, last)
	if segs := l.Segments(); len(segs) < 20 {
		t.Fatalf("only %d segments", len(segs))
	}
	_, _, listed := cfs.counts()
	order := rand.Perm(int(last))
	for _, i := range order {
		lsn := uint64(i) + 1
		p, _ := pl.get(lsn)
		if err := readBody(l.ReadAt, p, lsn); err != nil {
			t.Fatal(err)
		}
	}
	if open, most, readDirs := cfs.counts(); readDirs != listed || most > 4 || open > 4 {
		t.Fatalf("the Log's reader listed the directory %d times; %d files open, %d at most", readDirs-listed, open, most)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if open, _, _ := cfs.counts(); open != 0 {
		t.Fatalf("%d segment files open after Close", open)
	}
	if err := l.ReadAt(1, SegmentHeaderSize, make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadAt after Close: %v", err)
	}

	r := NewBodyReader(OSFS(), dir, 0)
	for _, i := range rand.Perm(int(last)) {
		lsn := uint64(i) + 1
		p, _ := pl.get(lsn)
		if err := readBody(r.ReadAt, p, lsn); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.ReadAt(1, SegmentHeaderSize, make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadAt after Close: %v", err)
	}
}

// TestBodyReaderFollowsNewSegments: a BodyReader without a Log, used while
// the Log rolls, finds records in segments made after its last listing,
// even when it already knew (and had open) the segment before them.
func TestBodyReaderFollowsNewSegments(t *testing.T) {
	dir := t.TempDir()
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 1500, OnWritten: pl.record})
	defer l.Close()
	r := NewBodyReader(OSFS(), dir, 2)
	defer r.Close()
	for range 30 {
		writeBodies(t, l, 3)
		for _, lsn := range []uint64{l.LastLSN(), 1, l.LastLSN() - 1} {
			p, _ := pl.get(lsn)
			if err := readBody(r.ReadAt, p, lsn); err != nil {
				t.Fatal(err)
			}
		}
	}
	if segs := l.Segments(); len(segs) < 10 {
		t.Fatalf("only %d segments", len(segs))
	}
}

// TestBodyReaderBoundsOpenFiles: reading across 50 segments in random order
// from 8 goroutines never has more than the bound of files open, through a
// Log or a reader of its own, and none stays open after Close.
func TestBodyReaderBoundsOpenFiles(t *testing.T) {
	dir := t.TempDir()
	cfs := &countFS{FS: OSFS()}
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 1024, Sync: SyncNever, FS: cfs, OnWritten: pl.record, MaxOpenSegments: 4})
	for l.LastLSN() == 0 || len(l.Segments()) < 50 {
		writeBodies(t, l, 10)
	}
	last := l.LastLSN()
	cfs.resetMost()
	readAll := func(read func(uint64, int64, []byte) error) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for _, i := range rand.Perm(int(last)) {
					lsn := uint64(i) + 1
					p, _ := pl.get(lsn)
					if err := readBody(read, p, lsn); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	readAll(l.ReadAt)
	if _, most, _ := cfs.counts(); most > 4 {
		t.Fatalf("%d segment files open for reading at once, bound 4", most)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if open, _, _ := cfs.counts(); open != 0 {
		t.Fatalf("%d segment files open after Close", open)
	}

	cfs.resetMost()
	r := NewBodyReader(cfs, dir, 3)
	readAll(r.ReadAt)
	if _, most, _ := cfs.counts(); most > 3 {
		t.Fatalf("%d segment files open for reading at once, bound 3", most)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if open, _, _ := cfs.counts(); open != 0 {
		t.Fatalf("%d segment files open after Close", open)
	}
}

// TestReadAtRacesTruncateFront: reads of live bodies in random order while
// the Log appends, rolls and removes front segments return the right bytes,
// or ErrBodyGone for a record whose segment a TruncateFront begun before the
// read removed; never other bytes or another error. No file stays open.
func TestReadAtRacesTruncateFront(t *testing.T) {
	dir := t.TempDir()
	cfs := &countFS{FS: OSFS(), slow: true}
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 1024, Sync: SyncNever, FS: cfs, OnWritten: pl.record, MaxOpenSegments: 3})
	var cut atomic.Uint64     // TruncateFront was called with this index (or a lower one runs)
	var written atomic.Uint64 // records reported written
	done := make(chan struct{})
	var werr error
	records := 1000 // 5 truncations under the readers; the long tests make 47
	if testrule.Long {
		records = 6000
	}
	go func() {
		defer close(done)
		for i := 1; i <= records; i++ {
			_, c := l.Append(1, variedBody(uint64(i)))
			if i%8 == 0 {
				if werr = c.Wait(); werr != nil {
					return
				}
				written.Store(uint64(i))
			}
			if i%120 == 0 && i > 400 {
				index := uint64(i - 300)
				cut.Store(index)
				if werr = l.TruncateFront(index); werr != nil {
					return
				}
			}
		}
	}()
	var ok, gone atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				w := written.Load()
				if w == 0 {
					continue
				}
				// Half the reads go to the records the next TruncateFront
				// removes, and a few to those already removed.
				lo, hi := max(1, int64(cut.Load())-60), int64(w)
				if rand.IntN(2) == 0 {
					hi = min(hi, lo+200)
				}
				lsn := uint64(lo + rand.Int64N(hi-lo+1))
				p, found := pl.get(lsn)
				if !found {
					t.Errorf("record %d below %d written was not reported", lsn, w)
					return
				}
				err := readBody(l.ReadAt, p, lsn)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrBodyGone) && lsn < cut.Load():
					gone.Add(1)
				default:
					t.Errorf("read of record %d (truncation at %d): %v", lsn, cut.Load(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d reads returned the body, %d found it gone", ok.Load(), gone.Load())
	if ok.Load() == 0 || gone.Load() == 0 {
		t.Fatalf("%d reads returned the body, %d found it gone: the race was not exercised", ok.Load(), gone.Load())
	}
	if open, most, _ := cfs.counts(); open != 0 || most > 3 {
		t.Fatalf("%d segment files open after Close, %d at most at once (bound 3)", open, most)
	}
}

// blockFS blocks the next ReadAt of a segment file opened for reading once
// armed, until the test lets it go.
type blockFS struct {
	FS
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (b *blockFS) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed, b.entered, b.release = true, make(chan struct{}), make(chan struct{})
}

func (b *blockFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := b.FS.OpenFile(name, flag, perm)
	if err != nil || flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		return f, err
	}
	return &blockFile{File: f, fs: b}, nil
}

type blockFile struct {
	File
	fs *blockFS
}

func (f *blockFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	armed, entered, release := f.fs.armed, f.fs.entered, f.fs.release
	f.fs.armed = false
	f.fs.mu.Unlock()
	if armed {
		close(entered)
		<-release
	}
	return f.File.ReadAt(p, off)
}

// TestReadHoldsFileAcrossTruncateFront: a read that holds its file when
// TruncateFront removes the segment finishes with the right bytes, the file
// is closed when it does, and the next read of that segment finds it gone.
func TestReadHoldsFileAcrossTruncateFront(t *testing.T) {
	dir := t.TempDir()
	bfs := &blockFS{FS: OSFS()}
	cfs := &countFS{FS: bfs}
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 1024, FS: cfs, OnWritten: pl.record})
	writeBodies(t, l, 30)
	segs := l.Segments()
	p, _ := pl.get(2)
	bfs.arm()
	res := make(chan error, 1)
	go func() { res <- readBody(l.ReadAt, p, 2) }()
	<-bfs.entered
	if err := l.TruncateFront(segs[2].First); err != nil {
		t.Fatal(err)
	}
	if fileExists(filepath.Join(dir, segs[0].Name)) {
		t.Fatal("the segment was not removed")
	}
	if open, _, _ := cfs.counts(); open != 1 {
		t.Fatalf("%d files open while the read holds one", open)
	}
	close(bfs.release)
	if err := <-res; err != nil {
		t.Fatalf("the read that held the removed file: %v", err)
	}
	if open, _, _ := cfs.counts(); open != 0 {
		t.Fatalf("%d files open after the last read of the removed segment", open)
	}
	if err := readBody(l.ReadAt, p, 2); !errors.Is(err, ErrBodyGone) {
		t.Fatalf("a read after the removal: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBodyGone: a record before the first segment, or whose segment
// TruncateFront removed, gives ErrBodyGone naming the record, the offset
// and a file, through the Log and a reader of its own that had the removed
// file open.
func TestBodyGone(t *testing.T) {
	dir := t.TempDir()
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 1024, OnWritten: pl.record})
	defer l.Close()
	writeBodies(t, l, 60)
	segs := l.Segments()
	if len(segs) < 4 || segs[1].First <= 2 {
		t.Fatalf("segments %v: want 4 or more, the first holding record 2", segs)
	}
	r := NewBodyReader(OSFS(), dir, 0)
	defer r.Close()
	p5, _ := pl.get(2)
	if err := readBody(r.ReadAt, p5, 2); err != nil { // opens the first segment
		t.Fatal(err)
	}
	if err := l.TruncateFront(segs[2].First); err != nil {
		t.Fatal(err)
	}
	first := SegmentName(segs[2].First)
	check := func(what string, err error, lsn uint64, off int64, names ...string) {
		t.Helper()
		if !errors.Is(err, ErrBodyGone) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrBodyGone", what, err)
		}
		for _, s := range append(names, fmt.Sprintf("record %d", lsn), fmt.Sprintf("offset %d", off)) {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("%s: %q does not say %q", what, err, s)
			}
		}
	}
	// The Log knows the segments are gone without looking.
	check("log", readBody(l.ReadAt, p5, 2), 2, p5.off, first)
	// The reader has the first segment open and cannot know it is gone
	// without looking: it reads the right bytes from the file it holds (an
	// open file outlives its unlinking). A segment it never opened is found
	// gone, and that listing drops the first one too.
	if err := readBody(r.ReadAt, p5, 2); err != nil {
		t.Fatal(err)
	}
	pGone, _ := pl.get(segs[1].First)
	check("reader", readBody(r.ReadAt, pGone, segs[1].First), segs[1].First, pGone.off, SegmentName(segs[1].First), first)
	check("reader, held file", readBody(r.ReadAt, p5, 2), 2, p5.off, first)
	// Before the first segment there ever was.
	l2dir := t.TempDir()
	l2, _, err := Open(l2dir, withDir(Options{}), 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	check("before start", l2.ReadAt(7, 300, make([]byte, 10)), 7, 300, SegmentName(100))
	r2 := NewBodyReader(OSFS(), l2dir, 0)
	defer r2.Close()
	check("reader before start", r2.ReadAt(7, 300, make([]byte, 10)), 7, 300, SegmentName(100))
	// A remaining record still reads.
	lsn := segs[2].First
	p, _ := pl.get(lsn)
	if err := readBody(l.ReadAt, p, lsn); err != nil {
		t.Fatal(err)
	}
	if err := readBody(r.ReadAt, p, lsn); err != nil {
		t.Fatal(err)
	}
}

// TestBodyReaderShortFile: a body that runs past the end of its segment is
// corruption naming the file and offset; another read error is passed on
// with them, and is not corruption.
func TestBodyReaderShortFile(t *testing.T) {
	dir := t.TempDir()
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{OnWritten: pl.record})
	writeBodies(t, l, 20)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p, _ := pl.get(20)
	body := variedBody(20)
	name := SegmentName(p.seg)
	cutFile(t, filepath.Join(dir, name), p.off+int64(len(body))/2)
	r := NewBodyReader(OSFS(), dir, 0)
	defer r.Close()
	err := readBody(r.ReadAt, p, 20)
	ce := asCorruption(t, "short body", err)
	if ce.File != name || ce.Offset != p.off || ce.Index != 20 {
		t.Fatalf("corruption at %s offset %d index %d, want %s offset %d index 20", ce.File, ce.Offset, ce.Index, name, p.off)
	}
	if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), fmt.Sprint(p.off)) {
		t.Fatalf("%q does not name the file and offset", err)
	}
	if p1, _ := pl.get(1); readBody(r.ReadAt, p1, 1) != nil {
		t.Fatal("a whole body of the cut file does not read")
	}

	ffs := NewFaultFS(OSFS(), 0)
	r2 := NewBodyReader(ffs, dir, 0)
	defer r2.Close()
	ffs.FailNext("file.readat")
	p1, _ := pl.get(1)
	err = readBody(r2.ReadAt, p1, 1)
	if !errors.Is(err, ErrInjected) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) ||
		!strings.Contains(err.Error(), fmt.Sprintf("offset %d", p1.off)) {
		t.Fatalf("injected read error: %v", err)
	}
	if err := readBody(r2.ReadAt, p1, 1); err != nil {
		t.Fatalf("read after the injected error: %v", err)
	}
}

// TestVerifyHeaders: a sealed segment's headers verify without its bodies
// being read, a flipped byte in a body goes unnoticed (the body's own CRC
// catches it when it is read), and a flipped byte in a frame header or a
// record header, a wrong directory or range, or a cut file is corruption.
func TestVerifyHeaders(t *testing.T) {
	dir := t.TempDir()
	pl := newPlacements()
	l, _ := openLog(t, dir, Options{SegmentSize: 64 << 10, Sync: SyncNever, OnWritten: pl.record})
	writeBodies(t, l, 400)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _, err := ListSegments(dir)
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	s := segs[0]
	last := segs[1].First - 1
	if err := VerifyHeaders(OSFS(), s.Path, testDir, s.First, last); err != nil {
		t.Fatalf("a good segment: %v", err)
	}
	good, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pl.get(s.First + 3)
	if p.seg != s.First {
		t.Fatalf("record %d is in segment %d, not in the first", s.First+3, p.seg)
	}
	for _, tc := range []struct {
		name    string
		edit    func([]byte) []byte
		dir     DirID
		first   uint64
		last    uint64
		corrupt bool
	}{
		{"a body byte", func(b []byte) []byte { b[p.off+1] ^= 0xff; return b }, testDir, s.First, last, false},
		{"a frame header byte", func(b []byte) []byte { b[SegmentHeaderSize+9] ^= 1; return b }, testDir, s.First, last, true},
		{"a record header byte", func(b []byte) []byte { b[SegmentHeaderSize+FrameHeaderSize+5] ^= 1; return b }, testDir, s.First, last, true},
		{"cut in a frame", func(b []byte) []byte { return b[:len(b)-3] }, testDir, s.First, last, true},
		{"another directory", func(b []byte) []byte { return b }, DirID{7}, s.First, last, true},
		{"a range it does not hold", func(b []byte) []byte { return b }, testDir, s.First, last + 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), s.Name)
			if err := os.WriteFile(path, tc.edit(append([]byte(nil), good...)), 0o600); err != nil {
				t.Fatal(err)
			}
			err := VerifyHeaders(OSFS(), path, tc.dir, tc.first, tc.last)
			switch {
			case tc.corrupt && !errors.Is(err, ErrCorrupt):
				t.Fatalf("VerifyHeaders = %v, want corruption", err)
			case !tc.corrupt && err != nil:
				t.Fatalf("VerifyHeaders = %v, want nil", err)
			}
		})
	}
}
