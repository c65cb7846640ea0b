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
//     verify, and no later record follows them (the rule below). Open copies
//     the first brokenKeep bytes of them (64 KiB) to "<segment>.broken"
//     ("<segment>.broken.N" when that exists, so an earlier copy is never
//     overwritten) and fsyncs the copy, truncates the segment to the end of
//     its last whole record, fsyncs it and the directory, and logs the full
//     length cut (OpenInfo.CutBytes has it too). No caller was told those
//     records were durable: their batch never finished its fsync. The copy is
//     bounded and best effort: when it cannot be written (a full disk is the
//     likely reason after a torn write) the partial copy is removed, a
//     warning logged, and the cut goes ahead, so a full disk never stops the
//     open.
//  2. Corruption: a bad record in any older segment; a bad record in the last
//     segment followed by a later record; a record that verifies but has the
//     wrong LSN; a gap or overlap between segments. Open refuses with a
//     *CorruptionError and modifies nothing, because cutting there would drop
//     records that callers were told are durable.
//
// "A later record follows" means: a framed entry whose CRC verifies and whose
// LSN is greater than the LSN the damaged entry should have carried (a later
// write has a later LSN), found by trying every byte offset from a start
// chosen so that no body byte of the damaged entry is ever tried:
//
//   - When the damaged entry's length prefix decodes, the search starts at
//     the end that prefix declares, and when that end lies past the end of
//     the file nothing can follow: torn tail. Body bytes always lie inside
//     the extent their own record's prefix declares, and a kill -9 leaves a
//     prefix of what was written, so a torn write keeps the damaged entry's
//     length prefix whenever any of its body is there. A body that embeds a
//     copy of a real framed record (a queue carrying log segments, or a
//     hostile producer) therefore lies wholly before the search starts and
//     cannot turn its own torn write into "corruption".
//   - Only when the prefix itself does not decode (too long or overflowing)
//     does the search start at the next byte. A kill -9 cannot produce that;
//     it takes damage after the write or pages of an unsynced range reaching
//     the disk out of order (a power loss), which this format cannot tell
//     apart from corruption: the next format records on disk which records
//     were promised durable and frames that body bytes cannot forge.
//
// The price of the first rule in this format: a bit flip in the length
// prefix of one of the last records that makes it declare an end past the
// end of the file is taken for a torn tail, and the records after it are cut.
//
// The .broken copy keeps the evidence and is never read again; tidwall/wal
// ignores it (its name is not a segment name).

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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

// brokenKeep bounds the .broken copy of a cut tail. A torn PutBatch can be
// tens of megabytes, and a copy of all of it could fill the disk that the cut
// is meant to bring back into service; the first bytes (the damaged entry's
// length prefix, header and LSN, and what follows them) are the evidence
// worth keeping.
const brokenKeep = 64 << 10

// cutTornTail applies rule 1 of the torn-tail policy to the tail Scan
// reported and returns the name of the .broken copy ("" when none could be
// written: the copy is evidence, never a reason to refuse the open).
func cutTornTail(fsys FS, dir string, tail *TailInfo, perm os.FileMode, logger *slog.Logger) (string, error) {
	segPath := filepath.Join(dir, tail.File)
	kept, err := readCutStart(fsys, segPath, tail.Offset)
	if err != nil {
		return "", fmt.Errorf("repair segment %s: %w", tail.File, err)
	}
	broken, err := writeBroken(fsys, dir, tail.File, kept, perm)
	if err != nil {
		logger.Warn("walq: could not keep a copy of the torn tail; cutting it all the same",
			"dir", dir, "segment", tail.File, "offset", tail.Offset, "bytes", tail.Bytes, "err", err)
		broken = ""
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

// readCutStart reads the first brokenKeep bytes from offset on.
func readCutStart(fsys FS, path string, offset int64) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() < offset {
		return nil, fmt.Errorf("shrank to %d bytes, below the cut at %d", info.Size(), offset)
	}
	kept := make([]byte, min(info.Size()-offset, brokenKeep))
	if _, err := f.ReadAt(kept, offset); err != nil {
		return nil, err
	}
	return kept, nil
}

// writeBroken saves kept durably under a name no earlier repair used. When
// it fails it removes what it created, so a failed copy leaves nothing
// behind (and a later repair does not number around it).
func writeBroken(fsys FS, dir, segment string, kept []byte, perm os.FileMode) (string, error) {
	for n := 0; ; n++ {
		name := segment + ".broken"
		if n > 0 {
			name += "." + strconv.Itoa(n)
		}
		path := filepath.Join(dir, name)
		f, err := fsys.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(kept)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if rerr := fsys.Remove(path); rerr != nil {
				return "", fmt.Errorf("%w (and removing the partial copy %s: %v)", err, name, rerr)
			}
			return "", err
		}
		return name, nil
	}
}
