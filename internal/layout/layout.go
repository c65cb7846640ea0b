// Package layout names the files walq keeps in a queue directory and tells
// what any other name met there is. It is the one place that knows them:
// recovery, walq-inspect and the crash tests all classify names through it.
//
// A queue directory holds:
//
//	WALQ-FORMAT                       format marker: version and directory ID (format 2 on)
//	WALQ-FORMAT.tmp                   the marker being written, or left by a crash
//	LOCK                              flock of the running queue
//	RESERVE                           room for the next snapshot (at least 1 MiB), freed by recovery or a snapshot on a full disk
//	snapshot-<20 digits>.snap         snapshot covering that LSN
//	snapshot-<20 digits>.tmp          a snapshot being written, or left by a crash
//	log/                              the log
//	log/<20 digits>.seg               format-2 segment whose first record has that LSN
//	log/<20 digits>.seg.tmp           a segment being created, or left by a crash
//	log/<20 digits>.seg.broken[.N]    bytes an open cut from the end of a segment, kept as evidence
//
// and, in a directory of format 1 (no marker) or one whose migration to
// format 2 was interrupted after the marker was written:
//
//	log/<20 digits>                   format-1 (tidwall/wal) segment
//	log/<20 digits>.START | .END      left by an interrupted TruncateFront | TruncateBack
//	log/<20 digits>.START.TEMP | .END.TEMP   their temporary copies
//	log/<20 digits>.broken[.N]        bytes a format-1 open cut from a torn tail
//
// # Naming scheme
//
// Every name in the queue directory and in log/ is in exactly one class:
//
//  1. Own: one of the names above, in the type listed (log/ a directory,
//     the others files). An own name of the wrong type (a directory named
//     LOCK) is damage, not a file to skip.
//  2. Reserved: a name in walq's scheme that this build does not know. At
//     the top level that is any name beginning with "walq" or "WALQ" (in
//     any mix of cases) or with "snapshot-"; in log/ it is any name
//     beginning with 20 decimal digits. A later walq adds files only under
//     reserved names (the format marker, WALQ-FORMAT, is one), so
//     meeting one means a newer walq wrote the directory: this build must
//     refuse it, never skip, cut or remove the file. The prefix is narrow on
//     purpose: a user's README or BACKUP in a queue directory is foreign (a
//     warning), not a reason to refuse the queue.
//  3. Ignored: "lost+found" (a queue directory is often a mount point) and
//     every name beginning with '.'. walq never reads, reports or removes
//     them.
//  4. Foreign: anything else. walq never deletes it and warns about it.
//
// The names of the own class are frozen: renaming one is a format change,
// and so is giving a reserved name a meaning.
package layout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/walq/walq/wal"
)

// Names of the queue directory's fixed entries.
const (
	MarkerName  = "WALQ-FORMAT"
	MarkerTemp  = "WALQ-FORMAT.tmp"
	LockName    = "LOCK"
	ReserveName = "RESERVE"
	LogDirName  = "log"
	// BodiesDirName holds sealed segments moved out of the log for the
	// bodies they still hold (wal.Log.MoveFront), named by their range of
	// records.
	BodiesDirName = "bodies"
	LostFound     = "lost+found"
)

const (
	digits         = 20 // of an LSN or index in a name, zero-padded so names sort by number
	snapshotPrefix = "snapshot-"
	snapshotSuffix = ".snap"
	snapshotTemp   = ".tmp"
	startSuffix    = ".START"
	endSuffix      = ".END"
	tempSuffix     = ".TEMP"
	brokenSuffix   = ".broken"
	segSuffix      = ".seg"
)

// Kind is the class of a name, and for an own name what the file is.
type Kind uint8

const (
	Foreign Kind = iota
	Ignored
	Reserved // in walq's scheme, unknown to this build: a newer walq's file
	Marker
	MarkerTmp
	Lock
	Reserve
	LogDir
	Snapshot
	SnapshotTemp
	Segment
	SegmentTemp
	Format1 // a format-1 segment, .START, .END or their .TEMP copies
	Broken
	BodiesDir
	Kept // a segment kept in the bodies directory
)

var kindNames = [...]string{
	Foreign:      "foreign",
	Ignored:      "ignored",
	Reserved:     "reserved",
	Marker:       "format marker",
	MarkerTmp:    "format marker temp",
	Lock:         "lock",
	Reserve:      "reserve",
	LogDir:       "log directory",
	Snapshot:     "snapshot",
	SnapshotTemp: "snapshot temp",
	Segment:      "segment",
	SegmentTemp:  "segment temp",
	Format1:      "format-1 log file",
	Broken:       "broken",
	BodiesDir:    "bodies directory",
	Kept:         "kept segment",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Own reports whether k is a file (or directory) of this build of walq.
func (k Kind) Own() bool { return k >= Marker }

// IsDir reports whether walq keeps an entry of kind k as a directory.
func (k Kind) IsDir() bool { return k == LogDir || k == BodiesDir }

// Classify returns the kind of a name at the top of a queue directory.
func Classify(name string) Kind {
	switch {
	case ignored(name):
		return Ignored
	case name == MarkerName:
		return Marker
	case name == MarkerTemp:
		return MarkerTmp
	case name == LockName:
		return Lock
	case name == ReserveName:
		return Reserve
	case name == LogDirName:
		return LogDir
	case name == BodiesDirName:
		return BodiesDir
	case strings.HasPrefix(name, snapshotPrefix):
		return classifySnapshot(name)
	case reservedName(name):
		return Reserved
	}
	return Foreign
}

// ClassifyBodies returns the kind of a name in a queue's bodies directory.
func ClassifyBodies(name string) Kind {
	switch {
	case ignored(name):
		return Ignored
	case wal.IsKeptName(name):
		return Kept
	case len(name) >= digits && allDigits(name[:digits]):
		return Reserved
	}
	return Foreign
}

// ClassifyLog returns the kind of a name in a queue's log directory.
func ClassifyLog(name string) Kind {
	switch {
	case ignored(name):
		return Ignored
	case len(name) < digits || !allDigits(name[:digits]):
		return Foreign
	}
	index, err := strconv.ParseUint(name[:digits], 10, 64)
	if err != nil || index == 0 || wal.Format1SegmentName(index) != name[:digits] {
		return Reserved // index 0 or beyond 64 bits: not a name this build writes
	}
	switch rest := name[digits:]; rest {
	case segSuffix:
		return Segment
	case segSuffix + ".tmp":
		return SegmentTemp
	case "", startSuffix, endSuffix, startSuffix + tempSuffix, endSuffix + tempSuffix:
		return Format1
	default:
		rest = strings.TrimPrefix(rest, segSuffix)
		if n, ok := strings.CutPrefix(rest, brokenSuffix); ok && (n == "" || n[0] == '.' && allDigits(n[1:])) {
			return Broken
		}
	}
	return Reserved
}

func ignored(name string) bool { return name == LostFound || strings.HasPrefix(name, ".") }

// classifySnapshot classifies a name that begins with "snapshot-".
func classifySnapshot(name string) Kind {
	rest := name[len(snapshotPrefix):]
	if len(rest) < digits || !allDigits(rest[:digits]) {
		return Reserved
	}
	lsn, err := strconv.ParseUint(rest[:digits], 10, 64)
	if err != nil {
		return Reserved
	}
	switch {
	case name == wal.SnapshotName(lsn):
		return Snapshot
	case rest[digits:] == snapshotTemp:
		return SnapshotTemp
	}
	return Reserved
}

// reservedPrefix begins every name a later walq may add at the top level.
const reservedPrefix = "walq"

// reservedName reports whether name is in the reserved "walq" scheme.
func reservedName(name string) bool {
	return len(name) >= len(reservedPrefix) && strings.EqualFold(name[:len(reservedPrefix)], reservedPrefix)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Entry is one name found in a queue directory or its log directory.
type Entry struct {
	Name  string // relative to the queue directory, with '/': "LOCK", "log/00000000000000000001"
	Kind  Kind
	IsDir bool // a directory, or a symbolic link to one
}

// WrongType reports an own name of the wrong type: a directory where walq
// keeps a file, or the reverse.
func (e Entry) WrongType() bool { return e.Kind.Own() && e.IsDir != e.Kind.IsDir() }

// Listing is what List found, ignored names left out.
type Listing struct {
	Entries []Entry // sorted by Name
	HasLog  bool    // log/ exists and is a directory (it was listed)
}

// Queue reports whether the listing holds any name of walq's scheme, own
// or reserved: whether the directory is a queue rather than a directory
// for a new one.
func (l *Listing) Queue() bool {
	for _, e := range l.Entries {
		if e.Kind.Own() || e.Kind == Reserved {
			return true
		}
	}
	return false
}

// Of returns the entries of kind k.
func (l *Listing) Of(k Kind) []Entry {
	var out []Entry
	for _, e := range l.Entries {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// DirReader is what List needs of a file system; wal.FS has it.
type DirReader interface {
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
}

// List reads dir and, when it has one, its log directory, and classifies
// every entry. It only reads. An entry that vanishes while it is listed (a
// running queue compacts) is left out.
func List(fsys DirReader, dir string) (*Listing, error) {
	l := &Listing{}
	top, err := readDir(fsys, dir, "", Classify)
	if err != nil {
		return nil, err
	}
	l.Entries = top
	for _, e := range top {
		if e.Kind == LogDir && e.IsDir {
			logEntries, err := readDir(fsys, filepath.Join(dir, LogDirName), LogDirName, ClassifyLog)
			if errors.Is(err, fs.ErrNotExist) {
				break // removed since the first listing
			}
			if err != nil {
				return nil, err
			}
			l.HasLog = true
			l.Entries = append(l.Entries, logEntries...)
		}
		if e.Kind == BodiesDir && e.IsDir {
			kept, err := readDir(fsys, filepath.Join(dir, BodiesDirName), BodiesDirName, ClassifyBodies)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			l.Entries = append(l.Entries, kept...)
		}
	}
	sort.Slice(l.Entries, func(i, j int) bool { return l.Entries[i].Name < l.Entries[j].Name })
	return l, nil
}

func readDir(fsys DirReader, dir, rel string, classify func(string) Kind) ([]Entry, error) {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, de := range des {
		kind := classify(de.Name())
		if kind == Ignored {
			continue
		}
		isDir := de.IsDir()
		if de.Type()&fs.ModeSymlink != 0 {
			info, err := fsys.Stat(filepath.Join(dir, de.Name()))
			switch {
			case err == nil:
				isDir = info.IsDir()
			case !errors.Is(err, fs.ErrNotExist): // a dangling link is not a directory
				return nil, err
			}
		}
		out = append(out, Entry{Name: path.Join(rel, de.Name()), Kind: kind, IsDir: isDir})
	}
	return out, nil
}
