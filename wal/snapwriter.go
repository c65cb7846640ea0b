package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// SnapshotWriter writes a format-2 snapshot file with one section, a piece
// at a time, so that a large state never needs to be in memory whole. The
// lengths and the CRC, which the header holds before the body, are written
// last: the CRC by reading the body back in pieces (from the page cache).
// The file is a temp file until Commit renames it; readers ignore temp
// files, so a crash at any point leaves the snapshots as they were.
type SnapshotWriter struct {
	fsys FS
	f    File
	dir  string
	tmp  string
	lsn  uint64
	n    int64 // bytes of state written
	buf  []byte
	// synced is how much was written at the last fsync (see
	// snapshotSyncEvery).
	synced  int64
	flushed int64 // bytes handed to the file
	err     error
}

// CreateSnapshot starts the format-2 snapshot of directory id covering
// lsn in dir, with one section of kind kind.
func CreateSnapshot(fsys FS, dir string, id DirID, lsn uint64, kind byte, perm os.FileMode) (*SnapshotWriter, error) {
	if fsys == nil {
		fsys = OSFS()
	}
	w := &SnapshotWriter{fsys: fsys, dir: dir, tmp: filepath.Join(dir, snapshotTempName(lsn)), lsn: lsn}
	f, err := fsys.OpenFile(w.tmp, os.O_CREATE|os.O_RDWR|os.O_TRUNC, perm)
	if err != nil {
		return nil, fmt.Errorf("write snapshot %d: %w", lsn, err)
	}
	w.f = f
	// The header as it will be, with the lengths and the CRC still zero.
	w.buf = appendSnapshot2(make([]byte, 0, 1<<20), id, lsn, kind, nil)
	return w, nil
}

// Write appends p to the state.
func (w *SnapshotWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	w.n += int64(len(p))
	if len(w.buf) >= 1<<20 {
		if w.err = w.flush(); w.err != nil {
			return 0, w.err
		}
	}
	return len(p), nil
}

func (w *SnapshotWriter) flush() error {
	if _, err := w.f.Write(w.buf); err != nil {
		return err
	}
	w.synced += int64(len(w.buf))
	w.flushed += int64(len(w.buf))
	w.buf = w.buf[:0]
	if w.synced >= snapshotSyncEvery {
		w.synced = 0
		return w.f.Sync()
	}
	return nil
}

// Size is the number of state bytes written so far.
func (w *SnapshotWriter) Size() int64 { return w.n }

// Flushed is the number of bytes handed to the file so far (the writer
// holds up to 1 MiB before it writes): what the disk can show of it.
func (w *SnapshotWriter) Flushed() int64 { return w.flushed }

// Commit completes the file (lengths, CRC), makes it durable and gives it
// its name: after it returns nil the snapshot is there for good and the
// log before it may go. On failure the temp file is removed best-effort.
func (w *SnapshotWriter) Commit() (path string, err error) {
	defer func() {
		if err != nil {
			w.Abort()
			err = fmt.Errorf("write snapshot %d: %w", w.lsn, err)
		}
	}()
	if w.err != nil {
		return "", w.err
	}
	if err := w.flush(); err != nil {
		return "", err
	}
	var hdr [snapshot2HeaderSize + sectionHeaderSize]byte
	if _, err := w.f.ReadAt(hdr[:], 0); err != nil {
		return "", err
	}
	binary.BigEndian.PutUint64(hdr[snap2OffLength:], uint64(sectionHeaderSize)+uint64(w.n))
	binary.BigEndian.PutUint64(hdr[snapshot2HeaderSize+9:], uint64(w.n))
	crc := crc32.Update(0, castagnoli, hdr[:snap2OffCRC])
	crc = crc32.Update(crc, castagnoli, hdr[snapshot2HeaderSize:])
	buf := make([]byte, 1<<20)
	for off := int64(len(hdr)); off < int64(len(hdr))+w.n; {
		k := min(int64(len(buf)), int64(len(hdr))+w.n-off)
		if _, err := w.f.ReadAt(buf[:k], off); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		crc = crc32.Update(crc, castagnoli, buf[:k])
		off += k
	}
	binary.BigEndian.PutUint32(hdr[snap2OffCRC:], crc)
	if _, err := w.f.WriteAt(hdr[:], 0); err != nil {
		return "", err
	}
	if err := w.f.Sync(); err != nil {
		return "", err
	}
	err = w.f.Close()
	w.f = nil
	if err != nil {
		return "", err
	}
	path = filepath.Join(w.dir, SnapshotName(w.lsn))
	if err := w.fsys.Rename(w.tmp, path); err != nil {
		return "", err
	}
	if err := w.fsys.SyncDir(w.dir); err != nil {
		return "", err
	}
	return path, nil
}

// Abort gives the snapshot up and removes its temp file (best-effort).
func (w *SnapshotWriter) Abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.fsys.Remove(w.tmp)
	if w.err == nil {
		w.err = fmt.Errorf("write snapshot %d: aborted", w.lsn)
	}
}
