package wal

import (
	"errors"
	"fmt"
	"strings"
)

// ErrCorrupt is the errors.Is target for every kind of corruption this
// package detects: a bad record, a bad snapshot file, a gap in the LSNs.
// The error itself is always a *CorruptionError that says where.
var ErrCorrupt = errors.New("walq: corrupt data")

// ErrFailed is returned, wrapped together with its cause, by every Commit and
// call after a write, an fsync, a directory fsync or a TruncateFront failed
// (except a TruncateFront that failed before it changed anything).
// The failure is sticky: a failed fsync cannot be retried safely, because the
// kernel may have dropped the dirty pages it could not write, so the log
// refuses further work and the queue must be reopened to recover from disk.
var ErrFailed = errors.New("walq: write or fsync failed; reopen the queue")

// ErrNewerFormat is returned, wrapped with what and where, for a directory
// or file written in a format version later than this build reads.
var ErrNewerFormat = errors.New("walq: directory holds a file of a newer walq")

// ErrNewerSection is returned, wrapped, for a snapshot that verifies
// (header and CRC) and holds a section this build must understand and
// does not: a required kind it does not know, or a known one of a queue.
// It wraps ErrNewerFormat. Unlike an unknown version, which a damaged
// header can fake, it cannot come from damage, so no older snapshot may
// stand in for the file.
var ErrNewerSection = fmt.Errorf("%w: a snapshot section this build does not know", ErrNewerFormat)

// ErrClosed is returned by calls on a Log after Close.
var ErrClosed = errors.New("walq: log closed")

// ErrCompacted is returned by Scan when the records it still had to read
// were removed by TruncateFront while it was reading. It is not corruption:
// scanning again from the new start of the log succeeds.
var ErrCompacted = errors.New("walq: records compacted away while scanning")

// CorruptionError says what is wrong and where. errors.Is(err, ErrCorrupt)
// is true for it.
type CorruptionError struct {
	Dir    string // queue log directory (or the snapshot's directory)
	File   string // segment or snapshot file name (base name)
	Index  uint64 // log index (== LSN) of the bad record, 0 when not known
	Offset int64  // byte offset in File
	Err    error  // what is wrong, e.g. "crc mismatch" or "lsn gap: want 17, got 19"
}

// Error reads like "walq: corrupt log: segment 00000000000000000001 index 17
// offset 4096: crc mismatch".
func (e *CorruptionError) Error() string {
	var b strings.Builder
	switch {
	case strings.HasPrefix(e.File, snapshotPrefix):
		fmt.Fprintf(&b, "walq: corrupt snapshot: file %s", e.File)
	case e.File != "" && isSegmentFile(e.File):
		fmt.Fprintf(&b, "walq: corrupt log: segment %s", e.File)
	case e.File != "":
		fmt.Fprintf(&b, "walq: corrupt directory %s: file %s", e.Dir, e.File)
	default:
		b.WriteString("walq: corrupt data:")
	}
	if e.Index != 0 {
		fmt.Fprintf(&b, " index %d", e.Index)
	}
	fmt.Fprintf(&b, " offset %d: %v", e.Offset, e.Err)
	return b.String()
}

// Unwrap returns the description of what is wrong.
func (e *CorruptionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// corruptReason says what is wrong with a record or file without saying
// where; callers that know the location wrap it in a *CorruptionError. It is
// an errors.Is match for ErrCorrupt on its own too, so DecodeRecord's errors
// can be tested without a location.
type corruptReason string

func (r corruptReason) Error() string        { return string(r) }
func (r corruptReason) Is(target error) bool { return target == ErrCorrupt }

func reasonf(format string, args ...any) error {
	return corruptReason(fmt.Sprintf(format, args...))
}

// ErrSegmentGap is matched (errors.Is) by the corruption of a segment that
// starts after the record the one before it ends with: records between
// them are missing. Before the records a snapshot covers that is no
// corruption: a crash after a removal whose directory fsync failed brings
// back some of the segments removed (see Log.TruncateFront).
var ErrSegmentGap = errors.New("walq: lsn gap between segments")

// gapReason is the corruptReason of a gap between segments.
type gapReason struct{ corruptReason }

func (r gapReason) Is(target error) bool {
	return target == ErrSegmentGap || r.corruptReason.Is(target)
}

// isSegmentFile reports whether name is a segment (or a leftover of one).
func isSegmentFile(name string) bool {
	if _, ok := parseSegmentName(name); ok {
		return true
	}
	_, _, ok := parseFormat1Name(name)
	return ok
}
