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

// A snapshot file of format 2 frames the live state with a header:
//
//	 0                   8         9                    25             33             41        45
//	+-------------------+---------+--------------------+--------------+--------------+---------+-----...
//	| magic "WALQSNAP"  | version | directory ID       | covered LSN  | body length  | CRC-32C | body
//	|                   |  = 2    | (16 bytes)         | (u64, BE)    | (u64, BE)    | (BE)    |
//	+-------------------+---------+--------------------+--------------+--------------+---------+-----...
//
// and the body is a sequence of sections, each
//
//	+-----------+----------------+-----------------+------...
//	| kind (u8) | queue (u64 BE) | length (u64 BE) | data
//	+-----------+----------------+-----------------+------...
//
// The kinds are listed below (SectionQueueState to SectionDirIndex4): this
// build writes exactly one section, of kind SectionDirIndex4, for queue 0,
// and reads every kind listed. A section kind below SectionOptional that
// this build does not know is refused as newer (ErrNewerFormat), never
// skipped; one of SectionOptional or above is skipped. The CRC is CRC-32C (Castagnoli) over the header bytes before it
// and the body, so a flipped bit in the covered LSN is caught too: recovery
// replays the log from that LSN, and a wrong one would silently skip or
// repeat records. The file holds exactly header and body; trailing bytes are
// corruption.
//
// Format 1 snapshots (version 1) have no directory ID and no sections:
//
//	magic "WALQSNAP" | version = 1 | covered LSN (u64) | body length (u64) | CRC-32C | body
//
// Both layouts are frozen; a new layout is a new version.
const (
	snapshotMagic      = "WALQSNAP"
	snapshotVersion1   = 1
	snapshotVersion2   = 2
	snapshotHeaderSize = 29 // version 1
	snapOffVersion     = 8
	snapOffLSN         = 9
	snapOffLength      = 17
	snapOffCRC         = 25

	snapshot2HeaderSize = 45
	snap2OffDir         = 9
	snap2OffLSN         = 25
	snap2OffLength      = 33
	snap2OffCRC         = 41

	// SectionQueueState is the kind of a snapshot section that holds the
	// state of the default queue alone (state body version 1), as written
	// before named queues.
	SectionQueueState = 1
	// SectionDirState is the kind of the section that holds the state of
	// every queue of the directory (state body version 2), as written
	// since named queues and before bodies stayed on disk.
	SectionDirState = 2
	// SectionDirIndex is the kind of the section that holds the index of
	// every queue of the directory, with where each body is in the log
	// but no body (state body version 3), as written since bodies stay on
	// disk and before snapshots were written in pieces. A build before it
	// refuses it as newer.
	SectionDirIndex = 3
	// SectionDirIndex4 is the kind of the section that holds the index as
	// state body version 4, whose keys section lists released keys only
	// (a stored item's key is held by it): written since snapshots are
	// written in pieces. A build before it refuses it as newer.
	SectionDirIndex4 = 4
	// SectionOptional is the first of the optional section kinds (0x80
	// to 0xff): a build that does not know one skips it, and a feature
	// that writes one must stay correct when an older build drops it (it
	// writes the next snapshot without it). A section of a kind below it
	// that this build does not know is refused as newer. No kind of
	// either class is written yet: docs/format-next.md lists those the
	// coming features take.
	SectionOptional   = 0x80
	sectionHeaderSize = 17
)

// Snapshot is a decoded snapshot file.
type Snapshot struct {
	Version int
	Dir     DirID  // zero for version 1
	LSN     uint64 // covered LSN
	// Body is the state (version 2: the data of its section; version 1:
	// the whole body). It aliases the file's bytes.
	Body []byte
	// Kind is the kind of the section Body came from: SectionQueueState,
	// SectionDirState, SectionDirIndex or SectionDirIndex4
	// (SectionQueueState for version 1).
	Kind byte
	// Skipped lists the kinds of the optional sections (SectionOptional
	// and up) this build does not know and skipped, in file order.
	Skipped []byte
}

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

func appendSnapshot2(dst []byte, id DirID, lsn uint64, kind byte, state []byte) []byte {
	return appendSnapshotSections(dst, id, lsn, Section{Kind: kind, Data: state})
}

// Section is one section of a snapshot file.
type Section struct {
	Kind  byte
	Queue uint64
	Data  []byte
}

// EncodeSnapshotSections is a snapshot file holding the sections, in
// order: the state section a build reads, and optional sections
// (SectionOptional and up) beside it.
func EncodeSnapshotSections(id DirID, lsn uint64, sections ...Section) []byte {
	return appendSnapshotSections(nil, id, lsn, sections...)
}

func appendSnapshotSections(dst []byte, id DirID, lsn uint64, sections ...Section) []byte {
	start := len(dst)
	size := 0
	for _, sec := range sections {
		size += sectionHeaderSize + len(sec.Data)
	}
	dst = append(dst, snapshotMagic...)
	dst = append(dst, snapshotVersion2)
	dst = append(dst, id[:]...)
	dst = binary.BigEndian.AppendUint64(dst, lsn)
	dst = binary.BigEndian.AppendUint64(dst, uint64(size))
	crcAt := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	body := len(dst)
	for _, sec := range sections {
		dst = append(dst, sec.Kind)
		dst = binary.BigEndian.AppendUint64(dst, sec.Queue)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(sec.Data)))
		dst = append(dst, sec.Data...)
	}
	crc := crc32.Update(0, castagnoli, dst[start:crcAt])
	crc = crc32.Update(crc, castagnoli, dst[body:])
	binary.BigEndian.PutUint32(dst[crcAt:], crc)
	return dst
}

// snapshotSyncEvery is how much of a snapshot is written between fsyncs.
// A file system that orders data before its journal (ext4's data=ordered)
// may flush every dirty page of the disk at the log's next fsync: written
// whole and synced once, a large snapshot would stall every queue's fsync
// behind it. In chunks, the log's fsyncs wait for one chunk at most.
const snapshotSyncEvery = 8 << 20

// writeSynced writes b to f and fsyncs it, every snapshotSyncEvery bytes
// and at the end.
func writeSynced(f File, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), snapshotSyncEvery)
		if _, err := f.Write(b[:n]); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// EncodeSnapshot returns the bytes of the format-2 snapshot file of
// directory id covering lsn with the default queue's state. WriteSnapshot
// writes the same bytes; this is for tools and tests.
func EncodeSnapshot(id DirID, lsn uint64, state []byte) []byte {
	return appendSnapshot2(nil, id, lsn, SectionDirIndex4, state)
}

// EncodeSnapshotSection is EncodeSnapshot with a section of the given
// kind (see WriteSnapshotSection).
func EncodeSnapshotSection(id DirID, lsn uint64, kind byte, state []byte) []byte {
	return appendSnapshot2(nil, id, lsn, kind, state)
}

// WriteSnapshot writes state (the default queue's) as the format-2 snapshot
// of directory id covering lsn into dir and makes it durable: temp file,
// write, fsync, close, rename, directory fsync. Only after it returns nil
// may the log be truncated. On failure the temp file is removed
// best-effort.
func WriteSnapshot(fsys FS, dir string, id DirID, lsn uint64, state []byte, perm os.FileMode) (path string, err error) {
	return WriteSnapshotSection(fsys, dir, id, lsn, SectionDirIndex4, state, perm)
}

// WriteSnapshotSection is WriteSnapshot with a section of the given kind:
// SectionDirState for a state body of version 2 (which holds the bodies),
// as the carrying forward of a format-1 directory writes.
func WriteSnapshotSection(fsys FS, dir string, id DirID, lsn uint64, kind byte, state []byte, perm os.FileMode) (path string, err error) {
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
	err = writeSynced(f, appendSnapshot2(make([]byte, 0, snapshot2HeaderSize+sectionHeaderSize+len(state)), id, lsn, kind, state))
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

// ReadSnapshot reads and verifies a snapshot file of either version. Every
// defect is a *CorruptionError naming the file.
func ReadSnapshot(path string) (Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read snapshot: %w", err)
	}
	snap, err := DecodeSnapshot(data)
	var ce *CorruptionError
	if errors.As(err, &ce) {
		ce.Dir, ce.File = filepath.Dir(path), filepath.Base(path)
	} else if err != nil {
		err = fmt.Errorf("snapshot %s: %w", path, err)
	}
	return snap, err
}

// DecodeSnapshot verifies the bytes of a snapshot file of either version.
// Body aliases data. It never panics.
func DecodeSnapshot(data []byte) (Snapshot, error) {
	bad := func(off int64, reason error) (Snapshot, error) {
		return Snapshot{}, &CorruptionError{Offset: off, Err: reason}
	}
	if len(data) <= snapOffVersion {
		return bad(int64(len(data)), reasonf("truncated header: %d bytes", len(data)))
	}
	if string(data[:snapOffVersion]) != snapshotMagic {
		return bad(0, corruptReason("bad magic"))
	}
	switch v := data[snapOffVersion]; v {
	case snapshotVersion1:
		return decodeSnapshot1(data)
	case snapshotVersion2:
	default:
		if v > snapshotVersion2 {
			return Snapshot{}, fmt.Errorf("%w: snapshot version %d", ErrNewerFormat, v)
		}
		return bad(snapOffVersion, reasonf("unknown snapshot version %d", v))
	}
	body, err := checkSnapshotFrame(data, snapshot2HeaderSize, snap2OffLength, snap2OffCRC)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Version: snapshotVersion2, LSN: binary.BigEndian.Uint64(data[snap2OffLSN:])}
	copy(snap.Dir[:], data[snap2OffDir:])
	found := false
	for off := 0; off < len(body); {
		if len(body)-off < sectionHeaderSize {
			return bad(int64(snapshot2HeaderSize+off), corruptReason("truncated section header"))
		}
		kind := body[off]
		queue := binary.BigEndian.Uint64(body[off+1:])
		n := binary.BigEndian.Uint64(body[off+9:])
		off += sectionHeaderSize
		if n > uint64(len(body)-off) {
			return bad(int64(snapshot2HeaderSize+off), reasonf("section of %d bytes runs past the end", n))
		}
		switch {
		case kind >= SectionOptional:
			snap.Skipped = append(snap.Skipped, kind)
			off += int(n)
			continue
		case kind != SectionQueueState && kind != SectionDirState && kind != SectionDirIndex && kind != SectionDirIndex4:
			return Snapshot{}, fmt.Errorf("%w: kind %d", ErrNewerSection, kind)
		case queue != 0:
			return Snapshot{}, fmt.Errorf("%w: a section of queue %d", ErrNewerSection, queue)
		case found:
			return bad(int64(snapshot2HeaderSize+off), corruptReason("two state sections"))
		}
		snap.Body, snap.Kind, found = body[off:off+int(n)], kind, true
		off += int(n)
	}
	if !found {
		return bad(snapshot2HeaderSize, corruptReason("no state section"))
	}
	return snap, nil
}

func decodeSnapshot1(data []byte) (Snapshot, error) {
	body, err := checkSnapshotFrame(data, snapshotHeaderSize, snapOffLength, snapOffCRC)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Version: snapshotVersion1, LSN: binary.BigEndian.Uint64(data[snapOffLSN:]), Body: body, Kind: SectionQueueState}, nil
}

// checkSnapshotFrame checks what both snapshot versions frame alike: a
// header of size bytes, a body length at offLength that the file holds
// exactly, and a CRC-32C at offCRC over the header bytes before it and the
// body. It returns the body.
func checkSnapshotFrame(data []byte, size, offLength, offCRC int) ([]byte, error) {
	bad := func(off int, reason error) ([]byte, error) {
		return nil, &CorruptionError{Offset: int64(off), Err: reason}
	}
	if len(data) < size {
		return bad(len(data), reasonf("truncated header: %d bytes", len(data)))
	}
	length := binary.BigEndian.Uint64(data[offLength:])
	if have := uint64(len(data) - size); length != have {
		return bad(offLength, reasonf("body length %d, file holds %d", length, have))
	}
	body := data[size:]
	crc := crc32.Update(0, castagnoli, data[:offCRC])
	crc = crc32.Update(crc, castagnoli, body)
	if crc != binary.BigEndian.Uint32(data[offCRC:]) {
		return bad(offCRC, corruptReason("crc mismatch"))
	}
	return body, nil
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
