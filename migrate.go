package walq

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/wal"
)

// The directory's format, and carrying format 1 forward.
//
// A directory of format 2 has a marker file (layout.MarkerName) that names
// the format and holds the directory's ID; every older build refuses it
// (82292fa refuses any file it does not know, and 4fb10c1 refuses unknown
// names that begin with "walq"), so no older walq can take format-2
// records for a torn tail and cut them.
//
// A directory of format 1 (no marker, but format-1 segments or snapshots)
// is carried forward at Open, under the lock, before anything else is
// written:
//
//  1. build its state as format 1 recovered it: the newest snapshot that
//     verifies and the log records after it (read only; a torn tail is
//     left out, and its first 64 KiB kept as a .broken file, as format 1
//     did; corruption refuses the open and changes nothing);
//  2. make a new directory ID and write the state as a format-2 snapshot
//     covering the last LSN L (rename over a format-1 snapshot of the same
//     LSN, which holds the same state);
//  3. create the format-2 log, an empty segment starting at L+1 (so that a
//     directory of format 2 always has a segment: one with a snapshot and
//     none has lost its log, and is refused);
//  4. write the marker (temp file, fsync, rename, directory fsync): from
//     here on the directory is of format 2;
//  5. remove the format-1 segments and snapshots.
//
// A crash before step 4 leaves a directory of format 1 that the next Open
// migrates again from the start (the format-2 snapshot is read like any
// other and replaced, an empty format-2 segment removed); a crash after it
// leaves format-1 files that the next Open removes (step 5 again). A build
// of format 1 refuses such a half-migrated directory if it holds the empty
// segment (a reserved name to it) and opens it otherwise (it takes the
// format-2 snapshot for a bad one and replays its own log from an older
// snapshot or the start). LSNs carry over, so receipts of leases
// open at the crash would still name the right records, and they are
// expired by the recovery that follows anyway.

// dirFormat is what a directory's files say about its format.
type dirFormat struct {
	version int       // 0: a new queue; 1: format 1; 2: format 2
	id      wal.DirID // version 2 only
}

// readFormat tells a directory's format from its listing and marker.
func readFormat(fsys wal.FS, dir string, files *layout.Listing) (dirFormat, error) {
	if len(files.Of(layout.Marker)) == 0 {
		format1 := len(files.Of(layout.Format1)) > 0 || len(files.Of(layout.Snapshot)) > 0
		for _, seg := range files.Of(layout.Segment) {
			// A migration that stopped before its marker leaves an empty
			// format-2 segment beside the format-1 files; anything else is
			// a format-2 log that lost its marker.
			if !format1 || !emptySegment(fsys, filepath.Join(dir, seg.Name)) {
				return dirFormat{}, &CorruptionError{Dir: dir, File: layout.MarkerName,
					Err: fmt.Errorf("format marker missing, but %s is a format-2 segment", seg.Name)}
			}
		}
		if format1 {
			return dirFormat{version: 1}, nil
		}
		return dirFormat{}, nil
	}
	path := filepath.Join(dir, layout.MarkerName)
	id, err := wal.ReadMarker(fsys, path)
	switch {
	case errors.Is(err, wal.ErrNewerFormat):
		return dirFormat{}, fmt.Errorf("%w: %s: %v; open the directory with the walq that wrote it",
			ErrNewerFormat, path, err)
	case errors.Is(err, wal.ErrCorrupt):
		return dirFormat{}, &CorruptionError{Dir: dir, File: layout.MarkerName, Err: err}
	case err != nil:
		return dirFormat{}, fmt.Errorf("walq: read %s: %w", path, err)
	}
	return dirFormat{version: wal.FormatVersion, id: id}, nil
}

// emptySegment reports whether a segment file holds no frame: a header at
// most.
func emptySegment(fsys wal.FS, path string) bool {
	info, err := fsys.Stat(path)
	return err == nil && info.Size() <= wal.SegmentHeaderSize
}

// writeMarker makes the marker of a format-2 directory durable: temp file,
// fsync, rename, directory fsync.
func writeMarker(fsys wal.FS, dir string, id wal.DirID, perm os.FileMode) error {
	tmp := filepath.Join(dir, layout.MarkerTemp)
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return fmt.Errorf("walq: write format marker: %w", err)
	}
	_, err = f.Write(wal.EncodeMarker(id))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, filepath.Join(dir, layout.MarkerName))
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("walq: write format marker: %w", err)
	}
	return nil
}

// newDirectory gives a new queue directory its ID and marker.
func newDirectory(fsys wal.FS, dir string, perm os.FileMode) (wal.DirID, error) {
	id, err := wal.NewDirID()
	if err != nil {
		return id, err
	}
	return id, writeMarker(fsys, dir, id, perm)
}

// MigrationStats says what carrying a format-1 directory forward did.
type MigrationStats struct {
	FromVersion int    // 1
	LastLSN     uint64 // the LSN the format-2 snapshot covers
	Replayed    int    // format-1 records read after the format-1 snapshot
	TailCut     int64  // bytes of a format-1 torn tail left behind
	BrokenFile  string // where their first 64 KiB were kept, "" when none
	Removed     int    // format-1 files removed
}

// migrateFormat1 carries a format-1 directory forward (steps 1 to 5 above)
// and returns the new directory ID.
func migrateFormat1(dir string, o Options) (wal.DirID, MigrationStats, error) {
	fsys := o.fs
	ms := MigrationStats{FromVersion: 1}
	logDir := filepath.Join(dir, layout.LogDirName)
	fail := func(err error) (wal.DirID, MigrationStats, error) {
		var ce *CorruptionError
		if errors.As(err, &ce) || errors.Is(err, ErrNewerFormat) {
			return wal.DirID{}, ms, err
		}
		return wal.DirID{}, ms, fmt.Errorf("walq: carry %s forward from format 1: %w", dir, err)
	}
	base, err := rebuild.Newest(dir, wal.DirID{})
	if err != nil {
		return fail(err)
	}
	st, snap := base.State, base.LSN
	// A format-1 log tells where its entries are, not its bodies: the
	// state keeps them, and the format-2 snapshot holds them (version 2,
	// the last that held bodies); Open then copies them into the log.
	st.KeepBodies()
	var mustReach uint64
	for _, s := range base.Newer {
		mustReach = max(mustReach, s.File.LSN)
	}
	last := snap
	if _, err := os.Stat(logDir); err == nil {
		res, err := wal.ScanFormat1(fsys, logDir, snap+1, true, o.Logger, func(pos wal.Position, rec wal.Record) error {
			return rebuild.Apply(st, logDir, pos, rec)
		})
		if err != nil {
			return fail(err)
		}
		ms.Replayed = res.Records
		if res.Records > 0 || res.Last > last {
			last = res.Last
		}
		if res.First > snap+1 && res.Last >= res.First {
			return fail(&CorruptionError{Dir: logDir, Index: snap + 1,
				Err: fmt.Errorf("format-1 log starts at %d but replay needs %d", res.First, snap+1)})
		}
		if t := res.Tail; t != nil {
			ms.TailCut = t.Bytes
			broken, err := wal.KeepFormat1Tail(fsys, logDir, t, o.FileMode)
			if err != nil {
				o.Logger.Warn("walq: could not keep a copy of the format-1 torn tail", "err", err)
			}
			ms.BrokenFile = broken
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	if mustReach > last {
		return fail(&CorruptionError{Dir: dir, File: base.Newer[0].File.Name,
			Err: fmt.Errorf("snapshot does not verify (%v), and the log ends at %d before %d", base.Newer[0].Err, last, mustReach)})
	}
	if st.LastLSN() != last {
		return fail(&CorruptionError{Dir: dir, File: base.File,
			Err: fmt.Errorf("snapshot covers LSN %d but the format-1 log ends at %d", snap, last)})
	}
	ms.LastLSN = last

	id, err := wal.NewDirID()
	if err != nil {
		return fail(err)
	}
	body, err := st.MarshalSnapshotInline()
	if err != nil {
		return fail(err)
	}
	if _, err := wal.WriteSnapshotSection(fsys, dir, id, last, wal.SectionDirState, body, o.FileMode); err != nil {
		return fail(err)
	}
	// An earlier attempt may have left its empty format-2 segment, of
	// another directory ID (readFormat let only empty ones through).
	if err := removeEmptySegments(fsys, logDir); err != nil {
		return fail(err)
	}
	log, _, err := wal.Open(logDir, wal.Options{Dir: id, FS: fsys, FilePerm: o.FileMode, DirPerm: o.DirMode,
		Logger: o.Logger, SegmentSize: o.SegmentSize}, last+1, nil)
	if err != nil {
		return fail(err)
	}
	if err := log.Close(); err != nil {
		return fail(err)
	}
	if err := writeMarker(fsys, dir, id, o.FileMode); err != nil {
		return fail(err)
	}
	n, err := removeFormat1(fsys, dir, last)
	ms.Removed = n
	if err != nil {
		return fail(err)
	}
	o.Logger.Info("walq: carried the directory forward from format 1 to format 2", "dir", dir,
		"last_lsn", last, "replayed", ms.Replayed, "tail_cut_bytes", ms.TailCut, "removed_files", n, "dir_id", id)
	return id, ms, nil
}

// removeEmptySegments removes the format-2 segments and segment temp files
// in logDir that hold no frame.
func removeEmptySegments(fsys wal.FS, logDir string) error {
	entries, err := fsys.ReadDir(logDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		k := layout.ClassifyLog(e.Name())
		path := filepath.Join(logDir, e.Name())
		if (k == layout.Segment || k == layout.SegmentTemp) && emptySegment(fsys, path) {
			if err := fsys.Remove(path); err != nil {
				return fmt.Errorf("remove %s left by an earlier migration: %w", e.Name(), err)
			}
			removed = true
		}
	}
	if removed {
		return fsys.SyncDir(logDir)
	}
	return nil
}

// removeFormat1 removes what a format-1 log and its snapshots left in a
// directory of format 2: the format-1 segment files and truncation
// leftovers in log/, and every snapshot but the one covering keep. It
// returns how many files it removed.
func removeFormat1(fsys wal.FS, dir string, keep uint64) (int, error) {
	files, err := layout.List(fsys, dir)
	if err != nil {
		return 0, err
	}
	removed := 0
	var dirs []string
	for _, e := range files.Of(layout.Format1) {
		if err := fsys.Remove(filepath.Join(dir, e.Name)); err != nil {
			return removed, fmt.Errorf("remove format-1 file %s: %w", e.Name, err)
		}
		removed++
		dirs = append(dirs, filepath.Join(dir, layout.LogDirName))
	}
	for _, e := range files.Of(layout.Snapshot) {
		if e.Name == wal.SnapshotName(keep) {
			continue
		}
		// Only snapshots that verify as format 1 go: a damaged one is left
		// for recovery to judge, and format-2 ones are compaction's.
		snap, err := wal.ReadSnapshot(filepath.Join(dir, e.Name))
		if err != nil || snap.Version != 1 {
			continue
		}
		if err := fsys.Remove(filepath.Join(dir, e.Name)); err != nil {
			return removed, fmt.Errorf("remove format-1 snapshot %s: %w", e.Name, err)
		}
		removed++
		dirs = append(dirs, dir)
	}
	synced := map[string]bool{}
	for _, d := range dirs {
		if !synced[d] {
			if err := fsys.SyncDir(d); err != nil {
				return removed, err
			}
			synced[d] = true
		}
	}
	return removed, nil
}
