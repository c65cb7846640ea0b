package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// The layout of a queue directory, as recovery.go in the root package lays
// it out (its names are unexported there, so they are restated here):
//
//	DIR/LOCK                           flock of the running queue
//	DIR/RESERVE                        1 MiB released by recovery on a full disk
//	DIR/snapshot-<20 digits>.snap      snapshot covering that index
//	DIR/snapshot-<20 digits>.tmp       a snapshot being written, or left by a crash
//	DIR/log/<20 digits>                segment whose first record has that index
//	DIR/log/<20 digits>.START|.END     an interrupted TruncateFront/TruncateBack
//	DIR/log/<...>.START.TEMP|.END.TEMP their temporary copies
//	DIR/log/<20 digits>.broken[.N]     bytes an open cut from a torn tail
//
// walq.Open refuses a directory holding anything else.
const (
	lockName    = "LOCK"
	reserveName = "RESERVE"
	logDirName  = "log"
)

var (
	snapshotRE  = regexp.MustCompile(`^snapshot-\d{20}\.snap$`)
	snapTempRE  = regexp.MustCompile(`^snapshot-\d{20}\.tmp$`)
	segmentRE   = regexp.MustCompile(`^\d{20}$`)
	truncLeftRE = regexp.MustCompile(`^\d{20}\.(START|END)$`)
	truncTempRE = regexp.MustCompile(`^\d{20}\.(START|END)\.TEMP$`)
	brokenRE    = regexp.MustCompile(`^\d{20}\.broken(\.\d+)?$`)
)

type fileKind int

const (
	kindSegment      fileKind = iota // log segment
	kindSnapshot                     // snapshot-N.snap
	kindSnapshotTemp                 // snapshot-N.tmp: a compaction in progress or interrupted
	kindTruncation                   // .START/.END and their .TEMP: a truncation in progress or interrupted
	kindBroken                       // .broken: bytes cut from a torn tail
	kindReserve
	kindLock
	kindForeign // walq.Open refuses the directory while it is there
)

// dirFile is one entry of a queue directory or of its log directory.
type dirFile struct {
	Name string // relative to the queue directory: "log/00000000000000000001"
	Kind fileKind
	Size int64
}

// queueFiles is a listing of a queue directory at one moment. A file that
// vanished between the listing and its stat (a compaction removed it) is
// left out.
type queueFiles struct {
	Dir, LogDir string
	HasLog      bool // the log directory exists (a queue that never opened has none)
	Files       []dirFile
}

// listQueue lists dir and dir/log. It fails when dir is not a directory, or
// is neither a queue directory nor empty enough to be a new one.
func listQueue(dir string) (*queueFiles, error) {
	qf := &queueFiles{Dir: dir, LogDir: filepath.Join(dir, logDirName)}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	segmentNamed := false
	for _, e := range entries {
		name := e.Name()
		kind := kindForeign
		switch {
		case name == logDirName && e.IsDir():
			qf.HasLog = true
			continue
		case e.IsDir():
		case name == lockName:
			kind = kindLock
		case name == reserveName:
			kind = kindReserve
		case snapshotRE.MatchString(name):
			kind = kindSnapshot
		case snapTempRE.MatchString(name):
			kind = kindSnapshotTemp
		case segmentRE.MatchString(name):
			segmentNamed = true
		}
		if err := qf.add(dir, name, name, kind); err != nil {
			return nil, err
		}
	}
	if !qf.HasLog {
		if segmentNamed {
			return nil, fmt.Errorf("%s holds segment files but no log directory: it looks like the log directory itself; pass the queue directory, its parent", dir)
		}
		if !qf.has(kindLock) && !qf.has(kindSnapshot) {
			return nil, fmt.Errorf("%s is not a walq queue directory: it has neither a log directory nor a LOCK file", dir)
		}
		return qf, nil
	}
	entries, err = os.ReadDir(qf.LogDir)
	if errors.Is(err, fs.ErrNotExist) {
		qf.HasLog = false // removed since the first listing
		return qf, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		kind := kindForeign
		switch {
		case e.IsDir():
		case segmentRE.MatchString(name):
			kind = kindSegment
		case truncLeftRE.MatchString(name) || truncTempRE.MatchString(name):
			kind = kindTruncation
		case brokenRE.MatchString(name):
			kind = kindBroken
		}
		if err := qf.add(qf.LogDir, name, logDirName+"/"+name, kind); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(qf.Files, func(i, j int) bool { return qf.Files[i].Name < qf.Files[j].Name })
	return qf, nil
}

func (qf *queueFiles) add(dir, name, rel string, kind fileKind) error {
	info, err := os.Lstat(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	size := info.Size()
	if info.IsDir() {
		size = 0
	}
	qf.Files = append(qf.Files, dirFile{Name: rel, Kind: kind, Size: size})
	return nil
}

func (qf *queueFiles) has(kind fileKind) bool {
	for _, f := range qf.Files {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

// of returns the files of a kind.
func (qf *queueFiles) of(kind fileKind) []dirFile {
	var out []dirFile
	for _, f := range qf.Files {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// bytes sums the sizes of the files of a kind.
func (qf *queueFiles) bytes(kind fileKind) int64 {
	var n int64
	for _, f := range qf.of(kind) {
		n += f.Size
	}
	return n
}

// leftoverNote says what a leftover file is and what becomes of it.
func leftoverNote(k fileKind) string {
	switch k {
	case kindSnapshotTemp:
		return "a snapshot being written by a compaction, or left by one that was interrupted; the next open removes it"
	case kindTruncation:
		return "a log truncation in progress, or left by one that was interrupted; the next open finishes it"
	case kindBroken:
		return "bytes that an open cut from a torn tail, kept as evidence; nothing reads them"
	case kindForeign:
		return "not a file of a walq queue: walq.Open refuses the directory until it is moved out"
	}
	return ""
}
