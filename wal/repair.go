package wal

// Torn-tail policy.
//
// Batches are written one at a time, and tidwall/wal fsyncs a segment before
// it creates the next, so a crash can only damage the end of the newest
// segment: a record cut short, or a tail the file system filled with zeros
// or garbage. Open tells that apart from damage that must not be papered
// over:
//
//  1. Torn tail: the last segment ends in bytes that do not frame, decode or
//     verify, and no framed entry with a good CRC starts at any byte offset
//     after them. Open copies those bytes to "<segment>.broken"
//     ("<segment>.broken.N" when that exists, so an earlier copy is never
//     overwritten), fsyncs the copy, truncates the segment to the end of its
//     last whole record, fsyncs it and the directory. No caller was told those
//     records were durable: their batch never finished its fsync.
//  2. Corruption: a bad record in any older segment; a bad record in the last
//     segment followed by one that verifies; a record that verifies but has
//     the wrong LSN; a gap or overlap between segments. Open refuses with a
//     *CorruptionError and modifies nothing, because cutting there would drop
//     records that callers were told are durable.
//
// The .broken copy keeps the evidence and is never read again; tidwall/wal
// ignores it (its name is not a segment name).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cleanLeftovers finishes what an interrupted tidwall TruncateFront or
// TruncateBack left behind, exactly as tidwall/wal's Open would, but through
// fsys and followed by a directory fsync, and removes their temp files
// (tidwall/wal leaves those). It returns the names it removed or renamed.
func cleanLeftovers(fsys FS, dir string) ([]string, error) {
	segs, others, err := listSegments(fsys, dir)
	if err != nil {
		return nil, err
	}
	var cleaned []string
	remove := func(name string) error {
		if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("clean leftovers: %w", err)
		}
		cleaned = append(cleaned, name)
		return nil
	}
	for _, name := range others {
		if isLeftoverTemp(name) {
			if err := remove(name); err != nil {
				return cleaned, err
			}
		}
	}
	logical, err := logicalSegments(dir, segs)
	if err != nil {
		return cleaned, err
	}
	kept := make(map[string]bool, len(logical))
	for _, s := range logical {
		kept[s.Name] = true
	}
	for _, s := range segs {
		if !kept[s.Name] {
			if err := remove(s.Name); err != nil {
				return cleaned, err
			}
		}
	}
	for _, s := range logical {
		if !s.Leftover {
			continue
		}
		// Renaming over a plain segment of the same index replaces it, as
		// tidwall/wal does for an .END.
		if err := fsys.Rename(s.Path, filepath.Join(dir, SegmentName(s.First))); err != nil {
			return cleaned, fmt.Errorf("clean leftovers: %w", err)
		}
		cleaned = append(cleaned, s.Name)
	}
	if len(cleaned) > 0 {
		if err := fsys.SyncDir(dir); err != nil {
			return cleaned, fmt.Errorf("clean leftovers: sync dir: %w", err)
		}
	}
	return cleaned, nil
}

// isLeftoverTemp reports whether name is tidwall/wal's temp copy of a
// .START or .END file ("<20 digits>.START.TEMP").
func isLeftoverTemp(name string) bool {
	base, ok := strings.CutSuffix(name, tempSuffix)
	if !ok {
		return false
	}
	_, suffix, ok := parseSegmentName(base)
	return ok && suffix != ""
}

// cutTornTail applies rule 1 of the torn-tail policy to the tail Scan
// reported and returns the name of the .broken copy.
func cutTornTail(fsys FS, dir string, tail *TailInfo, perm os.FileMode) (string, error) {
	segPath := filepath.Join(dir, tail.File)
	data, err := readFile(fsys, segPath)
	if err != nil {
		return "", fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	if int64(len(data)) < tail.Offset {
		return "", fmt.Errorf("repair segment %s: shrank to %d bytes, below the cut at %d",
			tail.File, len(data), tail.Offset)
	}
	broken, err := writeBroken(fsys, dir, tail.File, data[tail.Offset:], perm)
	if err != nil {
		return "", fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	f, err := fsys.OpenFile(segPath, os.O_WRONLY, perm)
	if err != nil {
		return broken, fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	err = f.Truncate(tail.Offset)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return broken, fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	return broken, nil
}

// writeBroken saves cut bytes durably under a name no earlier repair used.
func writeBroken(fsys FS, dir, segment string, cut []byte, perm os.FileMode) (string, error) {
	for n := 0; ; n++ {
		name := segment + ".broken"
		if n > 0 {
			name += "." + strconv.Itoa(n)
		}
		f, err := fsys.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(cut)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return name, err
	}
}
