package wal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for zero Options fields.
const (
	DefaultSegmentSize int64         = 4 << 20
	DefaultSyncEvery   time.Duration = time.Second
	DefaultFilePerm    os.FileMode   = 0o600
	DefaultDirPerm     os.FileMode   = 0o700
)

// Options configure a Log. The zero value is a sane production default.
type Options struct {
	SegmentSize int64      // target segment size; a segment is closed once it reaches it
	Sync        SyncPolicy // see SyncPolicy
	// Dir is the directory ID every segment carries (required): Open
	// refuses a segment of another directory, and new segments get it.
	Dir DirID
	// MustReach makes Open refuse, before it changes anything, a log whose
	// last verified record is before it (0: no such need). The owner knows
	// of records that must be there, e.g. those a snapshot that does not
	// verify claims to cover.
	MustReach uint64
	FS        FS           // walq's own file operations; default OSFS()
	FilePerm  os.FileMode  // default 0600
	DirPerm   os.FileMode  // default 0700
	Logger    *slog.Logger // may be nil
	// OnSync is called by the committer after each tail fsync with its
	// latency; it must return quickly. May be nil.
	OnSync func(d time.Duration)
	// OnBatch is called by the committer after each WriteBatch with the
	// number of records and their bytes; it must return quickly. May be nil.
	OnBatch func(records int, bytes int)
	// KeepDir is where MoveFront moves sealed segments whose records are
	// no longer needed for replay but whose bodies are ("": none).
	KeepDir string
	// Accept, when set, is called by Open once every record from the
	// start index on is replayed and verified, and before Open changes
	// anything on the disk (a torn tail cut and saved, a segment created):
	// with what the pass found and the segments as listed. An error
	// refuses the open, and the directory is left as it was, so that a
	// caller's own checks (files the replay did not read) refuse before
	// the log repairs anything.
	Accept func(info OpenInfo, segs []Segment) error
	// OnWritten is called by the committer after each frame is written to the
	// tail segment (after the write returned, before any fsync), in LSN order,
	// with where the frame's record bodies now lie. It must return quickly and
	// must not call the Log. w.Bodies is reused after it returns. May be nil.
	OnWritten func(w Written)
	// MaxOpenSegments bounds the segment files ReadAt keeps open (0:
	// DefaultMaxOpenSegments).
	MaxOpenSegments int
}

// Written says where the records of one frame were written.
type Written struct {
	Segment uint64  // first LSN of the segment file (its name), see SegmentName
	First   uint64  // LSN of the frame's first record
	Bodies  []int64 // Bodies[i]: offset in the segment file of record First+i's body
}

func (o Options) withDefaults() Options {
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.Sync.mode == syncInterval && o.Sync.every <= 0 {
		o.Sync.every = DefaultSyncEvery
	}
	if o.FS == nil {
		o.FS = OSFS()
	}
	if o.FilePerm == 0 {
		o.FilePerm = DefaultFilePerm
	}
	if o.DirPerm == 0 {
		o.DirPerm = DefaultDirPerm
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxOpenSegments <= 0 {
		o.MaxOpenSegments = DefaultMaxOpenSegments
	}
	return o
}

// OpenInfo reports what Open found and did.
type OpenInfo struct {
	// First and Last are the log's index range after recovery. An empty log
	// has Last == First-1 (a fresh one First 1, Last 0).
	First, Last uint64
	Replayed    int // records passed to apply
	// Covered counts the segments that lie wholly before from: Open neither
	// read nor verified them (bit rot there cannot refuse the open, and
	// nothing there is needed). CoveredLast is the last LSN they hold, 0
	// when Covered is 0; TruncateFront(CoveredLast+1) removes them.
	Covered     int
	CoveredLast uint64
	CutBytes    int64 // bytes cut from the end of the last segment (repair.go)
	// Cut describes what was cut, nil when nothing was.
	Cut *TailInfo
	// BrokenFile holds the first 64 KiB of the cut bytes (all of them when
	// fewer); "" when nothing was cut or the copy could not be written.
	BrokenFile       string
	LeftoversCleaned []string // temp files of interrupted segment creations removed
	Segments         int      // segment files after recovery
}

// Log is the write-ahead log. Append is safe for concurrent use, but LSN
// order is the order of Append calls, so callers that need a meaningful order
// serialize their Appends (walq's sequencer does, under its own lock).
type Log struct {
	dir    string
	opts   Options
	fsys   FS
	logger *slog.Logger

	// mu guards the fields up to durable. It is held only to number, encode
	// and queue a record, never across I/O.
	mu sync.Mutex
	// last is the LSN of the last appended record. LSNs are handed out under
	// mu, one more each time, so LSN order is Append order.
	last    uint64
	pending *batch // appended, not yet taken by the committer; never nil
	// flying is the Commit of the batch the committer took and has not
	// released yet (nil when none): what Barrier waits for when nothing
	// is pending.
	flying  *Commit
	failure error // sticky once set; wraps ErrFailed
	closed  bool
	// holds counts the Holds not yet released: while any is, appends
	// do not kick the committer.
	holds int
	// failed is closed when failure is set (setFailureLocked), so exactly
	// once, and never by Close.
	failed chan struct{}

	// durable is the last LSN that is durable under the sync policy: fsynced
	// for SyncAlways, written to the OS for the others. It only grows.
	durable atomic.Uint64
	// fsynced is the last LSN an fsync of the log covers (FsyncedLSN).
	fsynced atomic.Uint64

	kick      chan struct{} // capacity 1: pending has records
	reqs      chan request  // Sync, TruncateFront and Close, run by the committer
	stopped   chan struct{} // closed when the committer returns
	closeOnce sync.Once
	closeErr  error

	// bodies reads record bodies for ReadAt. The committer tells it of every
	// segment it creates or removes, so it never lists the directory.
	bodies *BodyReader

	// Owned by the committer goroutine alone once Open returns.
	tail       tailSegment
	spare      *batch // the batch that becomes pending when the current one is taken
	written    uint64 // last LSN handed to the OS
	synced     uint64 // last LSN covered by an fsync; <= written
	syncTimer  *time.Timer
	timerArmed bool          // SyncInterval: syncTimer runs; set only while written > synced
	wakes      atomic.Uint64 // rounds of the committer (Wakes)
	barriers   atomic.Uint64 // Barriers that found a record not durable (BarrierWaits)
	offsets    []int64       // OnWritten's Bodies, reused
	// rollAfter is the tail size at which a roll that could not make the
	// next segment is tried again (0: at SegmentSize).
	rollAfter    int64
	rollFailures atomic.Uint64 // rolls put off (RollFailures)
	unreserved   atomic.Uint64 // segments begun without their space set aside (Unreserved)
	// unsettled lists the segments whose space past their ends the first
	// write or roll gives back before the tail's is set aside (settle).
	unsettled []Segment
	settled   bool
}

// tailSegment is the segment frames are appended to.
type tailSegment struct {
	f        File
	name     string
	first    uint64
	size     int64
	mac      *macer
	reserved int64 // bytes from its start set aside on the disk (preallocated); 0: none
}

// maxFrameBody is the payload after which a batch starts another frame: a
// batch is written by one call, but a frame is what recovery verifies whole,
// and a bounded frame keeps a torn write's cut bounded too.
const maxFrameBody = 8 << 20

// batch is a group of records committed by one write and one fsync: one
// frame, or a few when it is large.
type batch struct {
	frames      []*frameBuilder // frames[:n] are in use
	firsts      []uint64        // first LSN of each frame in use
	n           int
	first, last uint64
	records     int
	commit      *Commit // nil while the batch is empty
}

func (b *batch) reset() {
	for _, f := range b.frames[:b.n] {
		f.reset()
	}
	b.n, b.firsts = 0, b.firsts[:0]
	b.first, b.last, b.records = 0, 0, 0
	b.commit = nil
}

// size is what the batch takes in the segment: its frames, sealed.
func (b *batch) size() int64 {
	var n int64
	for _, f := range b.frames[:b.n] {
		n += int64(f.size())
	}
	return n
}

// idleBuffer is what a batch's buffers keep while the log is idle: a
// burst of large batches grows them (a frame's records and its sealed
// copy, up to maxFrameBody each), and they are let go once nothing is
// pending, so memory returns to its size before the burst. Under steady
// load they stay, and nothing is allocated again.
const idleBuffer = 1 << 20

// trim lets go of the buffers of an empty batch beyond idleBuffer.
func (b *batch) trim() {
	if b.n != 0 {
		return
	}
	keep := 0
	if len(b.frames) > 0 {
		if f := b.frames[0]; cap(f.hdrs)+cap(f.bodies)+cap(f.out) <= idleBuffer {
			keep = 1
		}
	}
	clear(b.frames[keep:])
	b.frames = b.frames[:keep]
}

// frame returns the frame the next record of lsn goes to.
func (b *batch) frame(lsn uint64) *frameBuilder {
	if b.n > 0 && b.frames[b.n-1].payload() < maxFrameBody {
		return b.frames[b.n-1]
	}
	if b.n == len(b.frames) {
		b.frames = append(b.frames, &frameBuilder{})
	}
	b.n++
	b.firsts = append(b.firsts, lsn)
	return b.frames[b.n-1]
}

// Commit is the completion of one batch, shared by all its records.
type Commit struct {
	done chan struct{}
	err  error // written before done is closed, read only after
}

func newCommit() *Commit { return &Commit{done: make(chan struct{})} }

func failedCommit(err error) *Commit {
	c := newCommit()
	c.release(err)
	return c
}

func (c *Commit) release(err error) {
	c.err = err
	close(c.done)
}

// durableCommit is a Commit that is done already, with no error: what a
// Barrier returns when every record is durable. It is never released again.
var durableCommit = failedCommit(nil)

// Done is closed when the batch is durable under the sync policy or failed.
func (c *Commit) Done() <-chan struct{} { return c.done }

// Wait blocks until Done and returns nil when the batch is durable under the
// sync policy, or an error wrapping ErrFailed (or ErrClosed) otherwise.
func (c *Commit) Wait() error {
	<-c.done
	return c.err
}

type requestOp int

const (
	opSync requestOp = iota
	opSyncRoll
	opTruncateFront
	opMoveFront
	opRemoveKept
	opClose
)

type request struct {
	op    requestOp
	index uint64
	reply chan result
}

type result struct {
	lsn uint64
	err error
}

// Open recovers the log in dir (created with DirPerm if missing), calls
// apply for every record with LSN >= from in order (from == 0: all), and
// opens it for appending. A fresh log starts at from (1 when from is 0).
// Recovery:
//
//  1. removes the temp files of interrupted segment creations;
//  2. refuses with a *CorruptionError when the log starts after from;
//  3. reads the log once: segments wholly before from are neither read nor
//     verified (OpenInfo.Covered); the segment holding from and every later
//     one are made to read from the disk rather than the page cache
//     (readFromDisk), verified (header and directory ID, every frame, no
//     gap or overlap between segments) and their records from from on
//     passed to apply. Corruption is a *CorruptionError, and so is a log
//     that ends before from-1 or before MustReach; either way nothing has
//     been modified, though apply may have seen records;
//  4. calls Options.Accept, whose error refuses the open (nothing
//     modified yet either), then cuts the end of the last segment when
//     the rule at the top of repair.go says so;
//  5. opens the last segment for appending (creating the first one for a
//     fresh log) and starts the committer.
func Open(dir string, opts Options, from uint64, apply func(Position, Record) error) (*Log, OpenInfo, error) {
	opts = opts.withDefaults()
	fsys := opts.FS
	var info OpenInfo
	fail := func(err error) (*Log, OpenInfo, error) {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			return nil, info, err
		}
		return nil, info, fmt.Errorf("open log %s: %w", dir, err)
	}
	if opts.Dir.IsZero() {
		return fail(errors.New("no directory id given"))
	}
	if err := ensureDir(fsys, dir, opts.DirPerm); err != nil {
		return fail(err)
	}
	segs, others, err := listSegments(fsys, dir)
	if err != nil {
		return fail(err)
	}
	for _, name := range others {
		if IsSegmentTemp(name) {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
				return fail(fmt.Errorf("remove leftover %s: %w", name, err))
			}
			info.LeftoversCleaned = append(info.LeftoversCleaned, name)
		}
	}
	if len(info.LeftoversCleaned) > 0 {
		if err := fsys.SyncDir(dir); err != nil {
			return fail(fmt.Errorf("sync dir: %w", err))
		}
		opts.Logger.Info("walq: removed segments whose creation was interrupted", "dir", dir, "files", info.LeftoversCleaned)
	}
	if from == 0 {
		from = 1
		if len(segs) > 0 {
			from = segs[0].First
		}
	}
	fresh := len(segs) == 0
	info.First, info.Last = from, from-1
	if !fresh {
		info.First = segs[0].First
	}
	if from < info.First {
		return fail(&CorruptionError{Dir: dir, File: firstName(segs), Index: from,
			Err: reasonf("log starts at %d but replay needs %d", info.First, from)})
	}
	// Segments wholly before from are covered by the caller's snapshot:
	// the pass below neither reads nor verifies them.
	for info.Covered < len(segs)-1 && segs[info.Covered+1].First <= from {
		info.Covered++
	}
	if info.Covered > 0 {
		info.CoveredLast = segs[info.Covered].First - 1
	}

	// One pass verifies the segment holding from and every later one and
	// passes each record from on to apply. Corruption anywhere in it is
	// returned before anything is cut, so a refused open changes nothing.
	pass := &scanner{fsys: fsys, dir: dir, from: from, fromDisk: true, logger: opts.Logger,
		want: opts.Dir, promised: max(opts.MustReach, from-1)} // the caller's snapshot holds up to from-1
	if apply != nil {
		pass.fn = func(pos Position, rec Record) error {
			if err := apply(pos, rec); err != nil {
				return fmt.Errorf("replay record %d: %w", rec.LSN, err)
			}
			return nil
		}
	}
	if !fresh {
		err = pass.pass(segs)
		info.Replayed = pass.res.Records
		if errors.Is(err, errVanished) {
			return fail(fmt.Errorf("a segment vanished during recovery: %w", err))
		}
		if err != nil {
			return fail(err)
		}
		info.Last = pass.res.Last
	}
	if from > info.Last+1 {
		return fail(&CorruptionError{Dir: dir, File: lastName(segs), Index: from,
			Err: reasonf("log ends at %d before %d", info.Last, from)})
	}
	if opts.MustReach > info.Last {
		return fail(&CorruptionError{Dir: dir, File: lastName(segs), Index: opts.MustReach,
			Err: reasonf("log ends at %d before %d, which it must reach", info.Last, opts.MustReach)})
	}
	if opts.Accept != nil {
		if err := opts.Accept(info, segs); err != nil {
			return fail(err)
		}
	}
	if tail := pass.res.Tail; tail != nil {
		broken, err := cutTornTail(fsys, dir, tail, opts.FilePerm, opts.Logger)
		if err != nil {
			return fail(err)
		}
		info.CutBytes, info.BrokenFile, info.Cut = tail.Bytes, broken, tail
		var keptBytes int64
		if broken != "" {
			keptBytes = min(tail.Bytes, brokenKeep)
		}
		opts.Logger.Warn("walq: cut the unsynced end of the log", "dir", dir, "segment", tail.File,
			"offset", tail.Offset, "bytes", tail.Bytes, "reason", tail.Reason, "watermark", tail.Watermark,
			"later_frames", tail.Later, "saved_as", broken, "saved_bytes", keptBytes)
	}
	l := &Log{
		dir:     dir,
		opts:    opts,
		fsys:    fsys,
		logger:  opts.Logger,
		last:    info.Last,
		pending: &batch{},
		failed:  make(chan struct{}),
		kick:    make(chan struct{}, 1),
		reqs:    make(chan request),
		stopped: make(chan struct{}),
		spare:   &batch{},
		written: info.Last,
		synced:  info.Last,
	}
	firsts := make([]uint64, len(segs))
	for i, s := range segs {
		firsts[i] = s.First
	}
	l.bodies = newLogBodyReader(fsys, dir, opts.MaxOpenSegments, firsts)
	if opts.KeepDir != "" {
		l.bodies.SetKeepDir(opts.KeepDir)
		if err := l.bodies.relistKept(); err != nil {
			return fail(fmt.Errorf("list kept segments: %w", err))
		}
	}
	if fresh {
		err = l.createSegment(from)
		l.settled = true
	} else {
		err = l.openTail(segs[len(segs)-1])
		l.unsettled = segs[max(0, len(segs)-2):]
	}
	if err != nil {
		return fail(err)
	}
	l.durable.Store(info.Last)
	l.fsynced.Store(info.Last)
	l.syncTimer = time.NewTimer(time.Hour)
	l.syncTimer.Stop()
	info.Segments = len(segs)
	if fresh {
		info.Segments = 1
	}
	go l.run()
	return l, info, nil
}

func firstName(segs []Segment) string {
	if len(segs) == 0 {
		return ""
	}
	return segs[0].Name
}

func lastName(segs []Segment) string {
	if len(segs) == 0 {
		return ""
	}
	return segs[len(segs)-1].Name
}

// openTail opens the last segment, verified by recovery, for appending.
func (l *Log) openTail(seg Segment) error {
	f, err := l.fsys.OpenFile(seg.Path, os.O_RDWR|os.O_APPEND, l.opts.FilePerm)
	if err != nil {
		return fmt.Errorf("open tail %s: %w", seg.Name, err)
	}
	var head [SegmentHeaderSize]byte
	hdr, err := readSegmentHeader(f, head[:])
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("open tail %s: %w", seg.Name, err)
	}
	l.tail = tailSegment{f: f, name: seg.Name, first: seg.First, size: size, mac: newMacer(hdr.salt)}
	return nil
}

// settle, run by the committer before its first write or roll, gives back
// what a process killed in a roll, or a failed log, left set aside past
// the ends of the last two segments, and sets the tail's space aside
// anew. It waits for the first write rather than running in Open so that
// an open its caller refuses (the queue's recovery) changes nothing on
// the disk.
func (l *Log) settle() {
	if l.settled {
		return
	}
	l.settled = true
	for _, seg := range l.unsettled {
		l.giveBack(seg)
	}
	l.unsettled = nil
	l.tail.reserved = l.reserve(l.tail.f, l.tail.size, l.opts.SegmentSize)
}

func readSegmentHeader(f File, buf []byte) (segmentHeader, error) {
	if _, err := f.ReadAt(buf, 0); err != nil {
		return segmentHeader{}, err
	}
	return decodeSegmentHeader(buf)
}

// createSegment makes a new segment, whose first record is first, the
// tail (Open, on a log with none).
func (l *Log) createSegment(first uint64) error {
	seg, err := l.newSegment(first, l.opts.SegmentSize)
	if err != nil {
		return err
	}
	l.tail = seg
	l.bodies.added(first)
	return nil
}

// errSegmentLeft wraps a failure of newSegment after its file took its name:
// the directory may hold a segment that the log does not write to.
var errSegmentLeft = errors.New("a segment file may be left in the directory")

// newSegment makes the segment whose first record is first, ready to be
// the tail: the header, with a fresh salt, is written to a temp file and
// fsynced, the file's first want bytes are set aside where the FS can (Preallocator; without it, or on a disk without the room, it is
// made all the same, and counted by Unreserved), then it is renamed and
// the directory fsynced, before any frame can go in. So a segment file
// always has a durable header, and its directory entry is durable before
// any record in it is reported.
//
// A failure before the rename changes nothing: the temp file is removed
// (Open removes one left). After it, the segment is removed again, and
// the error wraps errSegmentLeft when that cannot be made durable: a
// header-only segment that stayed would claim the records the tail goes
// on to take.
func (l *Log) newSegment(first uint64, want int64) (tailSegment, error) {
	h := segmentHeader{dir: l.opts.Dir, first: first}
	if _, err := rand.Read(h.salt[:]); err != nil {
		return tailSegment{}, fmt.Errorf("segment salt: %w", err)
	}
	name := SegmentName(first)
	tmp := filepath.Join(l.dir, segmentTmpName(first))
	path := filepath.Join(l.dir, name)
	f, err := l.fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, l.opts.FilePerm)
	if err != nil {
		return tailSegment{}, fmt.Errorf("create segment %s: %w", name, err)
	}
	_, err = f.Write(appendSegmentHeader(nil, h))
	var reserved int64
	if err == nil {
		reserved = l.reserve(f, SegmentHeaderSize, want)
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fsys.Rename(tmp, path)
	}
	if err != nil {
		l.fsys.Remove(tmp) // best effort; Open removes leftovers
		return tailSegment{}, fmt.Errorf("create segment %s: %w", name, err)
	}
	err = l.fsys.SyncDir(l.dir)
	if err == nil {
		if f, err = l.fsys.OpenFile(path, os.O_WRONLY|os.O_APPEND, l.opts.FilePerm); err == nil {
			return tailSegment{f: f, name: name, first: first, size: SegmentHeaderSize, mac: newMacer(h.salt), reserved: reserved}, nil
		}
	}
	if rerr := l.fsys.Remove(path); rerr == nil && l.fsys.SyncDir(l.dir) == nil {
		return tailSegment{}, fmt.Errorf("create segment %s: %w", name, err)
	}
	return tailSegment{}, fmt.Errorf("create segment %s: %w (%w)", name, err, errSegmentLeft)
}

// reserve sets the first want bytes of segment f (size bytes long) aside
// on the disk where the FS can, and returns want, or 0 when it did not.
// Without it the segment is written all the same (counted by Unreserved):
// a disk without the room for a whole segment still takes the acks that
// free it. A failed preallocation is undone (ext4 keeps the blocks it did
// allocate).
func (l *Log) reserve(f File, size, want int64) int64 {
	if size >= want {
		return 0 // full: the next batch rolls
	}
	p, ok := l.fsys.(Preallocator)
	if !ok {
		l.unreserved.Add(1)
		return 0
	}
	if err := p.Preallocate(f, want); err != nil {
		l.unreserved.Add(1)
		if terr := f.Truncate(size); terr != nil {
			l.logger.Warn("walq: could not give back what a failed preallocation took", "err", terr)
		}
		if !errors.Is(err, ErrNoPreallocate) {
			l.logger.Warn("walq: could not set a segment's space aside; it is written without", "dir", l.dir, "err", err)
		}
		return 0
	}
	return want
}

// giveBack truncates segment seg to its size, which frees what was set
// aside past its end (a failure costs only that space). A segment without
// blocks past its end is left untouched, times and all.
func (l *Log) giveBack(seg Segment) {
	info, err := l.fsys.Stat(seg.Path)
	if err == nil && pastEnd(info) {
		err = l.fsys.Truncate(seg.Path, info.Size())
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.logger.Warn("walq: could not give back a sealed segment's space past its end", "segment", seg.Name, "err", err)
	}
}

// release gives back what the tail's reservation set aside past its end,
// once nothing more is written to it (truncating a file to its own size
// frees the blocks allocated beyond it). A failure costs only that space.
func (l *Log) release() {
	if l.tail.reserved == 0 || l.tail.f == nil {
		return
	}
	l.tail.reserved = 0
	if err := l.tail.f.Truncate(l.tail.size); err != nil {
		l.logger.Warn("walq: could not give back a sealed segment's unused space", "segment", l.tail.name, "err", err)
	}
}

// ensureDir creates dir when missing and makes its entry durable.
func ensureDir(fsys FS, dir string, perm os.FileMode) error {
	_, err := fsys.Stat(dir)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(filepath.Clean(dir)))
}

// ErrRecordTooLarge is returned by a Commit of a record whose body could
// never be framed (more than MaxFramePayload bytes); nothing was appended.
var ErrRecordTooLarge = errors.New("walq: record too large for a frame")

// Append numbers a record of the default queue, encodes it and queues it
// for the next batch; it does no I/O. It returns the record's LSN and the
// Commit of its batch. body is copied. After a failure or Close it returns
// LSN 0 and a Commit that has already failed.
func (l *Log) Append(typ byte, body []byte) (lsn uint64, c *Commit) {
	return l.append(typ, 0, func(dst []byte) []byte { return append(dst, body...) })
}

// AppendEncoded is Append with the body written by encode, which appends it
// to dst and returns the result. dst is a buffer the Log reuses, so the
// steady state costs no allocation per record. encode runs under the Log's
// lock and must not call the Log.
func (l *Log) AppendEncoded(typ byte, encode func(dst []byte) []byte) (lsn uint64, c *Commit) {
	return l.append(typ, 0, encode)
}

// AppendQueue is AppendEncoded for a record of the given queue.
func (l *Log) AppendQueue(queue uint64, typ byte, encode func(dst []byte) []byte) (lsn uint64, c *Commit) {
	return l.append(typ, queue, encode)
}

func (l *Log) append(typ byte, queue uint64, encode func(dst []byte) []byte) (uint64, *Commit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure != nil {
		return 0, failedCommit(l.failure)
	}
	if l.closed {
		return 0, failedCommit(ErrClosed)
	}
	lsn := l.last + 1
	p := l.pending
	f := p.frame(lsn)
	mark := f.mark()
	f.add(typ, queue, encode)
	if f.payload() > MaxFramePayload {
		f.undo(mark)
		if f.count == 0 {
			p.n--
			p.firsts = p.firsts[:p.n]
		}
		return 0, failedCommit(fmt.Errorf("%w: %d bytes", ErrRecordTooLarge, len(f.bodies)-mark.bodies))
	}
	if p.commit == nil {
		p.commit = newCommit()
		p.first = lsn
	}
	p.last = lsn
	p.records++
	l.last = lsn
	if l.holds == 0 {
		l.kickLocked()
	}
	return lsn, p.commit
}

func (l *Log) kickLocked() {
	select {
	case l.kick <- struct{}{}:
	default: // the committer has a kick waiting already
	}
}

// Hold keeps appends from waking the committer until the returned release
// is called, which hands it what was appended meanwhile. It is for a burst
// of appends whose caller waits for the last one only (recovery's endings
// of leases a crash left open): written as one batch, not as the small
// ones a committer woken by each append takes, each wake-up costing the
// appender more than the append. A Commit of a held record is done after
// the release at the earliest, unless a Sync (which the committer still
// serves) or a kick already waiting takes the batch first. Release may be
// called more than once.
func (l *Log) Hold() (release func()) {
	l.mu.Lock()
	l.holds++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.holds--
			if l.holds == 0 && l.pending.commit != nil {
				l.kickLocked()
			}
			l.mu.Unlock()
		})
	}
}

// Barrier returns a Commit that is done when every record appended before
// the call is durable under the sync policy, or the log failed: what an
// answer read from state that a record changed waits for before it is
// given, so that nothing a crash can take back is reported. It appends
// nothing, and when everything is durable already it costs a lock and an
// atomic load and returns a Commit that is done.
func (l *Log) Barrier() *Commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.durable.Load() >= l.last {
		return durableCommit
	}
	l.barriers.Add(1)
	switch {
	case l.failure != nil:
		return failedCommit(l.failure)
	case l.pending.commit != nil:
		return l.pending.commit // it holds l.last
	case l.flying != nil:
		return l.flying // it holds l.last: nothing came after it
	}
	// Not durable, nothing pending or being written: the committer took
	// the last batch and failed or closed before it was counted durable.
	if l.closed {
		return failedCommit(ErrClosed)
	}
	return failedCommit(fmt.Errorf("%w: record %d is not durable and not being written", ErrFailed, l.last))
}

// RollFailures reports how many times the log could not start its next
// segment and went on in the tail (see roll).
func (l *Log) RollFailures() uint64 { return l.rollFailures.Load() }

// Unreserved reports how many segments were begun, or reopened as the
// tail, without their space set aside: where the FS cannot preallocate,
// or the disk had not the room.
func (l *Log) Unreserved() uint64 { return l.unreserved.Load() }

// BarrierWaits is how many Barriers found a record not durable yet, and
// so gave a Commit that was not done.
func (l *Log) BarrierWaits() uint64 { return l.barriers.Load() }

// LastLSN returns the LSN of the last appended record.
func (l *Log) LastLSN() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// DurableLSN returns the last LSN durable under the sync policy: fsynced
// for SyncAlways, written to the OS for SyncInterval and SyncNever.
func (l *Log) DurableLSN() uint64 { return l.durable.Load() }

// FsyncedLSN returns the last LSN an fsync of the log covers since it was
// opened (what it found on disk counts as fsynced): DurableLSN under
// SyncAlways; under SyncInterval and SyncNever what lies past it is
// written to the OS and not yet safe from a power loss.
func (l *Log) FsyncedLSN() uint64 { return l.fsynced.Load() }

// Err returns the sticky failure, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failure
}

// Failed returns a channel that is closed when the Log fails (the first
// write, fsync or truncation failure; Err then returns it). It is never
// closed by Close, so waiters can select on it next to their own shutdown
// signal.
func (l *Log) Failed() <-chan struct{} { return l.failed }

// Fail makes the Log failed with err (which should wrap ErrFailed), as a
// failed write would: nothing appended and not yet written reaches the disk,
// and every later call fails. The owner uses it when it finds a reason to
// stop that the Log cannot see. It returns the sticky failure.
func (l *Log) Fail(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setFailureLocked(err)
	return l.failure
}

// Sync writes everything appended so far and fsyncs it whatever the policy,
// and returns the LSN now durable on disk.
func (l *Log) Sync() (uint64, error) {
	r := l.call(request{op: opSync})
	return r.lsn, r.err
}

// SyncRoll is Sync, and then seals the tail segment and starts a new one
// (when the tail holds any record), so that every record up to the LSN it
// returns lies in sealed segments, which TruncateFront can remove whole.
// Compaction calls it, so that what the snapshot covers leaves the disk
// with the truncation that follows, the tail included.
func (l *Log) SyncRoll() (uint64, error) {
	r := l.call(request{op: opSyncRoll})
	return r.lsn, r.err
}

// TruncateFront removes every segment whose records all lie before index
// (the tail segment never), oldest first, and fsyncs the directory; index-1
// must be <= DurableLSN. Whole files are removed and nothing is rewritten,
// so a crash in the middle leaves a log that starts later but has no gap.
// It runs in the committer, exclusive with writes. A ReadAt of a removed
// segment that has not taken hold of its file yet returns ErrBodyGone.
//
// A failure to remove a file, or to fsync the directory after, leaves the
// log as valid as before: it returns an error that does not wrap
// ErrFailed, and a later TruncateFront tries again. A removal that a crash
// then undoes brings back a segment wholly before the records the
// caller's snapshot covers, which Open skips (segments there may have
// gaps between them): none of its records is replayed.
func (l *Log) TruncateFront(index uint64) error {
	if durable := l.DurableLSN(); index > durable+1 {
		return fmt.Errorf("truncate front at %d: beyond the durable lsn %d", index, durable)
	}
	return l.call(request{op: opTruncateFront, index: index}).err
}

// MoveFront is TruncateFront that moves the segments into the keep
// directory (Options.KeepDir) instead of removing them: they leave the
// log, which starts later with no gap, and their records' bodies stay
// readable by ReadAt. Each is renamed (no byte is copied) to
// <first>-<last>.seg, its range of records; the keep directory and then
// the log directory are fsynced. A crash in the middle leaves each file
// in one place or the other, and readable in both.
func (l *Log) MoveFront(index uint64) error {
	if l.opts.KeepDir == "" {
		return fmt.Errorf("move front at %d: the log has no keep directory", index)
	}
	if durable := l.DurableLSN(); index > durable+1 {
		return fmt.Errorf("move front at %d: beyond the durable lsn %d", index, durable)
	}
	return l.call(request{op: opMoveFront, index: index}).err
}

// Kept lists the segments in the keep directory.
func (l *Log) Kept() ([]KeptFile, error) {
	if l.opts.KeepDir == "" {
		return nil, nil
	}
	k, _, err := ListKept(l.fsys, l.opts.KeepDir)
	return k, err
}

// RemoveKept removes the kept segment whose first record is first (its
// bodies are no longer needed) and fsyncs the keep directory. A read that
// took hold of the file finishes; a later one returns ErrBodyGone.
func (l *Log) RemoveKept(first uint64) error {
	return l.call(request{op: opRemoveKept, index: first}).err
}

func (l *Log) removeKept(first uint64) error {
	kept, _, err := ListKept(l.fsys, l.opts.KeepDir)
	if err != nil {
		return fmt.Errorf("remove kept segment %d: %w", first, err)
	}
	for _, k := range kept {
		if k.First != first {
			continue
		}
		if err := l.fsys.Remove(filepath.Join(l.opts.KeepDir, k.Name)); err != nil {
			return fmt.Errorf("remove kept segment %s: %w", k.Name, err)
		}
		l.bodies.keptRemoved(first)
		if err := l.fsys.SyncDir(l.opts.KeepDir); err != nil {
			// Not durable yet, and harmless if it comes back after a
			// crash: no live body names it (see TruncateFront).
			return fmt.Errorf("remove kept segment %s: sync %s: %w", k.Name, l.opts.KeepDir, err)
		}
		return nil
	}
	return fmt.Errorf("remove kept segment %d: no such segment in %s", first, l.opts.KeepDir)
}

// ReadAt reads len(p) bytes at offset off of the segment that holds record
// lsn, where Written (or Position) says its body lies, with one positioned
// read, through at most MaxOpenSegments open files. It is safe for
// concurrent use with everything else, and does not wait for the committer.
// The errors are those of BodyReader.ReadAt: ErrBodyGone when TruncateFront
// removed the record's segment before the read took hold of it, ErrCorrupt
// when the file is too short, ErrClosed after Close.
func (l *Log) ReadAt(lsn uint64, off int64, p []byte) error {
	return l.bodies.ReadAt(lsn, off, p)
}

// Segments lists the current segment files, or nil when the directory
// cannot be read.
func (l *Log) Segments() []Segment {
	segs, _, err := listSegments(l.fsys, l.dir)
	if err != nil {
		return nil
	}
	return segs
}

// Close writes and fsyncs what is pending, closes the segment file, stops
// the committer and closes the files ReadAt keeps open (a read still running
// finishes first with its own). It is idempotent; after a failure it returns
// the failure.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.closeErr = l.call(request{op: opClose}).err
		if err := l.bodies.Close(); l.closeErr == nil && err != nil {
			l.closeErr = fmt.Errorf("close log: %w", err)
		}
	})
	return l.closeErr
}

func (l *Log) call(r request) result {
	r.reply = make(chan result, 1)
	select {
	case l.reqs <- r:
		return <-r.reply
	case <-l.stopped:
		return result{err: ErrClosed}
	}
}

// Wakes is how many times the committer woke since Open: once for each
// batch it wrote, each interval fsync and each request (Sync, a front
// truncation, Close). A log nobody appends to does not wake.
func (l *Log) Wakes() uint64 { return l.wakes.Load() }

// run is the committer: the only goroutine that writes segments.
func (l *Log) run() {
	defer close(l.stopped)
	for {
		var timer <-chan time.Time
		if l.timerArmed {
			timer = l.syncTimer.C
		}
		select {
		case <-l.kick:
			l.wakes.Add(1)
			l.flush(false)
		case <-timer:
			l.wakes.Add(1)
			l.timerArmed = false
			if l.written > l.synced && l.Err() == nil {
				l.syncTail() // a failure is recorded in l.failure
			}
		case r := <-l.reqs:
			l.wakes.Add(1)
			switch r.op {
			case opSync:
				err := l.flush(true)
				r.reply <- result{lsn: l.synced, err: err}
			case opSyncRoll:
				err := l.flush(true)
				if err == nil && l.tail.size > SegmentHeaderSize {
					err = l.roll(l.written+1, true, 0)
				}
				r.reply <- result{lsn: l.synced, err: err}
			case opTruncateFront:
				r.reply <- result{err: l.truncateFront(r.index, false)}
			case opMoveFront:
				r.reply <- result{err: l.truncateFront(r.index, true)}
			case opRemoveKept:
				r.reply <- result{err: l.removeKept(r.index)}
			case opClose:
				r.reply <- result{err: l.close()}
				return
			}
		}
	}
}

// flush takes the pending batch, writes it, fsyncs it as the policy (or
// force) asks and releases its Commit.
func (l *Log) flush(force bool) error {
	l.mu.Lock()
	p := l.pending
	// Decide once, under the lock: an Append may land right after Unlock,
	// and a batch that was not swapped out is still the pending one.
	empty := p.commit == nil
	if !empty {
		l.pending, l.spare = l.spare, nil
		l.flying = p.commit
	}
	l.mu.Unlock()
	if empty {
		if err := l.Err(); err != nil {
			return err
		}
		if force && l.written > l.synced {
			return l.syncTail()
		}
		return nil
	}
	err := l.write(p, force)
	p.commit.release(err)
	p.reset()
	l.spare = p
	// Nothing came in meanwhile: the log is idle, and both batches let go
	// of what a burst grew (the pending one under mu, where appends fill it).
	l.mu.Lock()
	l.flying = nil
	if l.pending.commit == nil {
		l.pending.trim()
		p.trim()
	}
	l.mu.Unlock()
	return err
}

func (l *Log) write(p *batch, force bool) error {
	if err := l.Err(); err != nil {
		return err
	}
	// A batch goes where space was set aside for it: the tail rolls before
	// a batch that would take it past SegmentSize (one larger than that
	// has a segment of its own, set aside whole), and a batch past what
	// the tail has set aside (its roll was put off) sets more aside.
	l.settle()
	n := p.size()
	if l.tail.size > SegmentHeaderSize && l.tail.size+n > max(l.opts.SegmentSize, l.rollAfter) {
		if err := l.roll(p.first, false, n); err != nil {
			return err
		}
	}
	if r := l.tail.reserved; r > 0 && l.tail.size+n > r {
		l.tail.reserved = l.reserve(l.tail.f, l.tail.size, max(l.tail.size+n, r+l.opts.SegmentSize/4))
	}
	bytes := 0
	for i, f := range p.frames[:p.n] {
		// The watermark is what is fsynced now: every record up to it was
		// promised before this frame reached the file.
		frame := f.seal(l.tail.mac, p.firsts[i], l.synced)
		if err := l.fsys.Check("write"); err != nil {
			return l.fail("write", err)
		}
		start := l.tail.size
		n, err := l.tail.f.Write(frame)
		l.tail.size += int64(n)
		if err == nil && n != len(frame) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(frame))
		}
		if err != nil {
			return l.fail("write", err)
		}
		bytes += len(frame)
		if l.opts.OnWritten != nil {
			l.opts.OnWritten(Written{Segment: l.tail.first, First: p.firsts[i], Bodies: l.bodyOffsets(f, start)})
		}
	}
	l.written = p.last
	if l.opts.OnBatch != nil {
		l.opts.OnBatch(p.records, bytes)
	}
	if l.opts.Sync.mode == syncAlways || force {
		if err := l.syncTail(); err != nil {
			return err
		}
	}
	if l.opts.Sync.mode == syncAlways {
		l.durable.Store(l.synced)
	} else {
		l.durable.Store(l.written)
	}
	if l.opts.Sync.mode == syncInterval && !l.timerArmed && l.written > l.synced {
		l.syncTimer.Reset(l.opts.Sync.every)
		l.timerArmed = true
	}
	return nil
}

// bodyOffsets returns the offset in the tail segment of each body of f,
// written at start, in l.offsets. The bodies follow the frame header and
// the record headers, in record order, each as long as its header says.
func (l *Log) bodyOffsets(f *frameBuilder, start int64) []int64 {
	l.offsets = l.offsets[:0]
	off := start + int64(FrameOverhead(f.count))
	for i := range f.count {
		l.offsets = append(l.offsets, off)
		off += int64(binary.BigEndian.Uint32(f.hdrs[i*RecordHeaderSize+rhOffLength:]))
	}
	return l.offsets
}

// roll seals the tail segment (fsynced whole, whatever the policy, so that
// every record in an older segment is promised) and makes a new one whose
// first record is first. The new segment is made first, and the tail is
// sealed only once it stands: a roll that cannot make it (a full disk, a
// failed create) leaves the log writing to the tail as before, and does
// not fail it. Then an elective roll (SyncRoll) returns the error, and a
// roll for a batch that would not fit lets the tail grow by a quarter of
// SegmentSize before it tries again. The new segment sets aside
// SegmentSize, or the whole batch of n bytes that comes with the roll. Only a failed fsync of the tail, or a segment
// file that may have stayed behind, fails the log.
func (l *Log) roll(first uint64, elective bool, n int64) error {
	l.settle()
	if l.written > l.synced {
		if err := l.syncTail(); err != nil {
			return err
		}
	}
	err := l.fsys.Check("roll")
	var next tailSegment
	if err == nil {
		next, err = l.newSegment(first, max(l.opts.SegmentSize, SegmentHeaderSize+n))
	}
	if errors.Is(err, errSegmentLeft) {
		return l.fail("roll", err)
	}
	if err != nil {
		l.rollFailures.Add(1)
		if elective {
			return fmt.Errorf("roll: the log goes on in %s: %w", l.tail.name, err)
		}
		l.rollAfter = l.tail.size + max(l.opts.SegmentSize/4, 1)
		l.logger.Warn("walq: could not start the next segment; the log goes on in the tail and tries again",
			"dir", l.dir, "segment", l.tail.name, "size", l.tail.size, "err", err)
		return nil
	}
	l.release()
	if err := l.tail.f.Close(); err != nil {
		// Every record in it is fsynced: a failed close loses nothing.
		l.logger.Warn("walq: closing a sealed segment failed", "segment", l.tail.name, "err", err)
	}
	l.tail = next
	l.rollAfter = 0
	l.bodies.added(first)
	return nil
}

// syncTail fsyncs the tail segment. Older segments need none: roll fsyncs
// a segment before it starts the next.
func (l *Log) syncTail() error {
	if err := l.fsys.Check("sync"); err != nil {
		return l.fail("sync", err)
	}
	start := time.Now()
	if err := l.tail.f.Sync(); err != nil {
		return l.fail("sync", err)
	}
	if l.opts.OnSync != nil {
		l.opts.OnSync(time.Since(start))
	}
	l.synced = l.written
	l.fsynced.Store(l.synced)
	return nil
}

func (l *Log) truncateFront(index uint64, move bool) error {
	if err := l.Err(); err != nil {
		return err
	}
	if move {
		if err := ensureDir(l.fsys, l.opts.KeepDir, l.opts.DirPerm); err != nil {
			return fmt.Errorf("move front at %d: nothing changed: %w", index, err)
		}
	}
	segs, _, err := listSegments(l.fsys, l.dir)
	if err != nil {
		return fmt.Errorf("truncate front at %d: nothing changed: %w", index, err)
	}
	removed := 0
	var rerr error
	keepSynced := false
	for i := 0; i+1 < len(segs) && segs[i+1].First <= index && segs[i].Name != l.tail.name; i++ {
		if err := l.fsys.Check("truncate-front"); err != nil {
			rerr = err
			break
		}
		if !move && !keepSynced && l.opts.KeepDir != "" {
			// A move whose fsync of the keep directory failed left the
			// segment a second name there, which no fsync may cover yet:
			// the log's name goes only once the kept one is durable.
			kpath := filepath.Join(l.opts.KeepDir, keptName(segs[i].First, segs[i+1].First-1))
			if _, err := l.fsys.Stat(kpath); err == nil {
				if err := l.fsys.SyncDir(l.opts.KeepDir); err != nil {
					rerr = fmt.Errorf("sync %s: %w", l.opts.KeepDir, err)
					break
				}
				keepSynced = true
			}
		}
		if move {
			// A second name in the keep directory first, then the log's
			// name goes: a read finds the file under one name or the
			// other at every moment, and so does recovery after a crash.
			k := KeptFile{First: segs[i].First, Last: segs[i+1].First - 1, Name: keptName(segs[i].First, segs[i+1].First-1)}
			kpath := filepath.Join(l.opts.KeepDir, k.Name)
			if err := l.fsys.Link(segs[i].Path, kpath); err != nil && !errors.Is(err, fs.ErrExist) {
				rerr = err
				break
			}
			l.bodies.keptAdded(k)
			if err := l.fsys.SyncDir(l.opts.KeepDir); err != nil {
				// The kept name may not be durable: the log's name stays,
				// so the file keeps one durable name (the next move finds
				// the link there and syncs again).
				rerr = fmt.Errorf("sync %s: %w", l.opts.KeepDir, err)
				break
			}
		}
		if err := l.fsys.Remove(segs[i].Path); err != nil {
			rerr = err
			break
		}
		l.bodies.removed(segs[i].First)
		removed++
	}
	if removed > 0 {
		if err := l.fsys.SyncDir(l.dir); err != nil && rerr == nil {
			rerr = fmt.Errorf("sync %s: %w", l.dir, err)
		}
	}
	if rerr != nil {
		l.logger.Warn("walq: removing old segments failed; the log goes on, and the next truncation tries again",
			"dir", l.dir, "index", index, "removed", removed, "err", rerr)
		return fmt.Errorf("truncate front at %d: removed %d segments, then: %w", index, removed, rerr)
	}
	return nil
}

func (l *Log) close() error {
	l.syncTimer.Stop()
	l.timerArmed = false
	err := l.flush(true)
	if err == nil {
		l.release()
	}
	if l.tail.f != nil {
		if cerr := l.tail.f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close log: %w", cerr)
		}
		l.tail.f = nil
	}
	return err
}

// fail makes the Log failed for good and fails the batch waiting behind
// the one that failed. It returns the sticky error.
func (l *Log) fail(op string, cause error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure == nil {
		l.logger.Error("walq: log failed; reopen the queue", "dir", l.dir, "op", op, "err", cause)
	}
	l.setFailureLocked(fmt.Errorf("%w: %s: %w", ErrFailed, op, cause))
	return l.failure
}

// setFailureLocked records the first failure, wakes those who wait for one
// and fails the batch waiting behind the one that failed.
func (l *Log) setFailureLocked(err error) {
	if l.failure != nil {
		return
	}
	l.failure = err
	close(l.failed)
	if p := l.pending; p.commit != nil {
		p.commit.release(l.failure)
		p.reset()
	}
}
