package wal

import (
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

	"github.com/tidwall/wal"
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
	// nothing there is needed). CoveredLast is the last index they hold, 0
	// when Covered is 0; TruncateFront(CoveredLast) removes them all but for
	// that one record, which it copies into a new first segment.
	Covered     int
	CoveredLast uint64
	CutBytes    int64 // torn-tail bytes cut from the last segment
	// BrokenFile holds the first 64 KiB of the cut bytes (all of them when
	// fewer); "" when nothing was cut or the copy could not be written.
	BrokenFile       string
	LeftoversCleaned []string // leftover files of interrupted truncations removed or renamed
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
	// mu, one more each time, so LSN order is Append order and the LSN is
	// the tidwall index the record will be written at.
	last    uint64
	pending *batch // appended, not yet taken by the committer; never nil
	scratch []byte // encoding buffer, reused by every Append
	failure error  // sticky once set; wraps ErrFailed
	closed  bool
	// failed is closed when failure is set (setFailureLocked), so exactly
	// once, and never by Close.
	failed chan struct{}

	// durable is the last LSN that is durable under the sync policy: fsynced
	// for SyncAlways, written to the OS for the others. It only grows.
	durable atomic.Uint64

	kick      chan struct{} // capacity 1: pending has records
	reqs      chan request  // Sync, TruncateFront and Close, run by the committer
	stopped   chan struct{} // closed when the committer returns
	closeOnce sync.Once
	closeErr  error

	// Owned by the committer goroutine alone once Open returns: it is the
	// only code that touches wl, since tidwall/wal holds its lock through
	// fsyncs and is not safe for concurrent reads.
	wl         *wal.Log
	spare      *batch // the batch that becomes pending when the current one is taken
	tail       tailTracker
	written    uint64 // last LSN handed to the OS by WriteBatch
	synced     uint64 // last LSN covered by a tail fsync; <= written
	syncTimer  *time.Timer
	timerArmed bool // SyncInterval: syncTimer runs; set only while written > synced
}

// batch is a group of records committed by one WriteBatch and one fsync.
type batch struct {
	entries     wal.Batch
	sizes       []int // entry sizes, for the tail tracker
	first, last uint64
	bytes       int
	commit      *Commit // nil while the batch is empty
}

func (b *batch) reset() {
	b.entries.Clear()
	b.sizes = b.sizes[:0]
	b.first, b.last, b.bytes = 0, 0, 0
	b.commit = nil
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
	opTruncateFront
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
// opens it for appending. Recovery:
//
//  1. finishes or removes the leftovers of an interrupted tidwall
//     TruncateFront/TruncateBack, as tidwall/wal's Open would, then fsyncs
//     the directory;
//  2. refuses with a *CorruptionError when the log starts after from;
//  3. reads the log once: segments wholly before from are neither read nor
//     verified (OpenInfo.Covered); the segment holding from and every later
//     one are made to read from the disk rather than the page cache
//     (readFromDisk), verified (envelope, CRC, LSN == index, no gap or
//     overlap between segments) and their records from from on passed to
//     apply. Corruption is a *CorruptionError, and so is a log that ends
//     before from-1 (a fresh log has First 1 and Last 0); either way nothing
//     has been modified, though apply may have seen records;
//  4. cuts a torn tail found at the end of that pass, as described at the
//     top of repair.go;
//  5. opens tidwall/wal, fsyncs the tail (a process killed under SyncNever
//     may have left replayed records in the page cache only), and starts the
//     committer.
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
	if err := ensureDir(fsys, dir, opts.DirPerm); err != nil {
		return fail(err)
	}
	cleaned, err := cleanLeftovers(fsys, dir)
	info.LeftoversCleaned = cleaned
	if err != nil {
		return fail(err)
	}
	if len(cleaned) > 0 {
		opts.Logger.Info("walq: finished an interrupted truncation", "dir", dir, "files", cleaned)
	}

	// cleanLeftovers resolved every .START and .END, so the listing holds
	// plain segments with distinct names, and names sort in index order: the
	// first indexes form a strictly increasing sequence, covered segments
	// included.
	segs, _, err := listSegments(fsys, dir)
	if err != nil {
		return fail(err)
	}
	fresh := len(segs) == 0
	info.First, info.Last = 1, 0 // what tidwall/wal's AllowEmpty reports for a fresh log
	if !fresh {
		info.First = segs[0].First
	}
	if from == 0 {
		from = info.First
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
	pass := &scanner{fsys: fsys, dir: dir, from: from, fromDisk: true, logger: opts.Logger}
	if apply != nil {
		pass.fn = func(pos Position, rec Record) error {
			if err := apply(pos, rec); err != nil {
				return fmt.Errorf("replay record %d: %w", rec.LSN, err)
			}
			return nil
		}
	}
	err = pass.pass(segs)
	info.Replayed = pass.res.Records
	if errors.Is(err, errVanished) {
		return fail(fmt.Errorf("a segment vanished during recovery: %w", err))
	}
	if err != nil {
		return fail(err)
	}
	if !fresh {
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
	if tail := pass.res.Tail; tail != nil {
		broken, err := cutTornTail(fsys, dir, tail, opts.FilePerm, opts.Logger)
		if err != nil {
			return fail(err)
		}
		info.CutBytes, info.BrokenFile = tail.Bytes, broken
		var keptBytes int64
		if broken != "" {
			keptBytes = min(tail.Bytes, brokenKeep)
		}
		opts.Logger.Warn("walq: cut torn tail of the log", "dir", dir, "segment", tail.File,
			"offset", tail.Offset, "bytes", tail.Bytes, "reason", tail.Reason, "saved_as", broken,
			"saved_bytes", keptBytes)
	}

	wl, err := wal.Open(dir, &wal.Options{
		NoSync:      true, // the committer fsyncs, once per batch
		SegmentSize: int(opts.SegmentSize),
		AllowEmpty:  true,
		DirPerms:    opts.DirPerm,
		FilePerms:   opts.FilePerm,
	})
	if err != nil {
		return fail(fmt.Errorf("tidwall open: %w", err))
	}
	l, err := startLog(dir, opts, wl, info, fresh)
	if err != nil {
		wl.Close()
		return fail(err)
	}
	info.Segments = len(l.Segments())
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

// startLog checks that tidwall/wal sees the log as recovery did, makes the
// tail durable and starts the committer.
func startLog(dir string, opts Options, wl *wal.Log, info OpenInfo, fresh bool) (*Log, error) {
	first, err := wl.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := wl.LastIndex()
	if err != nil {
		return nil, err
	}
	if first != info.First || last != info.Last {
		return nil, fmt.Errorf("tidwall sees indexes %d..%d, recovery verified %d..%d",
			first, last, info.First, info.Last)
	}
	fsys := opts.FS
	if fresh {
		// tidwall/wal created the first segment and does not fsync the directory.
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("sync dir: %w", err)
		}
	}
	if err := fsys.Check("sync"); err != nil {
		return nil, fmt.Errorf("sync tail: %w", err)
	}
	if err := wl.Sync(); err != nil {
		return nil, fmt.Errorf("sync tail: %w", err)
	}
	segs, _, err := listSegments(fsys, dir)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("no segment after tidwall open")
	}
	tailSeg := segs[len(segs)-1]
	l := &Log{
		dir:     dir,
		opts:    opts,
		fsys:    fsys,
		logger:  opts.Logger,
		last:    last,
		pending: &batch{},
		failed:  make(chan struct{}),
		kick:    make(chan struct{}, 1),
		reqs:    make(chan request),
		stopped: make(chan struct{}),
		wl:      wl,
		spare:   &batch{},
		tail:    tailTracker{segmentSize: opts.SegmentSize, first: tailSeg.First, size: tailSeg.Size},
		written: last,
		synced:  last,
	}
	l.durable.Store(last)
	l.syncTimer = time.NewTimer(time.Hour)
	l.syncTimer.Stop()
	go l.run()
	return l, nil
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

// Append numbers a record, encodes its envelope and queues it for the next
// batch; it does no I/O. It returns the record's LSN and the Commit of its
// batch. body is copied. After a failure or Close it returns LSN 0 and a
// Commit that has already failed.
func (l *Log) Append(typ byte, body []byte) (lsn uint64, c *Commit) {
	return l.append(typ, func(dst []byte) []byte { return append(dst, body...) })
}

// AppendEncoded is Append with the body written by encode, which appends it
// to dst and returns the result. dst is a buffer the Log reuses, so the
// steady state costs no allocation per record. encode runs under the Log's
// lock and must not call the Log.
func (l *Log) AppendEncoded(typ byte, encode func(dst []byte) []byte) (lsn uint64, c *Commit) {
	return l.append(typ, encode)
}

func (l *Log) append(typ byte, encode func(dst []byte) []byte) (uint64, *Commit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure != nil {
		return 0, failedCommit(l.failure)
	}
	if l.closed {
		return 0, failedCommit(ErrClosed)
	}
	lsn := l.last + 1
	rec := encode(append(l.scratch[:0], make([]byte, HeaderSize)...))
	sealRecord(rec, typ, lsn)
	l.scratch = rec
	p := l.pending
	if p.commit == nil {
		p.commit = newCommit()
		p.first = lsn
	}
	p.entries.Write(lsn, rec)
	p.sizes = append(p.sizes, len(rec))
	p.last = lsn
	p.bytes += len(rec)
	l.last = lsn
	select {
	case l.kick <- struct{}{}:
	default: // the committer has a kick waiting already
	}
	return lsn, p.commit
}

// LastLSN returns the LSN of the last appended record.
func (l *Log) LastLSN() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// DurableLSN returns the last LSN durable under the sync policy: fsynced
// for SyncAlways, written to the OS for SyncInterval and SyncNever.
func (l *Log) DurableLSN() uint64 { return l.durable.Load() }

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

// TruncateFront removes the records before index, which becomes the first
// one; index must be <= DurableLSN, and an index at or below the first is a
// no-op. It runs in the committer, exclusive with writes, and fsyncs the
// directory afterwards.
//
// A failure that provably changed nothing (tidwall/wal could not write its
// temporary copy, on a full disk for example; see truncationChangedNothing)
// returns an error that does not wrap ErrFailed, and the Log goes on: a
// later TruncateFront may succeed. Any other failure of the truncation, or of
// the directory fsync after it, fails the Log.
//
// tidwall/wal copies every record from index to the end of its segment into
// a new file while it holds its lock, so pass the last index of a sealed
// segment (one record to copy), not the first index of the tail segment
// (which copies the whole tail).
func (l *Log) TruncateFront(index uint64) error {
	if durable := l.DurableLSN(); index > durable {
		return fmt.Errorf("truncate front at %d: beyond the durable lsn %d", index, durable)
	}
	return l.call(request{op: opTruncateFront, index: index}).err
}

// Segments lists the current segment files, or nil when the directory
// cannot be read. It lists through the os package, not Options.FS: it is for
// reporting, and the segments are os files anyway (tidwall/wal writes them).
func (l *Log) Segments() []Segment {
	segs, _, err := ListSegments(l.dir)
	if err != nil {
		return nil
	}
	return segs
}

// Close writes and fsyncs what is pending, closes the segment files and
// stops the committer. It is idempotent; after a failure it returns the
// failure.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.closeErr = l.call(request{op: opClose}).err
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

// run is the committer: the only goroutine that touches wl.
func (l *Log) run() {
	defer close(l.stopped)
	for {
		var timer <-chan time.Time
		if l.timerArmed {
			timer = l.syncTimer.C
		}
		select {
		case <-l.kick:
			l.flush(false)
		case <-timer:
			l.timerArmed = false
			if l.written > l.synced && l.Err() == nil {
				l.syncTail() // a failure is recorded in l.failure
			}
		case r := <-l.reqs:
			switch r.op {
			case opSync:
				err := l.flush(true)
				r.reply <- result{lsn: l.synced, err: err}
			case opTruncateFront:
				r.reply <- result{err: l.truncateFront(r.index)}
			case opClose:
				r.reply <- result{err: l.close()}
				return
			}
		}
	}
}

// flush takes the pending batch, writes it with one WriteBatch, fsyncs it
// as the policy (or force) asks and releases its Commit.
func (l *Log) flush(force bool) error {
	l.mu.Lock()
	p := l.pending
	// Decide once, under the lock: an Append may land right after Unlock,
	// and a batch that was not swapped out is still the pending one.
	empty := p.commit == nil
	if !empty {
		l.pending, l.spare = l.spare, nil
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
	return err
}

func (l *Log) write(p *batch, force bool) error {
	if err := l.Err(); err != nil {
		return err
	}
	if err := l.fsys.Check("write"); err != nil {
		return l.fail("write", err)
	}
	if err := l.wl.WriteBatch(&p.entries); err != nil {
		return l.fail("write", err)
	}
	rolled := l.tail.add(p.first, p.sizes)
	l.written = p.last
	if l.opts.OnBatch != nil {
		l.opts.OnBatch(len(p.sizes), p.bytes)
	}
	if l.opts.Sync.mode == syncAlways || force {
		if err := l.syncTail(); err != nil {
			return err
		}
	}
	if rolled {
		// The new segment's directory entry must be durable before any
		// record in it is reported: an fsynced file that its directory has
		// forgotten is lost.
		if err := l.fsys.SyncDir(l.dir); err != nil {
			return l.fail("sync dir", err)
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

// syncTail fsyncs the tail segment. Older segments need none: tidwall/wal
// fsyncs a segment before it starts the next.
func (l *Log) syncTail() error {
	if err := l.fsys.Check("sync"); err != nil {
		return l.fail("sync", err)
	}
	start := time.Now()
	if err := l.wl.Sync(); err != nil {
		return l.fail("sync", err)
	}
	if l.opts.OnSync != nil {
		l.opts.OnSync(time.Since(start))
	}
	l.synced = l.written
	return nil
}

func (l *Log) truncateFront(index uint64) error {
	if err := l.Err(); err != nil {
		return err
	}
	first, err := l.wl.FirstIndex()
	if err != nil {
		return l.fail("truncate front", err)
	}
	if index <= first {
		return nil
	}
	before, _, err := listSegments(l.fsys, l.dir)
	if err != nil {
		return fmt.Errorf("truncate front at %d: nothing changed: %w", index, err)
	}
	err = l.fsys.Check("truncate-front")
	if err == nil {
		err = l.wl.TruncateFront(index)
	}
	if err != nil {
		if l.truncationChangedNothing(first, before) {
			l.logger.Warn("walq: truncating the log failed before it changed anything; the log goes on",
				"dir", l.dir, "index", index, "err", err)
			return fmt.Errorf("truncate front at %d: nothing changed: %w", index, err)
		}
		return l.fail("truncate front", err)
	}
	// tidwall/wal renames and removes segment files without fsyncing the
	// directory.
	if err := l.fsys.SyncDir(l.dir); err != nil {
		return l.fail("sync dir", err)
	}
	if index >= l.tail.first {
		// The tail itself was rewritten as a new file starting at index.
		info, err := l.fsys.Stat(filepath.Join(l.dir, SegmentName(index)))
		if err != nil {
			return l.fail("truncate front", err)
		}
		l.tail.first, l.tail.size = index, info.Size()
	}
	return nil
}

// truncationChangedNothing reports whether a failed tidwall TruncateFront
// left its in-memory state and the segment files as they were, so that the
// Log can go on. It relies on how tidwall/wal v1.2.1 truncates: it loads the
// segment holding the new first index, writes the records from there on to
// "<index>.START.TEMP", fsyncs it and renames it to "<index>.START"
// (removing the temp file on failure); only then does it remove the old
// segments and rename the .START file, and any failure from then on marks
// the tidwall log corrupt, so that FirstIndex returns ErrCorrupt. Before the
// rename it changes neither its state nor the directory. So nothing changed
// when FirstIndex still answers the first index it answered before, and
// the directory lists the same segment files with the same sizes as before
// (no .START among them): the second check covers a rename that took
// effect although it reported an error. A leftover temp file is harmless:
// the next TruncateFront overwrites it and Open removes it. Whatever cannot
// be checked counts as changed.
func (l *Log) truncationChangedNothing(first uint64, before []Segment) bool {
	if got, err := l.wl.FirstIndex(); err != nil || got != first {
		return false
	}
	after, _, err := listSegments(l.fsys, l.dir)
	if err != nil || len(after) != len(before) {
		return false
	}
	for i := range after {
		if after[i].Name != before[i].Name || after[i].Size != before[i].Size {
			return false
		}
	}
	return true
}

func (l *Log) close() error {
	l.syncTimer.Stop()
	l.timerArmed = false
	err := l.flush(true)
	if cerr := l.wl.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close log: %w", cerr)
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

// tailTracker mirrors the rule by which tidwall/wal's writeBatch (v1.2.1)
// starts a new segment, because tidwall/wal does not report it and the
// directory must be fsynced before the batch is released: a segment is
// closed before a batch when it already exceeds SegmentSize, and during a
// batch as soon as an entry brings it to SegmentSize or more.
type tailTracker struct {
	segmentSize int64
	first       uint64 // first index of the tail segment
	size        int64  // bytes in the tail segment (tidwall keeps the same in memory)
}

// add accounts for a written batch whose entries, starting at index first,
// have these sizes, and reports whether tidwall/wal created a segment.
func (t *tailTracker) add(first uint64, sizes []int) (rolled bool) {
	if t.size > t.segmentSize {
		rolled, t.first, t.size = true, first, 0
	}
	for i, n := range sizes {
		t.size += int64(uvarintLen(uint64(n)) + n)
		if t.size >= t.segmentSize {
			rolled, t.first, t.size = true, first+uint64(i)+1, 0
		}
	}
	return rolled
}

func uvarintLen(x uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], x)
}
