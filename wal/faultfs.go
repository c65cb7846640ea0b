package wal

import (
	"errors"
	"os"
	"sync"
)

// ErrInjected is the error FaultFS returns from the operation it fails.
var ErrInjected = errors.New("walq: injected fault")

// FaultFS wraps an FS and fails one chosen operation with ErrInjected, for
// tests that fail the N-th file operation for every N. Every FS method,
// Check included, and every method of the files it opens (except Name)
// counts as one operation. Operations after the failed one go through.
type FaultFS struct {
	inner FS

	mu       sync.Mutex
	calls    int    // operations run so far
	failAt   int    // the calls value that fails; <= 0 never
	failNext string // the next operation with this name fails; "" none
	failErr  error  // what the failNext operation returns; nil: ErrInjected
	failed   bool
	counts   map[string]int // operations run so far, by name
}

// FaultFS also counts the operations by name (OpCount), so a test can check
// that an operation ran as often as it should.

// NewFaultFS returns an FS that fails its failAt-th operation (counting
// from 1). failAt <= 0 never fails.
func NewFaultFS(inner FS, failAt int) *FaultFS {
	return &FaultFS{inner: inner, failAt: failAt}
}

// FailNext makes the next operation named op fail. Names are "open",
// "rename", "remove", "mkdirall", "readdir", "stat", "truncate", "syncdir",
// "dropcache", "preallocate",
// the Check operations ("write", "sync", "truncate-front"), and for files
// "file.read", "file.readat", "file.write", "file.sync", "file.stat",
// "file.truncate", "file.writeat", "file.close".
func (f *FaultFS) FailNext(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext, f.failErr = op, nil
}

// FailNextWith makes the next operation named op fail with err (for example
// syscall.ENOSPC) instead of ErrInjected.
func (f *FaultFS) FailNextWith(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext, f.failErr = op, err
}

// OpCount reports how many operations named op ran, failed ones included.
func (f *FaultFS) OpCount(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

// Calls reports how many operations ran, the failed one included.
func (f *FaultFS) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Failed reports whether an operation was failed.
func (f *FaultFS) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func (f *FaultFS) step(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	f.counts[op]++
	if f.calls == f.failAt || (f.failNext != "" && f.failNext == op) {
		err := ErrInjected
		if f.failNext == op && f.failErr != nil {
			err = f.failErr
		}
		f.failNext, f.failErr = "", nil
		f.failed = true
		return err
	}
	return nil
}

func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.step("open"); err != nil {
		return nil, err
	}
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *FaultFS) Rename(oldpath, newpath string) error {
	if err := f.step("rename"); err != nil {
		return err
	}
	return f.inner.Rename(oldpath, newpath)
}

func (f *FaultFS) Link(oldname, newname string) error {
	if err := f.step("link"); err != nil {
		return err
	}
	return f.inner.Link(oldname, newname)
}

func (f *FaultFS) Remove(name string) error {
	if err := f.step("remove"); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *FaultFS) MkdirAll(path string, perm os.FileMode) error {
	if err := f.step("mkdirall"); err != nil {
		return err
	}
	return f.inner.MkdirAll(path, perm)
}

func (f *FaultFS) ReadDir(name string) ([]os.DirEntry, error) {
	if err := f.step("readdir"); err != nil {
		return nil, err
	}
	return f.inner.ReadDir(name)
}

func (f *FaultFS) Stat(name string) (os.FileInfo, error) {
	if err := f.step("stat"); err != nil {
		return nil, err
	}
	return f.inner.Stat(name)
}

func (f *FaultFS) Truncate(name string, size int64) error {
	if err := f.step("truncate"); err != nil {
		return err
	}
	return f.inner.Truncate(name, size)
}

func (f *FaultFS) SyncDir(dir string) error {
	if err := f.step("syncdir"); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

func (f *FaultFS) Check(op string) error {
	if err := f.step(op); err != nil {
		return err
	}
	return f.inner.Check(op)
}

// DropCache counts as the operation "dropcache" and passes f on to the
// wrapped FS when it implements CacheDropper.
func (f *FaultFS) DropCache(file File) error {
	if err := f.step("dropcache"); err != nil {
		return err
	}
	d, ok := f.inner.(CacheDropper)
	if !ok {
		return nil
	}
	if ff, ok := file.(*faultFile); ok {
		file = ff.File
	}
	return d.DropCache(file)
}

// Preallocate counts as the operation "preallocate" and passes f on to
// the wrapped FS when it implements Preallocator (ErrNoPreallocate when
// not).
func (f *FaultFS) Preallocate(file File, n int64) error {
	if err := f.step("preallocate"); err != nil {
		return err
	}
	p, ok := f.inner.(Preallocator)
	if !ok {
		return ErrNoPreallocate
	}
	if ff, ok := file.(*faultFile); ok {
		file = ff.File
	}
	return p.Preallocate(file, n)
}

type faultFile struct {
	File
	fs *FaultFS
}

func (f *faultFile) Read(p []byte) (int, error) {
	if err := f.fs.step("file.read"); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.step("file.readat"); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.step("file.write"); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.step("file.writeat"); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.step("file.sync"); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Stat() (os.FileInfo, error) {
	if err := f.fs.step("file.stat"); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.step("file.truncate"); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Close always closes the file underneath, so an injected close failure
// does not leak a descriptor.
func (f *faultFile) Close() error {
	err := f.fs.step("file.close")
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}
