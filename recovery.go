package walq

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Files of a queue directory. Anything else in it refuses the open: walq
// never deletes a file it does not own, and a stray file is more likely a
// sign of the wrong directory than something to ignore.
const (
	lockName    = "LOCK"
	reserveName = "RESERVE" // released by recovery so it can write on a full disk
	logDirName  = "log"     // the segments
	reserveSize = 1 << 20
)

var brokenName = regexp.MustCompile(`^\d{20}\.broken(\.\d+)?$`)

// Open opens the queue in dir, creating it if needed, and recovers it:
//
//  1. lock the directory (ErrLocked if another queue holds it);
//  2. refuse unknown files, release the reserve file, remove leftover
//     snapshot temp files;
//  3. load the newest snapshot that verifies;
//  4. open the log: finish an interrupted truncation, cut a torn tail (kept
//     in a .broken file) or refuse corruption with a *CorruptionError, and
//     replay every record after the snapshot;
//  5. end every lease that was open at the crash as expired, appending
//     those records, and fsync;
//  6. put the reserve file back and start serving.
//
// When Open refuses the directory it has cut nothing and deleted nothing (it
// may have finished a truncation that a crash interrupted, which changes no
// record).
func Open(dir string, opts Options) (*Queue, error) {
	start := time.Now()
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fsys := o.fs
	if err := fsys.MkdirAll(dir, o.DirMode); err != nil {
		return nil, fmt.Errorf("walq: open %s: %w", dir, err)
	}
	lock, err := lockDir(filepath.Join(dir, lockName), o.FileMode)
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
	logDir := filepath.Join(dir, logDirName)
	if err := checkFiles(fsys, dir, logDir); err != nil {
		return nil, err
	}
	st, snap, badNewest, err := loadSnapshot(dir, o.Logger)
	if err != nil {
		return nil, err
	}
	// From here on recovery may write (a .broken copy of a torn tail, the
	// endings of open leases): free the reserve so that it can on a full
	// disk. If the open fails after all, put the reserve back.
	if err := fsys.Remove(filepath.Join(dir, reserveName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("walq: release reserve: %w", err)
	}
	opened := false
	defer func() {
		if !opened {
			writeReserve(fsys, dir, o.FileMode)
		}
	}()
	if err := removeSnapshotTemps(fsys, dir); err != nil {
		return nil, err
	}

	q := &Queue{
		dir:           dir,
		opts:          o,
		clock:         o.Clock,
		lock:          lock,
		st:            st,
		timerAt:       math.MaxInt64,
		kick:          make(chan struct{}, 1),
		done:          make(chan struct{}),
		failed:        make(chan struct{}),
		compactSignal: make(chan struct{}, 1),
		metrics:       newMetrics(),
	}
	q.snapLSN.Store(snap)
	walOpts := wal.Options{
		SegmentSize: o.SegmentSize,
		Sync:        o.Sync.mode,
		SyncEvery:   o.Sync.every,
		FS:          fsys,
		FilePerm:    o.FileMode,
		DirPerm:     o.DirMode,
		Logger:      o.Logger,
		OnSync:      func(d time.Duration) { q.metrics.fsync.observe(d.Seconds()) },
		OnBatch:     func(records, _ int) { q.metrics.batch.observe(float64(records)) },
	}
	log, info, err := wal.Open(logDir, walOpts, snap+1, func(rec wal.Record) error {
		r, err := state.Decode(rec.Type, rec.Body)
		if err == nil {
			err = st.Apply(rec.LSN, r)
		}
		if err != nil {
			return &CorruptionError{Dir: logDir, Index: rec.LSN, Err: fmt.Errorf("replay: %w", err)}
		}
		return nil
	})
	if err != nil {
		if badNewest != nil {
			return nil, fmt.Errorf("walq: the newest snapshot is bad (%v) and the log cannot replace it: %w", badNewest, err)
		}
		return nil, err
	}
	if st.LastLSN() != info.Last {
		log.Close()
		return nil, &CorruptionError{Dir: dir, File: wal.SnapshotName(snap),
			Err: fmt.Errorf("snapshot covers LSN %d but the log ends at %d", snap, info.Last)}
	}
	q.log = log
	q.recovery = RecoveryStats{
		SnapshotLSN:  snap,
		Replayed:     info.Replayed,
		TailCutBytes: info.CutBytes,
		BrokenFile:   info.BrokenFile,
	}
	for _, s := range log.Segments() {
		q.logBytes += s.Size
	}

	// Leases open at the crash end as expired: the attempt was counted when
	// the lease began. Writing the endings keeps the history complete.
	// Queue time starts here: the wall clock, or the newest time in the log
	// if the clock is behind it (stepped back, perhaps across this restart).
	q.qt = newQueueTime(o.Clock, st.LastTime())
	q.mu.Lock()
	now := q.qt.now()
	st.PruneKeys(now, int64(o.KeyWindow))
	var lastCommit *wal.Commit
	for _, it := range st.OpenLeases() {
		_, c, err := q.appendLocked(q.endRecordLocked(state.TypeExpire, it, now, "lease open at recovery"))
		if err != nil {
			q.mu.Unlock()
			log.Close()
			return nil, fmt.Errorf("walq: expire leases open at the crash: %w", err)
		}
		lastCommit = c
		q.recovery.LeasesExpired++
	}
	q.mu.Unlock()
	if lastCommit != nil {
		if _, err := log.Sync(); err != nil {
			log.Close()
			return nil, fmt.Errorf("walq: expire leases open at the crash: %w", err)
		}
	}
	if err := writeReserve(fsys, dir, o.FileMode); err != nil {
		o.Logger.Warn("walq: no reserve file: a later recovery on a full disk may fail", "err", err)
	}
	q.recovery.Duration = time.Since(start)
	o.Logger.Info("walq: recovered", "dir", dir, "snapshot_lsn", snap, "replayed", info.Replayed,
		"last_lsn", info.Last, "tail_cut_bytes", info.CutBytes, "leases_expired", q.recovery.LeasesExpired,
		"items", st.Len(), "duration", q.recovery.Duration)

	opened = true
	q.wg.Add(2)
	go q.timerLoop()
	go q.compactLoop()
	return q, nil
}

// checkFiles refuses a directory with files walq does not know.
func checkFiles(fsys wal.FS, dir, logDir string) error {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("walq: read %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == lockName || name == reserveName:
		case name == logDirName && e.IsDir():
		case isSnapshotName(name):
		default:
			return foreign(dir, name)
		}
	}
	entries, err = fsys.ReadDir(logDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("walq: read %s: %w", logDir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !isLogName(name) {
			return foreign(logDir, name)
		}
	}
	return nil
}

func foreign(dir, name string) error {
	return &CorruptionError{Dir: dir, File: name,
		Err: errors.New("not a file of a walq queue; move it out of the directory (walq never deletes files it does not own)")}
}

var (
	snapshotFile = regexp.MustCompile(`^snapshot-\d{20}\.(snap|tmp)$`)
	logFile      = regexp.MustCompile(`^\d{20}(\.START|\.END|\.START\.TEMP|\.END\.TEMP)?$`)
)

func isSnapshotName(name string) bool { return snapshotFile.MatchString(name) }

func isLogName(name string) bool { return logFile.MatchString(name) || brokenName.MatchString(name) }

func removeSnapshotTemps(fsys wal.FS, dir string) error {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("walq: read %s: %w", dir, err)
	}
	removed := false
	for _, e := range entries {
		if isSnapshotName(e.Name()) && strings.HasSuffix(e.Name(), ".tmp") {
			if err := fsys.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("walq: remove leftover %s: %w", e.Name(), err)
			}
			removed = true
		}
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			return fmt.Errorf("walq: sync %s: %w", dir, err)
		}
	}
	return nil
}

// loadSnapshot returns the state of the newest snapshot that verifies and
// the LSN it covers (a new state and 0 when there is none). badNewest is why
// a newer snapshot was passed over: the log must then still reach back to
// the one taken, or the open fails (never silently lose what lay between).
func loadSnapshot(dir string, logger *slog.Logger) (st *state.State, lsn uint64, badNewest error, err error) {
	snaps, err := wal.ListSnapshots(dir)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("walq: list snapshots: %w", err)
	}
	for _, s := range snaps {
		lsn, body, err := wal.ReadSnapshot(s.Path)
		if err == nil {
			st, err = state.UnmarshalSnapshot(body)
			if err == nil && st.LastLSN() != lsn {
				err = fmt.Errorf("body covers LSN %d, header says %d", st.LastLSN(), lsn)
			}
			if err != nil {
				err = &CorruptionError{Dir: dir, File: s.Name, Err: err}
			}
		}
		if err != nil {
			logger.Warn("walq: snapshot does not verify; trying an older one", "file", s.Name, "err", err)
			if badNewest == nil {
				badNewest = err
			}
			continue
		}
		return st, lsn, badNewest, nil
	}
	return state.New(), 0, badNewest, nil
}

// writeReserve puts back the file that the next recovery releases to have
// room for its records on a full disk.
func writeReserve(fsys wal.FS, dir string, perm os.FileMode) error {
	path := filepath.Join(dir, reserveName)
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	zeros := make([]byte, 64<<10)
	for n := 0; n < reserveSize; n += len(zeros) {
		if _, err := f.Write(zeros); err != nil {
			f.Close()
			fsys.Remove(path)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		fsys.Remove(path)
		return err
	}
	return f.Close()
}
