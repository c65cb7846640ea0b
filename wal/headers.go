package wal

import (
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// VerifyHeaders checks a sealed segment without reading its bodies: its
// header (format, directory ID dir, the first LSN first it is known by),
// and every frame's header (magic, MAC, counts, consecutive LSNs from
// first to last) and record headers (their CRC, reserved bits, lengths
// that add up to the payload), frame after frame to the end of the file,
// which must end on a frame. Bodies are skipped, not read (each is checked
// by its own CRC when it is read), so the cost is that of the headers: two
// small reads a frame at most, fewer when frames are small. Any defect is
// a *CorruptionError naming the file and offset.
//
// It is for sealed segments that recovery does not replay but that still
// hold bodies: those a snapshot covers and those kept out of the log.
func VerifyHeaders(fsys FS, path string, dir DirID, first, last uint64) error {
	bad := func(off int64, lsn uint64, err error) error {
		return &CorruptionError{Dir: filepath.Dir(path), File: filepath.Base(path), Index: lsn, Offset: off, Err: err}
	}
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size()
	buf := make([]byte, SegmentHeaderSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return bad(0, 0, reasonf("segment header: %v", err))
	}
	h, err := decodeSegmentHeader(buf)
	switch {
	case err != nil:
		return bad(0, 0, err)
	case h.dir != dir:
		return bad(0, 0, reasonf("segment of directory %s, this directory is %s", h.dir, dir))
	case h.first != first:
		return bad(0, 0, reasonf("segment header says first LSN %d, its name %d", h.first, first))
	}
	m := newMacer(h.salt)
	// Frames are read through a window: small frames come in one read
	// with their neighbours; a large frame's bodies are jumped over.
	const window = 256 << 10
	win := make([]byte, 0, window)
	var winOff int64
	read := func(off int64, n int) ([]byte, error) {
		if off >= winOff && off+int64(n) <= winOff+int64(len(win)) {
			return win[off-winOff : off-winOff+int64(n)], nil
		}
		want := max(n, window)
		if rest := size - off; int64(want) > rest {
			want = int(rest)
		}
		if want < n {
			return nil, io.ErrUnexpectedEOF
		}
		win = win[:want]
		if _, err := f.ReadAt(win, off); err != nil && err != io.EOF {
			return nil, err
		}
		winOff = off
		return win[:n], nil
	}
	next := first
	for off := int64(SegmentHeaderSize); off < size; {
		fh, err := read(off, FrameHeaderSize)
		if err != nil {
			return bad(off, next, reasonf("frame header cut short: %v", err))
		}
		hdr, err := checkFrameHeader(m, fh)
		if err != nil {
			return bad(off, next, err)
		}
		if hdr.first != next {
			return bad(off, next, reasonf("frame of LSN %d where %d follows", hdr.first, next))
		}
		if off+hdr.size() > size {
			return bad(off, next, reasonf("frame of %d bytes runs past the end of the segment", hdr.size()))
		}
		n := int(hdr.count) * RecordHeaderSize
		rh, err := read(off+FrameHeaderSize, n)
		if err != nil {
			return bad(off, next, reasonf("record headers cut short: %v", err))
		}
		if crc32.Checksum(rh, castagnoli) != hdr.headerCRC {
			return bad(off, next, corruptReason("record headers crc mismatch"))
		}
		var bodies int64
		for i := range int(hdr.count) {
			r, err := decodeRecordHeader(rh[i*RecordHeaderSize:])
			if err != nil {
				return bad(off, next+uint64(i), err)
			}
			bodies += int64(r.length)
		}
		if int64(n)+bodies != int64(hdr.payload) {
			return bad(off, next, reasonf("frame payload of %d bytes, its records hold %d", hdr.payload, int64(n)+bodies))
		}
		next = hdr.last() + 1
		off += hdr.size()
	}
	if last != 0 && next != last+1 {
		return bad(size, next, reasonf("segment ends at LSN %d, its range says %d", next-1, last))
	}
	return nil
}
