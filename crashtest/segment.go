package crashtest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/walq/walq/wal"
)

// The harness reads format-2 segments itself, from the layout drawn in
// wal/format.go, not through package wal: what the power-loss simulation
// keeps must not depend on the reader under test. The offsets below are
// that drawing's.
const (
	segMagic      = "WALQLOG\n"
	frameMagic    = "WQF2"
	segHeaderSize = wal.SegmentHeaderSize // 56
	frHeaderSize  = wal.FrameHeaderSize   // 40
	recHeaderSize = wal.RecordHeaderSize  // 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frameInfo is one frame of a segment that verified whole.
type frameInfo struct {
	off, end    int64  // its bytes in the file
	first, last uint64 // LSNs of its first and last record
	watermark   uint64 // the last LSN fsynced when it was written
}

// segmentFile is a format-2 segment as the harness sees it.
type segmentFile struct {
	dir    wal.DirID
	first  uint64 // first LSN, from the header
	salt   []byte
	size   int64
	frames []frameInfo // the frames that verify, back to back from the header
	end    int64       // the end of the last of them (the header's end when none)
	bad    string      // why the bytes at end are not a frame; "" when the file ends there
}

// last returns the LSN of the last record in the verified frames, first-1
// when there is none.
func (s *segmentFile) last() uint64 {
	if len(s.frames) == 0 {
		return s.first - 1
	}
	return s.frames[len(s.frames)-1].last
}

// watermark returns the highest watermark its verified frames state.
func (s *segmentFile) watermark() uint64 {
	var w uint64
	for _, f := range s.frames {
		w = max(w, f.watermark)
	}
	return w
}

// frameHolding returns the frame that holds lsn.
func (s *segmentFile) frameHolding(lsn uint64) (frameInfo, bool) {
	for _, f := range s.frames {
		if f.first <= lsn && lsn <= f.last {
			return f, true
		}
	}
	return frameInfo{}, false
}

func readSegmentFile(path string) (*segmentFile, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	s, err := parseSegment(data)
	return s, data, err
}

// parseSegment checks a segment's header and walks its frames from it,
// verifying each in full (MAC, LSN, record headers, body CRCs), up to the
// first that does not verify. An error means the header itself is bad.
func parseSegment(data []byte) (*segmentFile, error) {
	if len(data) < segHeaderSize {
		return nil, fmt.Errorf("segment header cut short: %d bytes", len(data))
	}
	if string(data[:8]) != segMagic {
		return nil, errors.New("bad segment magic")
	}
	if binary.BigEndian.Uint32(data[52:]) != crc32.Checksum(data[:52], castagnoli) {
		return nil, errors.New("segment header crc mismatch")
	}
	if v := binary.BigEndian.Uint32(data[8:]); v != 2 {
		return nil, fmt.Errorf("segment of format version %d", v)
	}
	s := &segmentFile{first: binary.BigEndian.Uint64(data[28:]), salt: data[36:52], size: int64(len(data)), end: segHeaderSize}
	copy(s.dir[:], data[12:28])
	next := s.first
	for s.end < s.size {
		f, err := verifyFrame(data, s.end, s.salt, next)
		if err != nil {
			s.bad = err.Error()
			break
		}
		s.frames = append(s.frames, f)
		s.end, next = f.end, f.last+1
	}
	return s, nil
}

// frameMAC returns the MAC a frame header (its first 32 bytes) must carry
// under salt.
// It is AES-128 CBC-MAC with a zero IV over the two 16-byte blocks, as
// wal/format.go draws it, computed here with the standard library's CBC
// mode rather than with package wal.
func frameMAC(salt, hdr []byte) []byte {
	block, err := aes.NewCipher(salt)
	if err != nil {
		panic(err)
	}
	out := make([]byte, 32)
	cipher.NewCBCEncrypter(block, make([]byte, aes.BlockSize)).CryptBlocks(out, hdr[:32])
	return out[16:24]
}

// checkFrameHeader reports whether the bytes at off start a frame header
// that is authentic under salt (magic and MAC), and decodes it.
func checkFrameHeader(data []byte, off int64, salt []byte) (frameInfo, uint32, uint32, bool) {
	if off+frHeaderSize > int64(len(data)) {
		return frameInfo{}, 0, 0, false
	}
	h := data[off : off+frHeaderSize]
	if string(h[:4]) != frameMagic || !bytes.Equal(frameMAC(salt, h), h[32:40]) {
		return frameInfo{}, 0, 0, false
	}
	count := binary.BigEndian.Uint32(h[4:])
	f := frameInfo{off: off, first: binary.BigEndian.Uint64(h[8:]), watermark: binary.BigEndian.Uint64(h[16:])}
	payload := binary.BigEndian.Uint32(h[24:])
	f.end = off + frHeaderSize + int64(payload)
	f.last = f.first + uint64(count) - 1
	return f, count, payload, true
}

// verifyFrame verifies the whole frame at off, which must start at LSN want.
func verifyFrame(data []byte, off int64, salt []byte, want uint64) (frameInfo, error) {
	f, count, payload, ok := checkFrameHeader(data, off, salt)
	switch {
	case !ok:
		return f, fmt.Errorf("no authentic frame header at %d", off)
	case count == 0 || f.first != want:
		return f, fmt.Errorf("frame at %d: %d records from LSN %d, want LSN %d", off, count, f.first, want)
	case uint64(count)*(recHeaderSize+1) > uint64(payload) || f.end > int64(len(data)):
		return f, fmt.Errorf("frame at %d: %d records in %d bytes, %d bytes left", off, count, payload, int64(len(data))-off)
	}
	hdrs := data[off+frHeaderSize : off+frHeaderSize+int64(count)*recHeaderSize]
	if crc32.Checksum(hdrs, castagnoli) != binary.BigEndian.Uint32(data[off+28:]) {
		return f, fmt.Errorf("frame at %d: record headers crc mismatch", off)
	}
	body := off + frHeaderSize + int64(len(hdrs))
	for i := range int(count) {
		rh := hdrs[i*recHeaderSize : (i+1)*recHeaderSize]
		n := int64(binary.BigEndian.Uint32(rh[4:]))
		if rh[0] == 0 || rh[1] != 0 || rh[2] != 0 || rh[3] != 0 || binary.BigEndian.Uint32(rh[20:]) != 0 || n == 0 || body+n > f.end {
			return f, fmt.Errorf("frame at %d: record %d has a bad header", off, f.first+uint64(i))
		}
		if crc32.Checksum(data[body:body+n], castagnoli) != binary.BigEndian.Uint32(rh[16:]) {
			return f, fmt.Errorf("frame at %d: record %d body crc mismatch", off, f.first+uint64(i))
		}
		body += n
	}
	if body != f.end {
		return f, fmt.Errorf("frame at %d: payload of %d bytes, its records hold %d", off, payload, body-off-frHeaderSize)
	}
	return f, nil
}

// framesAfter counts the authentic frame headers at or after from (what
// recovery weighs after damage: frames that reached the disk past a hole).
func framesAfter(data []byte, from int64, salt []byte) int {
	return len(authenticHeaders(data, from, salt))
}

// authenticHeaders returns the frame headers at or after from that verify
// under salt (magic and MAC), wherever they lie: frames, or copies of
// frames inside bodies.
func authenticHeaders(data []byte, from int64, salt []byte) []frameInfo {
	var out []frameInfo
	for off := from; off+frHeaderSize <= int64(len(data)); off++ {
		i := bytes.Index(data[off:], []byte(frameMagic))
		if i < 0 {
			break
		}
		off += int64(i)
		if f, _, _, ok := checkFrameHeader(data, off, salt); ok {
			out = append(out, f)
		}
	}
	return out
}

// rawFrames returns copies of the frames of a segment's bytes, walked from
// the header by their payload length alone, as a reader that knows the
// format but not the salt would: magic and length, nothing verified. The
// walk stops at the first frame that does not fit the bytes (a frame being
// written as the file was read). Frames longer than max are passed over.
func rawFrames(data []byte, max int) [][]byte {
	if len(data) < segHeaderSize || string(data[:8]) != segMagic {
		return nil
	}
	var out [][]byte
	for off := int64(segHeaderSize); off+frHeaderSize <= int64(len(data)); {
		h := data[off:]
		if string(h[:4]) != frameMagic {
			break
		}
		end := off + frHeaderSize + int64(binary.BigEndian.Uint32(h[24:]))
		if end > int64(len(data)) {
			break
		}
		if end-off <= int64(max) {
			out = append(out, append([]byte(nil), data[off:end]...))
		}
		off = end
	}
	return out
}
