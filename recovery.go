package walq

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// reserveSize is the least size of the reserve file (layout.ReserveName);
// it grows to the room of the next snapshot (reserveTargetLocked).
const reserveSize = 1 << 20

// Open opens the queue in dir, creating it if needed, and recovers it:
//
//  1. create the directory if it is missing, or check what it holds (see
//     checkFiles), before writing anything to it;
//  2. lock the directory (ErrLocked if another queue holds it), check it
//     again, remove leftover snapshot temp files;
//  3. load the newest snapshot that verifies;
//  4. open the log: replay every record after the snapshot, verify the
//     files it did not replay that hold live bodies, or refuse corruption
//     with a *CorruptionError; only then release the reserve file (on a
//     tight disk) and cut a torn tail (kept in a .broken file);
//  5. end every lease that was open at the crash as expired, appending
//     those records, and wait until they are durable under the sync
//     policy;
//  6. write the reserve file back to its size and start serving.
//
// When Open refuses the directory it has cut nothing and deleted nothing
// that holds a record (it may have removed leftover temporary files and
// finished a truncation or a migration's cleanup that a crash interrupted,
// which changes no record).
func Open(dir string, opts Options) (*Queue, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: Open with an empty directory name", ErrInvalid)
	}
	start := time.Now()
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkClock(o.Clock); err != nil {
		return nil, err
	}
	created, err := createDir(o.fs, dir, o.DirMode)
	if err != nil {
		return nil, err
	}
	if !created {
		// Refuse before the lock file is created: a refused open leaves
		// the directory as it found it. The check is repeated under the lock.
		files, err := checkFiles(o.fs, dir)
		if err != nil {
			return nil, err
		}
		if _, err := readFormat(o.fs, dir, files); err != nil {
			return nil, err
		}
	}
	lock, err := lockDir(filepath.Join(dir, layout.LockName), o.FileMode)
	if err != nil {
		return nil, err
	}
	q, err := recoverQueue(dir, o, lock, start)
	if err != nil {
		unlockDir(lock)
		return nil, err
	}
	return q, nil
}

func recoverQueue(dir string, o Options, lock *os.File, start time.Time) (*Queue, error) {
	fsys := o.fs
	logDir := filepath.Join(dir, layout.LogDirName)
	files, err := checkFiles(fsys, dir)
	if err != nil {
		return nil, err
	}
	foreign := entryNames(files.Of(layout.Foreign))
	if len(foreign) > 0 {
		o.Logger.Warn("walq: the queue directory holds entries that are not walq's; walq leaves them alone",
			"dir", dir, "entries", foreign)
	}
	format, err := readFormat(fsys, dir, files)
	if err != nil {
		return nil, err
	}
	// Once recovery writes (a new directory's marker, a migration, a
	// .broken copy of a torn tail, the endings of open leases) it frees
	// the reserve first, so that it can on a full disk; a directory of
	// this format only once its checks accepted it (wal.Options.Accept),
	// so that a refused open changes nothing. If the open fails after
	// that, the reserve is put back.
	released, opened := false, false
	releaseReserve := func() error {
		if released {
			return nil
		}
		if err := fsys.Remove(filepath.Join(dir, layout.ReserveName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("walq: release reserve: %w", err)
		}
		released = true
		return nil
	}
	defer func() {
		if released && !opened {
			writeReserve(fsys, dir, o.FileMode, reserveSize, -1)
		}
	}()
	if format.version < 2 || len(files.Of(layout.Format1)) > 0 {
		if err := releaseReserve(); err != nil { // a new directory's marker, a migration
			return nil, err
		}
	}
	if err := removeSnapshotTemps(fsys, dir, files); err != nil {
		return nil, err
	}
	var migration *MigrationStats
	switch format.version {
	case 0:
		if format.id, err = newDirectory(fsys, dir, o.FileMode); err != nil {
			return nil, err
		}
	case 1:
		id, ms, err := migrateFormat1(dir, o)
		if err != nil {
			return nil, err
		}
		format.id, migration = id, &ms
	default:
		// A migration that a crash interrupted after its marker leaves
		// format-1 files behind; finish it.
		if len(files.Of(layout.Format1)) > 0 {
			if _, err := removeFormat1(fsys, dir, 0); err != nil {
				return nil, fmt.Errorf("walq: finish carrying %s forward from format 1: %w", dir, err)
			}
		}
	}
	// The files that hold live bodies are verified below, once the log is
	// open; most of that reading happens now, beside the snapshot's
	// decoding, which takes one CPU.
	var pre *preverify
	if migration == nil {
		pre = startPreverify(fsys, dir, format.id)
		defer pre.wait()
	}
	base, err := rebuild.Newest(dir, format.id)
	switch {
	case errors.Is(err, ErrNewerFormat):
		return nil, fmt.Errorf("walq: %w", err)
	case err != nil:
		return nil, fmt.Errorf("walq: list snapshots: %w", err)
	}
	for _, s := range base.Newer {
		o.Logger.Warn("walq: snapshot does not verify; trying an older one", "file", s.File.Name, "err", s.Err)
	}
	if len(base.Optional) > 0 {
		o.Logger.Warn("walq: the snapshot holds optional sections of a newer walq; this build skips them, and its next compaction leaves them out",
			"file", base.File, "kinds", fmt.Sprint(base.Optional))
	}
	st, snap := base.State, base.LSN
	// A snapshot is written only after the log was synced up to the LSN it
	// covers, so a newer snapshot that does not verify still says the log
	// reaches that far; one that does not is corruption, not a reason to
	// fall back and lose what lay between.
	var mustReach uint64
	for _, s := range base.Newer {
		mustReach = max(mustReach, s.File.LSN)
	}

	d := &directory{
		dir:           dir,
		dirID:         format.id,
		opts:          o,
		clock:         o.Clock,
		lock:          lock,
		st:            st,
		timerAt:       math.MaxInt64,
		kick:          make(chan struct{}, 1),
		done:          make(chan struct{}),
		failed:        make(chan struct{}),
		compactSignal: make(chan struct{}, 1),
		reserveSignal: make(chan struct{}, 1),
		metrics:       newMetrics(),
		rts:           make(map[uint64]*queueRT),
		bodies:        newBodies(max(o.BodyCacheBytes, 0)),
	}
	q := &Queue{directory: d, rt: newRT(state.DefaultQueue, "", o.defaultSettings())}
	q.snapLSN.Store(snap)
	q.compactWait.Store(int64(compactRetryMin))
	if base.File != "" {
		if fi, err := o.fs.Stat(filepath.Join(dir, base.File)); err == nil {
			q.lastSnapBytes = fi.Size() // what the next snapshot may take, about
			q.lastSnapUnits = snapshotUnits(st)
			q.disk.snapFile = fi.Size()
		}
	}
	// A format-2 log always keeps a segment (truncation never removes the
	// tail, and a migration creates one before its marker): a snapshot
	// without one means the log was lost, not that it starts here.
	if snap > 0 && len(files.Of(layout.Segment)) == 0 && migration == nil {
		return nil, &CorruptionError{Dir: logDir, File: base.File,
			Err: fmt.Errorf("the log holds no segment, but the snapshot covers LSN %d: the records after it are gone", snap)}
	}
	walOpts := wal.Options{
		SegmentSize: o.SegmentSize,
		Sync:        o.Sync,
		Dir:         format.id,
		MustReach:   mustReach,
		FS:          fsys,
		FilePerm:    o.FileMode,
		DirPerm:     o.DirMode,
		Logger:      o.Logger,
		OnSync:      func(d time.Duration) { q.metrics.fsync.observe(d.Seconds()) },
		OnBatch: func(records, bytes int) {
			q.metrics.batch.observe(float64(records))
			q.metrics.writtenBytes.Add(int64(bytes))
		},
		OnWritten: d.bodies.onWritten,
		KeepDir:   filepath.Join(dir, layout.BodiesDirName),
	}
	// Files that recovery did not replay but that hold live bodies (log
	// segments the snapshot covers, kept segments) have their headers
	// verified: damage there is corruption, as in the replayed log; each
	// body is still checked by its own CRC when it is read. The log calls
	// this before it repairs anything (a torn tail).
	var floor uint64
	walOpts.Accept = func(info wal.OpenInfo, segs []wal.Segment) error {
		if st.LastLSN() != info.Last {
			return &CorruptionError{Dir: dir, File: base.File,
				Err: fmt.Errorf("snapshot covers LSN %d but the log ends at %d", snap, info.Last)}
		}
		kept, _, err := wal.ListKept(fsys, walOpts.KeepDir)
		if err != nil {
			return fmt.Errorf("walq: list kept segments: %w", err)
		}
		files, err := listBodyFiles(fsys, dir, kept, segs, snap)
		if err != nil {
			return fmt.Errorf("walq: %w", err)
		}
		if floor, err = verifyBodyFiles(fsys, format.id, st, files, pre); err != nil {
			return err
		}
		// The reserve is kept (it is the next snapshot's room, which
		// takes writing to set aside again) unless the disk is tight.
		if free, ok := diskFree(dir); !ok || free < max(o.DiskWatermark, 2*reserveSize) {
			return releaseReserve()
		}
		return nil
	}
	log, info, err := wal.Open(logDir, walOpts, snap+1, func(pos wal.Position, rec wal.Record) error {
		return rebuild.Apply(st, logDir, pos, rec)
	})
	if err != nil {
		if len(base.Newer) > 0 {
			return nil, fmt.Errorf("walq: the newest snapshot is bad (%v) and the log cannot replace it: %w", base.Newer[0].Err, err)
		}
		return nil, err
	}
	q.log = log
	// Every queue the log holds, as its records left it; a handle given by
	// OpenQueue brings its Backoff.
	d.rts[state.DefaultQueue] = q.rt
	st.Default().SetKeyWindow(int64(o.KeyWindow)) // not recorded; a named queue's is in its settings
	for _, qs := range st.Queues() {
		if qs.ID() != state.DefaultQueue {
			d.rts[qs.ID()] = newRT(qs.ID(), qs.Name(), o.settingsFromRecord(qs.Settings()))
		}
	}
	q.recovery = RecoveryStats{
		SnapshotLSN:    snap,
		Replayed:       info.Replayed,
		TailCutBytes:   info.CutBytes,
		BrokenFile:     info.BrokenFile,
		ForeignEntries: foreign,
		Migration:      migration,
	}
	// Segments the snapshot covers wholly were neither read nor verified.
	// Those below the lowest body the state names are garbage that a crash
	// kept from the last compaction's truncation. Finish it (which also
	// frees room on a full disk before the endings below are written); if
	// that fails harmlessly, the next compaction tries again. The others
	// hold live bodies, read when their items are delivered.
	keep := snap
	if floor > 0 {
		keep = min(keep, floor-1)
	}
	if info.Covered > 0 && keep > 0 {
		if err := q.truncateLog(keep); err != nil {
			if lerr := log.Err(); lerr != nil {
				log.Close()
				return nil, fmt.Errorf("walq: remove the segments the snapshot covers: %w", lerr)
			}
			o.Logger.Warn("walq: could not remove the segments the snapshot covers; the next compaction will", "err", err)
		}
	}
	for _, s := range log.Segments() {
		q.logBytes += s.Size
	}
	q.logBytes += q.keptBytes()

	// Queue time starts here: the wall clock, or the newest time in the log
	// if the clock is behind it (stepped back, perhaps across this restart).
	q.qt = newQueueTime(o.Clock, st.LastTime())
	q.mu.Lock()
	now := q.qt.now()
	q.pruneKeysLocked(now)
	// What is due now is ready from the start: Stats counts it, and the
	// first Get costs what a later one does. A snapshot's items are
	// unordered until first needed, so this costs one pass over them, as
	// ordering them would, whatever share of them is due.
	st.EachQueue(func(qs *state.QueueState) { qs.Promote(now) })
	// Leases open at the crash end as expired: the attempt was counted when
	// the lease began. Writing the endings keeps the history complete.
	var lastCommit *wal.Commit
	// By receipt: the items come back in the order they were leased. In
	// batches of endBatch: nobody waits for an ending but the last, and a
	// committer woken for each would cost more than the endings.
	release := log.Hold()
	for i, it := range st.OpenLeases() {
		if i > 0 && i%endBatch == 0 {
			release()
			release = log.Hold()
		}
		_, c, err := q.appendEndLocked(q.rts[it.Queue], state.TypeExpire, it, now, "lease open at recovery")
		if err != nil {
			q.mu.Unlock()
			release()
			log.Close()
			return nil, fmt.Errorf("walq: expire leases open at the crash: %w", err)
		}
		lastCommit = c
		q.recovery.LeasesExpired++
	}
	release()
	// Every queue takes its place in the timer's order; from here on
	// each change places its own queue (changedWakeLocked).
	for _, rt := range d.rts {
		q.placeWakeLocked(rt, now)
	}
	q.mu.Unlock()
	// The endings are waited for as any record is, under the sync policy:
	// until then a crash takes them back, and the next recovery ends the
	// same leases again.
	if lastCommit != nil {
		if err := waitDurable(lastCommit); err != nil {
			log.Close()
			return nil, fmt.Errorf("walq: expire leases open at the crash: %w", err)
		}
	}
	// Bodies held by a snapshot of an earlier version go into the log,
	// and a compaction writes the index without them: from here on every
	// body is on disk and none in memory.
	if n := len(st.InlineIDs()); n > 0 {
		if err := q.relocateInline(); err != nil {
			log.Close()
			return nil, fmt.Errorf("walq: copy the bodies of a snapshot of an earlier version into the log: %w", err)
		}
		if err := q.compact(); err != nil {
			o.Logger.Warn("walq: the compaction after copying bodies into the log failed; the next one tries again", "err", err)
		}
		q.recovery.BodiesRelocated = n
	}
	if fi, err := fsys.Stat(filepath.Join(dir, layout.ReserveName)); err == nil {
		q.disk.reserve = fi.Size()
	}
	q.refillReserve(true)
	q.recovery.Duration = time.Since(start)
	o.Logger.Info("walq: recovered", "dir", dir, "snapshot_lsn", snap, "replayed", info.Replayed,
		"last_lsn", info.Last, "tail_cut_bytes", info.CutBytes, "leases_expired", q.recovery.LeasesExpired,
		"items", st.TotalLen(), "queues", len(st.Queues()), "duration", q.recovery.Duration)

	opened = true
	q.wg.Add(2)
	go q.timerLoop()
	go q.compactLoop()
	return q, nil
}

// endBatch is how many endings of leases open at a crash recovery hands
// the log's committer at a time.
const endBatch = 4096

// createDir creates dir when it is missing, with any missing parents, and
// fsyncs the parent of each directory it created: the new entries must be
// durable before the queue reports anything written inside them. It
// reports whether it created dir.
func createDir(fsys wal.FS, dir string, perm os.FileMode) (bool, error) {
	var missing []string // dir first, then its missing parents
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		_, err := fsys.Stat(p)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("walq: open %s: %w", dir, err)
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(missing) == 0 {
		return false, nil
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return false, fmt.Errorf("walq: create %s: %w", dir, err)
	}
	for _, p := range missing {
		if err := fsys.SyncDir(filepath.Dir(p)); err != nil {
			return false, fmt.Errorf("walq: create %s: sync %s: %w", dir, filepath.Dir(p), err)
		}
	}
	return true, nil
}

// checkFiles lists dir and refuses it, changing nothing, when it holds a
// file of a newer walq (ErrNewerFormat), one of walq's names with the wrong
// type (a *CorruptionError), or no walq file but other entries
// (ErrNotQueue: walq makes a new queue only in an empty directory).
// lost+found and dotfiles do not count; foreign entries beside walq's own
// are listed, for a warning, and left alone.
func checkFiles(fsys wal.FS, dir string) (*layout.Listing, error) {
	l, err := layout.List(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("walq: read %s: %w", dir, err)
	}
	if newer := l.Of(layout.Reserved); len(newer) > 0 {
		return nil, fmt.Errorf("%w: %s: the name is in walq's own scheme but unknown to this build; open the directory with the walq that wrote it",
			ErrNewerFormat, filepath.Join(dir, newer[0].Name))
	}
	var foreign []string
	looksLikeLog := false
	for _, e := range l.Entries {
		switch {
		case e.WrongType():
			return nil, wrongType(dir, e)
		case e.Kind == layout.Foreign:
			foreign = append(foreign, strconv.Quote(e.Name))
			k := layout.ClassifyLog(e.Name)
			looksLikeLog = looksLikeLog || k == layout.Segment || k == layout.Format1
		}
	}
	if !l.Queue() && len(foreign) > 0 {
		found := strings.Join(foreign[:min(len(foreign), 5)], ", ")
		if len(foreign) > 5 {
			found += fmt.Sprintf(" (and %d more)", len(foreign)-5)
		}
		hint := "walq creates a queue only in an empty directory (lost+found and dotfiles aside)"
		if looksLikeLog {
			hint = "it looks like the log directory of a queue: open its parent"
		}
		return nil, fmt.Errorf("%w: %s holds no walq file but holds %s; %s", ErrNotQueue, dir, found, hint)
	}
	return l, nil
}

func entryNames(entries []layout.Entry) []string {
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	return names
}

func wrongType(dir string, e layout.Entry) error {
	is, want := "a directory", "file"
	if !e.IsDir {
		is, want = "not a directory", "directory"
	}
	return &CorruptionError{Dir: filepath.Join(dir, filepath.Dir(e.Name)), File: filepath.Base(e.Name),
		Err: fmt.Errorf("%s is %s, but walq keeps a %s (%s) by that name", e.Name, is, want, e.Kind)}
}

// removeSnapshotTemps removes the temp files of snapshots that a crash
// interrupted.
func removeSnapshotTemps(fsys wal.FS, dir string, files *layout.Listing) error {
	temps := append(files.Of(layout.SnapshotTemp), files.Of(layout.MarkerTmp)...)
	for _, e := range temps {
		if err := fsys.Remove(filepath.Join(dir, e.Name)); err != nil {
			return fmt.Errorf("walq: remove leftover %s: %w", e.Name, err)
		}
	}
	if len(temps) > 0 {
		if err := fsys.SyncDir(dir); err != nil {
			return fmt.Errorf("walq: sync %s: %w", dir, err)
		}
	}
	return nil
}

// writeReserve grows the file that a recovery, or a snapshot on a disk
// without room, frees to have room for its writes, to size bytes of zeros
// (written, so that they are the disk's on every filesystem), and returns
// the size it has. On a full disk it keeps what could be written: a
// smaller reserve still gives room, none does not. With keep >= 0 it stops
// short rather than leave less than keep free on the disk (as read when
// it starts).
func writeReserve(fsys wal.FS, dir string, perm os.FileMode, size, keep int64) (int64, error) {
	path := filepath.Join(dir, layout.ReserveName)
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, perm)
	if err != nil {
		return 0, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	have := info.Size()
	start := have
	if keep >= 0 && size > have {
		if free, ok := diskFree(dir); ok {
			size = min(size, have+max(0, free-keep)&^(64<<10-1))
		}
	}
	// Where the filesystem can, the room is allocated without writing it
	// (fallocate), then the size set to it: no I/O for what may be a
	// large reserve. Otherwise, or if that fails, zeros are written.
	if p, ok := fsys.(wal.Preallocator); ok && size > have {
		if err := p.Preallocate(f, size); err == nil && f.Truncate(size) == nil {
			have = size
		} else {
			f.Truncate(have) // give back what a failed allocation took
		}
	}
	zeros := make([]byte, 64<<10)
	var werr error
	for have < size {
		n, err := f.Write(zeros[:min(int64(len(zeros)), size-have)])
		have += int64(n)
		if err != nil {
			werr = fmt.Errorf("reserve of %d bytes, not %d: %w", have, size, err)
			if f.Truncate(have) != nil { // a short write may have taken blocks past it
				f.Close()
				fsys.Remove(path)
				return 0, werr
			}
			break
		}
	}
	if have > start {
		if err := f.Sync(); err != nil {
			f.Close()
			fsys.Remove(path)
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return have, err
	}
	if have == 0 {
		fsys.Remove(path)
	}
	return have, werr
}

// verifyBodyFiles verifies the headers of the files that hold live bodies
// and were not replayed: log segments wholly covered by the snapshot at
// snap, and kept segments (wal.VerifyHeaders). Its cost is that of their
// headers, not of their bodies. A file that pre verified as it is now
// listed is not read again, and when every file did, which of them hold
// live bodies does not matter: the pass over the items that tells is
// skipped. It returns a floor for truncation: no live body lies in a
// record below it (the state's BodyFloor, or, when the pass was skipped,
// the lower SnapshotBodyFloor).
func verifyBodyFiles(fsys wal.FS, id wal.DirID, st *state.State, files []*bodyFile, pre *preverify) (floor uint64, err error) {
	all := true
	for _, f := range files {
		if !pre.verified(f) {
			all = false
			break
		}
	}
	if all {
		return st.SnapshotBodyFloor(), nil
	}
	var f *bodyFile // the file of the last body: the next is most often there too
	st.EachBody(0, func(_ uint64, b state.BodyRef) bool {
		if !b.InLog() {
			return true
		}
		if floor == 0 || b.LSN < floor {
			floor = b.LSN
		}
		if f == nil || b.LSN < f.first || b.LSN > f.last {
			f = fileHolding(files, b.LSN)
		}
		if f != nil {
			f.live += int64(b.Len)
		}
		return true
	})
	var live []*bodyFile
	for _, f := range files {
		// The others are garbage the next compaction removes; nothing
		// reads them.
		if f.live > 0 && !pre.verified(f) {
			live = append(live, f)
		}
	}
	for _, err := range verifyFiles(fsys, id, live) { // the first file's error, as one by one
		if err != nil {
			return 0, fmt.Errorf("walq: a file that holds live bodies does not verify: %w", err)
		}
	}
	return floor, nil
}

// verifyFiles verifies the headers of the files side by side, one per
// CPU (the cost is reading them: a log of small records is headers all
// through), and returns each file's error.
func verifyFiles(fsys wal.FS, dir wal.DirID, files []*bodyFile) []error {
	errs := make([]error, len(files))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(files)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(files); i = int(next.Add(1) - 1) {
				f := files[i]
				errs[i] = wal.VerifyHeaders(fsys, f.path, dir, f.first, f.last)
			}
		})
	}
	wg.Wait()
	return errs
}

// preverify verifies, while the snapshot is decoded (on one CPU), the
// headers of the files that will likely need it: every kept segment and
// every sealed log segment that the newest snapshot covers wholly, as
// listed before the log is opened. Which of them hold live bodies is known
// only once the snapshot is loaded; verifyBodyFiles then takes the result
// of each such file that was verified as it is listed then (same records,
// same size) and verifies the rest itself, so a guess that was wrong (an
// older snapshot loaded, a file that changed) costs time, never a check.
// An error found here is not reported: the file is verified again if it
// matters.
type preverify struct {
	done   chan struct{}
	files  []*bodyFile
	byPath map[string]int // index in files
	errs   []error
}

// startPreverify starts verifying the files of dir in the background; nil
// when there is nothing to verify.
func startPreverify(fsys wal.FS, dir string, id wal.DirID) *preverify {
	snaps, err := wal.ListSnapshots(dir)
	if err != nil || len(snaps) == 0 {
		return nil
	}
	kept, _, err := wal.ListKept(fsys, filepath.Join(dir, layout.BodiesDirName))
	if err != nil {
		return nil
	}
	segs, _, err := wal.ListSegments(filepath.Join(dir, layout.LogDirName))
	if err != nil {
		return nil
	}
	files, err := listBodyFiles(fsys, dir, kept, segs, snaps[0].LSN)
	if err != nil || len(files) == 0 {
		return nil
	}
	p := &preverify{done: make(chan struct{}), files: files, byPath: make(map[string]int, len(files))}
	for i, f := range files {
		p.byPath[f.path] = i
	}
	go func() {
		defer close(p.done)
		p.errs = verifyFiles(fsys, id, files)
	}()
	return p
}

// wait waits until the background verification has finished.
func (p *preverify) wait() {
	if p != nil {
		<-p.done
	}
}

// verified reports whether f verified in the background as it is listed
// now. It waits for the background verification.
func (p *preverify) verified(f *bodyFile) bool {
	if p == nil {
		return false
	}
	p.wait()
	i, ok := p.byPath[f.path]
	if !ok {
		return false
	}
	g := p.files[i]
	return g.first == f.first && g.last == f.last && g.size == f.size && p.errs[i] == nil
}
