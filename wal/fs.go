package wal

import (
	"errors"
	"io"
	"log/slog"
	"os"
)

// FS is the seam for every file operation of the log and the queue:
// segment writes and fsyncs, recovery, repair, directory fsyncs and snapshot
// files, so that a test FS can fail any of them.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	// Link makes newname a second name of the file oldname (a hard link).
	Link(oldname, newname string) error
	Remove(name string) error
	MkdirAll(path string, perm os.FileMode) error
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
	Truncate(name string, size int64) error
	// SyncDir fsyncs a directory, making the creates, renames and removes
	// inside it durable.
	SyncDir(dir string) error
	// Check is called by Log right before a write ("write"), a tail fsync
	// ("sync"), a segment roll ("roll") and each segment removal of
	// TruncateFront ("truncate-front"), so that a test FS can fail them
	// without a real error. The OS FS returns nil.
	Check(op string) error
}

// File is the subset of *os.File walq uses.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer
	Sync() error
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Name() string
}

// OSFS returns the FS of the operating system.
func OSFS() FS { return osFS{} }

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (osFS) Link(oldname, newname string) error           { return os.Link(oldname, newname) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }
func (osFS) Truncate(name string, size int64) error       { return os.Truncate(name, size) }
func (osFS) Check(string) error                           { return nil }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// CacheDropper is implemented by an FS that can drop the kernel's cached
// pages of an open file, so that the next read of it comes from the disk.
// OSFS implements it with posix_fadvise(POSIX_FADV_DONTNEED) on Linux and as
// a no-op elsewhere; FaultFS passes it on (op "dropcache") when the FS it
// wraps implements it. An FS without it is read through its cache.
type CacheDropper interface {
	DropCache(f File) error
}

// Preallocator is implemented by an FS that can set disk space aside for a
// file without changing its size, so that appends up to n bytes cannot
// fail for want of space. OSFS implements it with
// fallocate(FALLOC_FL_KEEP_SIZE) on Linux; where the filesystem or the
// system has no such call it returns ErrNoPreallocate. FaultFS passes it
// on (op "preallocate") when the FS it wraps implements it.
type Preallocator interface {
	Preallocate(f File, n int64) error
}

// ErrNoPreallocate is returned by Preallocate where space cannot be set
// aside ahead of writes: the file is written without it.
var ErrNoPreallocate = errors.New("walq: preallocation not supported")

// readFile reads a whole file through fsys.
func readFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f)
}

// readFromDisk reads a whole segment for recovery, past whatever the page
// cache holds. After a failed fsync (of a process that ran before, or of
// this one before it was reopened) the cache can hold pages that the disk
// lost, and Linux marks such pages clean, so a plain read would see records
// that are not on the disk and recovery would judge the wrong bytes.
//
// It first fsyncs the file: pages a killed process wrote but never synced
// are legitimately the file's contents (they survive a kill -9, and records
// written but not synced are kept while undamaged), and dropping the cache
// only drops clean pages, so they must be on the disk first. An error from
// that fsync is logged, not returned: it reports a writeback failure of
// earlier writes (the kernel reports it once, to the first fsync that asks),
// which is exactly the case where the cache cannot be trusted. Failing the
// open would not bring the lost pages back, and the next open would not see
// the error again; dropping the cache and reading what the disk holds lets
// the torn-tail rules judge the real bytes, and a read error there still
// fails the open. For the same reason a failure to drop the cache is logged
// and the read goes ahead: it can be no worse than a read without the drop.
func readFromDisk(fsys FS, name string, logger *slog.Logger) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		logger.Warn("walq: fsync before recovery read failed; the disk may have lost unsynced writes",
			"file", name, "err", err)
	}
	if d, ok := fsys.(CacheDropper); ok {
		if err := d.DropCache(f); err != nil {
			logger.Warn("walq: could not drop cached pages before the recovery read", "file", name, "err", err)
		}
	}
	return readAll(f)
}

// readAll reads f from its current offset to its end.
func readAll(f File) ([]byte, error) {
	// Size the buffer from the file, so a segment of megabytes is read in
	// one allocation rather than grown by doubling (a file still being
	// appended to is read to its end all the same).
	size := 512
	if info, err := f.Stat(); err == nil && info.Size() > 0 {
		size = int(info.Size()) + 512
	}
	buf := make([]byte, 0, size)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}
