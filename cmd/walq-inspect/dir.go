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
	Name      string // relative to the queue directory: "log/00000000000000000001.seg"
	Kind      layout.Kind
	WrongType bool // a directory where walq keeps a file, or the reverse
	Size      int64
}

// queueFiles is a listing of a queue directory at one moment, and what its
// format marker says. A file that vanished between the listing and its stat
// (a compaction removed it) is left out.
type queueFiles struct {
	Dir, LogDir string
	HasLog      bool // the log directory exists (a queue that never opened has none)
	Files       []dirFile
	Format      dirFormat
}

// dirFormat is what a directory's files say about its format, told as the
// root package's readFormat (migrate.go) tells it, so that this tool and
// walq.Open agree.
type dirFormat struct {
	// Version is 2 for a directory with a marker (or with format-2
	// segments and no marker), 1 for one with format-1 files or snapshots
	// and no marker, 0 for a new queue that has no marker yet.
	Version int
	ID      wal.DirID // from the marker; zero when it is missing or damaged
	// Problem is set when the marker of a format-2 directory is missing or
	// does not verify: a *wal.CorruptionError naming it. walq.Open refuses
	// such a directory.
	Problem error
}

// listQueue lists dir and dir/log, lost+found and dotfiles left out, and
// reads the format marker. It fails when dir is not a directory, is
// neither a queue directory nor empty enough to be a new one, or has a
// marker of a newer walq.
func listQueue(dir string) (*queueFiles, error) {
	qf := &queueFiles{Dir: dir, LogDir: filepath.Join(dir, layout.LogDirName)}
	l, err := layout.List(wal.OSFS(), dir)
	if err != nil {
		return nil, err
	}
	qf.HasLog = l.HasLog
	logNamed := false
	for _, e := range l.Entries {
		if e.Kind == layout.LogDir && !e.WrongType() {
			continue
		}
		if !strings.Contains(e.Name, "/") {
			k := layout.ClassifyLog(e.Name)
			logNamed = logNamed || k == layout.Segment || k == layout.Format1
		}
		if err := qf.add(e); err != nil {
			return nil, err
		}
	}
	if !qf.HasLog {
		if logNamed {
			return nil, fmt.Errorf("%s holds segment files but no log directory: it looks like the log directory itself; pass the queue directory, its parent", dir)
		}
		if !qf.has(layout.Lock) && !qf.has(layout.Marker) && !qf.has(layout.Snapshot) && !qf.has(layout.Reserved) {
			return nil, fmt.Errorf("%s is not a walq queue directory: it has neither a log directory nor a LOCK file", dir)
		}
	}
	if qf.Format, err = readFormat(qf); err != nil {
		return nil, err
	}
	return qf, nil
}

// readFormat reads the marker. Only a marker of a newer walq is an error:
// this build cannot tell what the rest of such a directory means.
func readFormat(qf *queueFiles) (dirFormat, error) {
	corrupt := func(err error) dirFormat {
		return dirFormat{Version: wal.FormatVersion,
			Problem: &wal.CorruptionError{Dir: qf.Dir, File: layout.MarkerName, Err: err}}
	}
	var marker *dirFile
	for i := range qf.Files {
		if qf.Files[i].Kind == layout.Marker {
			marker = &qf.Files[i]
		}
	}
	switch {
	case marker == nil && len(qf.of(layout.Segment)) > 0:
		return corrupt(fmt.Errorf("format marker missing, but %s is a format-2 segment", qf.of(layout.Segment)[0].Name)), nil
	case marker == nil && (len(qf.of(layout.Format1)) > 0 || len(qf.of(layout.Snapshot)) > 0):
		return dirFormat{Version: 1}, nil
	case marker == nil:
		return dirFormat{}, nil
	case marker.WrongType:
		return corrupt(errors.New("a directory where the format marker should be")), nil
	}
	path := filepath.Join(qf.Dir, layout.MarkerName)
	id, err := wal.ReadMarker(wal.OSFS(), path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return corrupt(errors.New("format marker vanished while it was read")), nil
	case errors.Is(err, wal.ErrNewerFormat):
		detail := strings.TrimPrefix(err.Error(), wal.ErrNewerFormat.Error()+": ")
		return dirFormat{}, fmt.Errorf("%s: written by a newer walq (%s): this walq-inspect cannot read the directory; use the walq-inspect of the walq that wrote it",
			path, detail)
	case errors.Is(err, wal.ErrCorrupt):
		return corrupt(err), nil
	case err != nil:
		return corrupt(fmt.Errorf("format marker cannot be read: %w", err)), nil
	}
	return dirFormat{Version: wal.FormatVersion, ID: id}, nil
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

// format1 reports whether the directory is of format 1.
func (qf *queueFiles) format1() bool { return qf.Format.Version == 1 }

// segmentKind is the kind of the log's segment files: format-1 files in a
// directory of format 1, format-2 segments otherwise.
func (qf *queueFiles) segmentKind() layout.Kind {
	if qf.format1() {
		return layout.Format1
	}
	return layout.Segment
}

// truncationLeftover reports whether a format-1 log file is a leftover of
// an interrupted tidwall/wal truncation (".START", ".END", their ".TEMP").
func truncationLeftover(name string) bool {
	for _, suffix := range []string{".START", ".END", ".TEMP"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// leftoverNote says, of a leftover, what it is and what becomes of it; ""
// when f is not one.
func (qf *queueFiles) leftoverNote(f dirFile) string {
	switch {
	case f.WrongType:
		return ""
	case f.Kind == layout.Format1 && qf.format1():
		if truncationLeftover(f.Name) {
			return "left by a format-1 truncation that was interrupted; read as tidwall/wal resolves it, and the next open carries the log forward"
		}
		return ""
	}
	switch f.Kind {
	case layout.SnapshotTemp, layout.MarkerTmp, layout.SegmentTemp, layout.Broken, layout.Format1:
		return leftoverNote(f.Kind)
	}
	return ""
}

// reader returns the reader of the directory's log.
func (qf *queueFiles) reader() *logReader {
	return &logReader{dir: qf.LogDir, format1: qf.format1(), want: qf.Format.ID}
}

// leftoverNote says what a leftover file is and what becomes of it.
func leftoverNote(k layout.Kind) string {
	switch k {
	case layout.SnapshotTemp:
		return "a snapshot being written by a compaction, or left by one that was interrupted; the next open removes it"
	case layout.MarkerTmp:
		return "the format marker being written, or left by a crash while it was; the next open removes it"
	case layout.SegmentTemp:
		return "a segment being created (its header is written and fsynced before the rename), or left by a crash while it was; the next open removes it"
	case layout.Format1:
		return "a format-1 log file, left by a migration to format 2 that a crash interrupted after the marker was written; the next open removes it"
	case layout.Broken:
		return "bytes that an open cut from the end of a segment, kept as evidence; nothing reads them"
	case layout.Foreign:
		return "not a file of a walq queue: walq leaves it alone (walq.Open warns about it)"
	case layout.Reserved:
		return "a name in walq's own scheme that this build does not know: a file of a newer walq; walq.Open refuses the directory, and this walq-inspect cannot vouch for it"
	}
	return ""
}

// formatText describes the directory's format for summary and verify.
func formatText(f dirFormat) string {
	switch f.Version {
	case 0:
		return "none yet: a new queue, which the next open gives its marker and directory ID"
	case 1:
		return "1 (no marker): read as format 1 wrote it; the next walq.Open carries it forward to format 2 (a new directory ID, a format-2 snapshot and log)"
	}
	return fmt.Sprintf("%d, directory ID %s (%s)", f.Version, f.ID, layout.MarkerName)
}

// noteFormat tells, on stderr, the commands that do not check the directory
// what a marker problem means for what they print.
func (c *cmdEnv) noteFormat(qf *queueFiles) {
	if err := qf.Format.Problem; err != nil {
		c.notef("%v; the directory ID is not known, so segments and snapshots are not checked against it (walq.Open refuses the directory; see \"walq-inspect verify\")", err)
	}
}
