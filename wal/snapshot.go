package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A snapshot file frames an opaque body (the state package's encoding of the
// live queue) with a header:
//
//	 0                   8         9                  17                 25        29
//	+-------------------+---------+------------------+------------------+---------+------...
//	| magic "WALQSNAP"  | version | covered LSN      | body length      | CRC-32C | body
//	|                   |  = 1    | (uint64, BE)     | (uint64, BE)     | (BE)    |
//	+-------------------+---------+------------------+------------------+---------+------...
//
// The CRC is CRC-32C (Castagnoli) over the header bytes before it and the
// body, so a flipped bit in the covered LSN is caught too: recovery replays
// the log from that LSN, and a wrong one would silently skip or repeat
// records. The file holds exactly header and body; trailing bytes are
// corruption. Layout and constants are frozen; a new layout is a new version.
const (
	snapshotMagic      = "WALQSNAP"
	snapshotVersion1   = 1
	snapshotHeaderSize = 29
	snapOffVersion     = 8
	snapOffLSN         = 9
	snapOffLength      = 17
	snapOffCRC         = 25
)

// A snapshot covering LSN S is named "snapshot-<S in 20 digits>.snap" and is
// written as "snapshot-<S>.tmp" first.
const (
	snapshotPrefix  = "snapshot-"
	snapshotSuffix  = ".snap"
	snapshotTempExt = ".tmp"
)

// SnapshotName returns the file name of the snapshot covering lsn.
func SnapshotName(lsn uint64) string {
	return fmt.Sprintf("%s%0*d%s", snapshotPrefix, segmentDigits, lsn, snapshotSuffix)
}

func snapshotTempName(lsn uint64) string {
	return fmt.Sprintf("%s%0*d%s", snapshotPrefix, segmentDigits, lsn, snapshotTempExt)
}

// SnapshotFile is one snapshot file found by ListSnapshots.
type SnapshotFile struct {
	Name string
	Path string
	LSN  uint64 // covered LSN, from the name
	Size int64
}

func appendSnapshotHeader(dst []byte, lsn uint64, body []byte) []byte {
	start := len(dst)
	dst = append(dst, snapshotMagic...)
	dst = append(dst, snapshotVersion1)
	dst = binary.BigEndian.AppendUint64(dst, lsn)
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	crc := crc32.Update(0, castagnoli, dst[start:])
	crc = crc32.Update(crc, castagnoli, body)
	return binary.BigEndian.AppendUint32(dst, crc)
}

// WriteSnapshot writes body as the snapshot covering lsn into dir and makes
// it durable: temp file, write, fsync, close, rename, directory fsync. Only
// after it returns nil may the log be truncated. On failure the temp file is
// removed best-effort.
func WriteSnapshot(fsys FS, dir string, lsn uint64, body []byte, perm os.FileMode) (path string, err error) {
	if fsys == nil {
		fsys = OSFS()
	}
	tmp := filepath.Join(dir, snapshotTempName(lsn))
	path = filepath.Join(dir, SnapshotName(lsn))
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return "", fmt.Errorf("write snapshot %d: %w", lsn, err)
	}
	defer func() {
		if err != nil {
			fsys.Remove(tmp) // best-effort: a leftover .tmp is ignored by readers
			err = fmt.Errorf("write snapshot %d: %w", lsn, err)
		}
	}()
	header := appendSnapshotHeader(make([]byte, 0, snapshotHeaderSize), lsn, body)
	if _, err = f.Write(header); err == nil {
		_, err = f.Write(body)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if err = fsys.Rename(tmp, path); err != nil {
		return "", err
	}
	if err = fsys.SyncDir(dir); err != nil {
		return "", err
	}
	return path, nil
}

// ReadSnapshot reads and verifies a snapshot file. Every defect is a
// *CorruptionError naming the file.
func ReadSnapshot(path string) (lsn uint64, body []byte, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, fmt.Errorf("read snapshot: %w", err)
	}
	lsn, body, err = DecodeSnapshot(data)
	var ce *CorruptionError
	if errors.As(err, &ce) {
		ce.Dir, ce.File = filepath.Dir(path), filepath.Base(path)
	}
	return lsn, body, err
}

// DecodeSnapshot verifies the bytes of a snapshot file and returns the LSN
// it covers and its body, which aliases data. It never panics.
func DecodeSnapshot(data []byte) (lsn uint64, body []byte, err error) {
	bad := func(off int64, reason error) (uint64, []byte, error) {
		return 0, nil, &CorruptionError{Offset: off, Err: reason}
	}
	if len(data) < snapshotHeaderSize {
		return bad(int64(len(data)), reasonf("truncated header: %d bytes", len(data)))
	}
	if string(data[:snapOffVersion]) != snapshotMagic {
		return bad(0, corruptReason("bad magic"))
	}
	if v := data[snapOffVersion]; v != snapshotVersion1 {
		return bad(snapOffVersion, reasonf("unknown snapshot version %d", v))
	}
	length := binary.BigEndian.Uint64(data[snapOffLength:])
	if have := uint64(len(data) - snapshotHeaderSize); length != have {
		return bad(snapOffLength, reasonf("body length %d, file holds %d", length, have))
	}
	body = data[snapshotHeaderSize:]
	crc := crc32.Update(0, castagnoli, data[:snapOffCRC])
	crc = crc32.Update(crc, castagnoli, body)
	if crc != binary.BigEndian.Uint32(data[snapOffCRC:]) {
		return bad(snapOffCRC, corruptReason("crc mismatch"))
	}
	return binary.BigEndian.Uint64(data[snapOffLSN:]), body, nil
}

// ListSnapshots lists the snapshot files in dir, newest (highest LSN) first.
// Temp files of an interrupted WriteSnapshot are not included.
func ListSnapshots(dir string) ([]SnapshotFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var snaps []SnapshotFile
	for _, e := range entries {
		lsn, ok := parseSnapshotName(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted by a concurrent compaction
		}
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		snaps = append(snaps, SnapshotFile{Name: e.Name(), Path: filepath.Join(dir, e.Name()),
			LSN: lsn, Size: info.Size()})
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].LSN > snaps[j].LSN })
	return snaps, nil
}

func parseSnapshotName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, snapshotPrefix)
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, snapshotSuffix)
	if !ok || len(digits) != segmentDigits {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	lsn, err := strconv.ParseUint(digits, 10, 64)
	return lsn, err == nil
}
