package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// The names of a queue directory and what they mean are internal/layout's.

// dirFile is one entry of a queue directory or of its log directory.
type dirFile struct {
	Name      string // relative to the queue directory: "log/00000000000000000001"
	Kind      layout.Kind
	WrongType bool // a directory where walq keeps a file, or the reverse
	Size      int64
}

// queueFiles is a listing of a queue directory at one moment. A file that
// vanished between the listing and its stat (a compaction removed it) is
// left out.
type queueFiles struct {
	Dir, LogDir string
	HasLog      bool // the log directory exists (a queue that never opened has none)
	Files       []dirFile
}

// listQueue lists dir and dir/log, lost+found and dotfiles left out. It
// fails when dir is not a directory, or is neither a queue directory nor
// empty enough to be a new one.
func listQueue(dir string) (*queueFiles, error) {
	qf := &queueFiles{Dir: dir, LogDir: filepath.Join(dir, layout.LogDirName)}
	l, err := layout.List(wal.OSFS(), dir)
	if err != nil {
		return nil, err
	}
	qf.HasLog = l.HasLog
	segmentNamed := false
	for _, e := range l.Entries {
		if e.Kind == layout.LogDir && !e.WrongType() {
			continue
		}
		segmentNamed = segmentNamed || !strings.Contains(e.Name, "/") && layout.ClassifyLog(e.Name) == layout.Segment
		if err := qf.add(e); err != nil {
			return nil, err
		}
	}
	if !qf.HasLog {
		if segmentNamed {
			return nil, fmt.Errorf("%s holds segment files but no log directory: it looks like the log directory itself; pass the queue directory, its parent", dir)
		}
		if !qf.has(layout.Lock) && !qf.has(layout.Snapshot) && !qf.has(layout.Reserved) {
			return nil, fmt.Errorf("%s is not a walq queue directory: it has neither a log directory nor a LOCK file", dir)
		}
	}
	return qf, nil
}

func (qf *queueFiles) add(e layout.Entry) error {
	info, err := os.Lstat(filepath.Join(qf.Dir, filepath.FromSlash(e.Name)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed by a compaction since the listing
	}
	if err != nil {
		return err
	}
	size := info.Size()
	if info.IsDir() {
		size = 0
	}
	qf.Files = append(qf.Files, dirFile{Name: e.Name, Kind: e.Kind, WrongType: e.WrongType(), Size: size})
	return nil
}

func (qf *queueFiles) has(kind layout.Kind) bool {
	for _, f := range qf.Files {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

// of returns the files of a kind, leaving out those of the wrong type.
func (qf *queueFiles) of(kind layout.Kind) []dirFile {
	var out []dirFile
	for _, f := range qf.Files {
		if f.Kind == kind && !f.WrongType {
			out = append(out, f)
		}
	}
	return out
}

// bytes sums the sizes of the files of a kind.
func (qf *queueFiles) bytes(kind layout.Kind) int64 {
	var n int64
	for _, f := range qf.of(kind) {
		n += f.Size
	}
	return n
}

// leftoverNote says what a leftover file is and what becomes of it.
func leftoverNote(k layout.Kind) string {
	switch k {
	case layout.SnapshotTemp:
		return "a snapshot being written by a compaction, or left by one that was interrupted; the next open removes it"
	case layout.Truncation:
		return "a log truncation in progress, or left by one that was interrupted; the next open finishes it"
	case layout.Broken:
		return "bytes that an open cut from a torn tail, kept as evidence; nothing reads them"
	case layout.Foreign:
		return "not a file of a walq queue: walq leaves it alone (walq.Open warns about it)"
	case layout.Reserved:
		return "a name in walq's own scheme that this build does not know: a file of a newer walq; walq.Open refuses the directory, and this walq-inspect cannot vouch for it"
	}
	return ""
}
