// Package rebuild builds a queue's state from its directory: a snapshot that
// verifies, then the log records after it, each decoded and applied to a
// state.State. Recovery, compaction, the crash tests and walq-inspect all
// build states this way, so they agree on what a directory holds and on
// what counts as corruption.
//
// It reads files and never writes them; the state package stays pure.
package rebuild

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// ReadSnapshot reads a snapshot file and decodes its state. The file must
// verify (header, CRC, length), its body must decode, and the LSN in its
// name, in its header and of its body must agree. When want is not zero the
// snapshot must be of format 2 and of that directory. Every defect is a
// *wal.CorruptionError naming the file; an error reading it is returned as
// is (it wraps fs.ErrNotExist when a compaction removed the file).
func ReadSnapshot(dir string, f wal.SnapshotFile, want wal.DirID) (*state.State, error) {
	st, _, err := readSnapshot(dir, f, want)
	return st, err
}

// readSnapshot is ReadSnapshot, also returning the kinds of the optional
// sections it skipped.
func readSnapshot(dir string, f wal.SnapshotFile, want wal.DirID) (*state.State, []byte, error) {
	r, err := wal.OpenSnapshot(f.Path)
	if err != nil {
		return nil, nil, err
	}
	// Decoded as it is read, in pieces; trusted only once the whole file
	// verifies (Close checks the CRC, and a mismatch is what is reported).
	st, v, err := state.ReadSnapshot(r, r.Size)
	if cerr := r.Close(); cerr != nil {
		return nil, nil, cerr
	}
	snap, lsn := r.Snapshot, r.LSN
	switch {
	case err == nil && snap.Kind == wal.SectionQueueState && v != 1,
		err == nil && snap.Kind == wal.SectionDirState && v != 2,
		err == nil && snap.Kind == wal.SectionDirIndex && v != 3,
		err == nil && snap.Kind == wal.SectionDirIndex4 && v != 4:
		err = fmt.Errorf("a state of version %d in a section of kind %d", v, snap.Kind)
	case !want.IsZero() && snap.Version != wal.FormatVersion:
		err = fmt.Errorf("a format-%d snapshot in a directory of format %d", snap.Version, wal.FormatVersion)
	case !want.IsZero() && snap.Dir != want:
		err = fmt.Errorf("snapshot of directory %s, this directory is %s", snap.Dir, want)
	case err != nil:
	case lsn != f.LSN:
		err = fmt.Errorf("header covers index %d, the file name says %d", lsn, f.LSN)
	case st.LastLSN() != lsn:
		err = fmt.Errorf("body covers index %d, the header says %d", st.LastLSN(), lsn)
	default:
		return st, snap.Skipped, nil
	}
	return nil, nil, &wal.CorruptionError{Dir: dir, File: f.Name, Err: err}
}

// Skipped is a snapshot that Newest passed over, and why.
type Skipped struct {
	File wal.SnapshotFile
	Err  error
}

// Base is what a replay starts from: the newest snapshot that verifies, or
// an empty state when there is none.
type Base struct {
	State *state.State
	LSN   uint64 // the LSN the snapshot covers; 0 when there is none
	File  string // the snapshot's name; "" when there is none
	// Newer are the snapshots newer than the one taken that did not
	// verify, newest first. When there are any, the log must still reach
	// back to LSN+1: a newer snapshot that is bad is never a reason to lose
	// what lay between it and the older one.
	Newer []Skipped
	// Optional are the kinds of the optional sections of a newer walq
	// that the snapshot taken holds and this build skipped (its next
	// compaction writes none of them).
	Optional []byte
}

// Newest loads the newest snapshot in dir that verifies (see ReadSnapshot;
// want is the directory's ID, zero for a directory of format 1).
// It reads the files newest first and stops at the first that verifies. A
// snapshot that cannot be read is passed over like one that does not
// verify, and one that vanished (a running compaction removed it) is left
// out. One that verifies and holds a section this build must understand
// and does not (wal.ErrNewerSection: a newer walq wrote it) stops the
// search with that error: no older snapshot, nor the log, may stand in
// for what it holds. (An unknown version is passed over: a damaged header
// can show one.)
func Newest(dir string, want wal.DirID) (Base, error) {
	snaps, err := wal.ListSnapshots(dir)
	if err != nil {
		return Base{}, err
	}
	var b Base
	for _, f := range snaps {
		st, optional, err := readSnapshot(dir, f, want)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if errors.Is(err, wal.ErrNewerSection) {
			// A newer walq wrote it: no older snapshot or the log may stand
			// in for it, and the directory is refused as newer, never as
			// damage.
			return Base{}, err
		}
		if err != nil {
			b.Newer = append(b.Newer, Skipped{File: f, Err: err})
			continue
		}
		b.State, b.LSN, b.File, b.Optional = st, f.LSN, f.Name, optional
		return b, nil
	}
	b.State = state.New()
	return b, nil
}

// Apply decodes a log record and applies it to st. A record that does not
// decode, or that the state refuses, is a *wal.CorruptionError at pos in
// logDir.
func Apply(st *state.State, logDir string, pos wal.Position, rec wal.Record) error {
	if err := CheckKnown(pos, rec.Type); err != nil {
		return err
	}
	// The record is applied at once and its bodies are not kept (the
	// state keeps where they are), so they need not be copied.
	r, err := state.DecodeAlias(rec.Type, rec.Body)
	return ApplyDecoded(st, logDir, pos, rec.Queue, rec.Type, r, err)
}

// CheckKnown refuses, with an error wrapping wal.ErrNewerFormat, a record
// that a newer walq wrote: one of a record type above state.LastType. Its
// frame verified, so no damage made it; this build cannot apply it, and
// must not cut it as damage. (A record of a queue that does not exist is
// not newer: the state refuses it, and it is corruption.)
func CheckKnown(pos wal.Position, typ byte) error {
	switch {
	case typ > state.LastType:
		return fmt.Errorf("%w: record %d in %s has type %d, and this build knows types up to %d",
			wal.ErrNewerFormat, pos.Index, pos.File, typ, state.LastType)
	}
	return nil
}

// ApplyDecoded is Apply for a record already decoded: r and decodeErr are
// what state.Decode returned for it.
func ApplyDecoded(st *state.State, logDir string, pos wal.Position, queue uint64, typ byte, r state.Record, decodeErr error) error {
	if errors.Is(decodeErr, state.ErrNewerField) {
		// A newer walq wrote a field this build must understand: its
		// frame verified, so it is no damage, and it must not be cut.
		return fmt.Errorf("%w: record %d in %s (a %s record): %v",
			wal.ErrNewerFormat, pos.Index, pos.File, state.TypeName(typ), decodeErr)
	}
	err := decodeErr
	if err == nil {
		err = st.ApplyAt(pos.Index, queue, r, pos.Offset)
	}
	if err != nil {
		return &wal.CorruptionError{Dir: logDir, File: pos.File, Index: pos.Index, Offset: pos.Offset,
			Err: fmt.Errorf("replay %s record: %w", state.TypeName(typ), err)}
	}
	return nil
}

// Replay applies to st the records of the log in logDir that follow it, up
// to LSN to (0: to the end of the log), and returns what wal.Scan found.
// The log must hold every record from st.LastLSN()+1 on (a log that starts
// later lost them), and with to != 0 must reach to. after, when not nil, is
// called after each record is applied; an error from it stops the replay
// and is returned as is.
func Replay(st *state.State, logDir string, to uint64, after func(lsn uint64) error) (wal.ScanResult, error) {
	from := st.LastLSN() + 1
	res, err := wal.Scan(logDir, from, to, func(pos wal.Position, rec wal.Record) error {
		if pos.Index != st.LastLSN()+1 {
			return &wal.CorruptionError{Dir: logDir, File: pos.File, Index: pos.Index,
				Err: fmt.Errorf("replay needs index %d but the log starts at %d", st.LastLSN()+1, pos.Index)}
		}
		if err := Apply(st, logDir, pos, rec); err != nil {
			return err
		}
		if after != nil {
			return after(rec.LSN)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if to != 0 && st.LastLSN() != to {
		return res, fmt.Errorf("replay reached LSN %d, wanted %d", st.LastLSN(), to)
	}
	return res, nil
}

// StateAt rebuilds the state at LSN to from the snapshot covering from (0:
// none, an empty queue) in the queue directory dir and the log records
// after it (a snapshot of directory want when want is not zero). after is
// passed to Replay.
func StateAt(dir string, want wal.DirID, from, to uint64, after func(lsn uint64) error) (*state.State, error) {
	st := state.New()
	if from > 0 {
		name := wal.SnapshotName(from)
		var err error
		st, err = ReadSnapshot(dir, wal.SnapshotFile{Name: name, Path: filepath.Join(dir, name), LSN: from}, want)
		if err != nil {
			return nil, fmt.Errorf("read snapshot: %w", err)
		}
	}
	if want.IsZero() {
		// A format-1 log tells where its entries are, not its bodies.
		st.KeepBodies()
	}
	if _, err := Replay(st, filepath.Join(dir, layout.LogDirName), to, after); err != nil {
		return nil, fmt.Errorf("replay log: %w", err)
	}
	return st, nil
}
