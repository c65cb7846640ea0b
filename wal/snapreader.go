package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// SnapshotReader reads the state of a snapshot file a piece at a time:
// OpenSnapshot checks the headers, Read gives the state's bytes, and Close
// checks what only the whole file can tell (the CRC). A caller decodes as
// it reads and trusts nothing it decoded until Close returns nil.
type SnapshotReader struct {
	Snapshot       // Body is nil when the state is read in pieces
	Size     int64 // bytes of state

	path string
	f    *os.File
	r    io.Reader
	crc  uint32
	want uint32
	left int64 // state bytes not read yet (pieces only)
}

// OpenSnapshot opens the snapshot file at path. A file of format 2 with
// one section (what this build writes) is read in pieces; any other (of
// format 1, or of several sections) is read and verified whole, as
// ReadSnapshot does. Every defect is a *CorruptionError naming the file.
func OpenSnapshot(path string) (*SnapshotReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	r, err := openSnapshot(f)
	if err != nil {
		f.Close()
		var ce *CorruptionError
		if errors.As(err, &ce) {
			ce.Dir, ce.File = filepath.Dir(path), filepath.Base(path)
		} else {
			err = fmt.Errorf("snapshot %s: %w", path, err)
		}
		return nil, err
	}
	r.path = path
	return r, nil
}

func openSnapshot(f *os.File) (*SnapshotReader, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var hdr [snapshot2HeaderSize + sectionHeaderSize]byte
	n, err := io.ReadFull(f, hdr[:])
	whole := err != nil || hdr[snapOffVersion] != snapshotVersion2 || string(hdr[:snapOffVersion]) != snapshotMagic
	if !whole {
		length := binary.BigEndian.Uint64(hdr[snap2OffLength:])
		state := binary.BigEndian.Uint64(hdr[snapshot2HeaderSize+9:])
		whole = length != uint64(info.Size()-snapshot2HeaderSize) || state != length-sectionHeaderSize
	}
	kind, queue := hdr[snapshot2HeaderSize], binary.BigEndian.Uint64(hdr[snapshot2HeaderSize+1:])
	if kind != SectionQueueState && kind != SectionDirState && kind != SectionDirIndex && kind != SectionDirIndex4 || queue != 0 {
		// Not a section this build streams: the whole-file check verifies
		// the CRC before it says the section is newer (or damaged).
		whole = true
	}
	if whole {
		// Not the layout this build writes, or damaged: the whole-file
		// check says exactly what is wrong.
		data := make([]byte, 0, info.Size())
		data = append(data, hdr[:n]...)
		rest, err := io.ReadAll(f)
		if err != nil {
			return nil, err
		}
		snap, err := DecodeSnapshot(append(data, rest...))
		if err != nil {
			return nil, err
		}
		f.Close()
		return &SnapshotReader{Snapshot: snap, Size: int64(len(snap.Body)), r: bytes.NewReader(snap.Body)}, nil
	}
	r := &SnapshotReader{
		Snapshot: Snapshot{Version: snapshotVersion2, LSN: binary.BigEndian.Uint64(hdr[snap2OffLSN:]), Kind: kind},
		f:        f,
		want:     binary.BigEndian.Uint32(hdr[snap2OffCRC:]),
	}
	copy(r.Dir[:], hdr[snap2OffDir:])
	r.Size = int64(binary.BigEndian.Uint64(hdr[snapshot2HeaderSize+9:]))
	r.left = r.Size
	r.crc = crc32.Update(0, castagnoli, hdr[:snap2OffCRC])
	r.crc = crc32.Update(r.crc, castagnoli, hdr[snapshot2HeaderSize:])
	r.r = f
	return r, nil
}

// Read reads the state's bytes.
func (r *SnapshotReader) Read(p []byte) (int, error) {
	if r.f == nil {
		return r.r.Read(p)
	}
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.crc = crc32.Update(r.crc, castagnoli, p[:n])
	r.left -= int64(n)
	if err == io.EOF && r.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Close reads what the caller left unread and checks the CRC of the whole
// file: a mismatch is a *CorruptionError naming it, and whatever was
// decoded from it must be thrown away.
func (r *SnapshotReader) Close() error {
	if r.f == nil {
		return nil // verified whole when opened
	}
	defer func() { r.f.Close(); r.f = nil }()
	if _, err := io.Copy(io.Discard, readerOnly{r}); err != nil {
		return fmt.Errorf("snapshot %s: %w", r.path, err)
	}
	if r.crc != r.want {
		return &CorruptionError{Dir: filepath.Dir(r.path), File: filepath.Base(r.path), Offset: snap2OffCRC, Err: corruptReason("crc mismatch")}
	}
	return nil
}

// readerOnly hides every method but Read (io.Copy would use WriteTo).
type readerOnly struct{ io.Reader }
