package wal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// Format 2: the directory marker, the segment header, frames and records.
//
// A queue directory of format 2 holds a marker file (layout.MarkerName,
// "WALQ-FORMAT") written once when the directory is made or migrated:
//
//	 0                   8              12                                28          32
//	+-------------------+--------------+---------------------------------+-----------+
//	| magic "WALQDIR\n" | version = 2  | directory ID (16 random bytes)  | CRC-32C   |
//	|                   | (uint32, BE) |                                 | (BE)      |
//	+-------------------+--------------+---------------------------------+-----------+
//
// Its CRC covers bytes 0..27. Every segment and snapshot repeats the
// directory ID, so a file copied in from another directory is refused, and
// every receipt carries it, so a receipt can never act in another directory.
//
// A segment is the file log/<first LSN in 20 digits>.seg. It starts with a
// header that is written and fsynced (with the directory) before any frame:
//
//	 0                   8              12                 28              36                52         56
//	+-------------------+--------------+------------------+---------------+-----------------+----------+
//	| magic "WALQLOG\n" | version = 2  | directory ID     | first LSN     | salt (16 random | CRC-32C  |
//	|                   | (uint32, BE) | (16 bytes)       | (uint64, BE)  | bytes)          | (BE)     |
//	+-------------------+--------------+------------------+---------------+-----------------+----------+
//
// and then holds frames, back to back, to its end. One frame is one commit
// batch, written by one write:
//
//	frame header (40 bytes)
//	 0        4          8              16             24             28             32                40
//	+--------+----------+--------------+--------------+--------------+--------------+-----------------+
//	| "WQF2" | count    | first LSN    | watermark    | payload len  | CRC-32C of   | MAC (8 bytes)   |
//	|        | (u32 BE) | (u64 BE)     | (u64 BE)     | (u32 BE)     | rec. headers |                 |
//	+--------+----------+--------------+--------------+--------------+--------------+-----------------+
//	count record headers (24 bytes each)
//	 0        1        2          4               8                  16               20          24
//	+--------+--------+----------+---------------+------------------+----------------+-----------+
//	| type   | flags  | reserved | body length   | queue            | CRC-32C of     | reserved  |
//	| (!= 0) | (= 0)  | (= 0)    | (u32 BE, > 0) | (u64 BE)         | the body (BE)  | (= 0)     |
//	+--------+--------+----------+---------------+------------------+----------------+-----------+
//	the bodies, in record order, each exactly its body length
//
// payload len = 24*count + the sum of the body lengths. The records carry
// LSNs first LSN, first LSN+1, ... first LSN+count-1.
//
//   - The MAC is the first 8 bytes of the AES-128 CBC-MAC, keyed with the
//     segment's salt and a zero IV, of header bytes 0..31: E(k, E(k, b0) XOR
//     b1) for the two 16-byte blocks b0, b1. CBC-MAC is a secure MAC for
//     messages of one fixed length, which these are. The salt is random per
//     segment and lives only in the segment header, never in a frame, so no
//     byte sequence a producer can put in a body verifies as a frame header:
//     a CRC, even a seeded one, is linear, and one real frame copied into a
//     body would let anyone who sees it compute the CRC of any other frame
//     of that length; a MAC cannot be forged that way. (HMAC-SHA256 would
//     do too, at six times the cost per frame: about 250 ns against 45.) A copy of a real frame of the
//     same segment does verify, but carries that frame's own LSN, which is
//     never the LSN expected where the copy lies (see repair.go).
//   - The watermark is the last LSN known fsynced when the frame was written.
//     Every record up to it was promised durable, whatever happened later;
//     recovery uses it to tell damage to a promised record (corruption) from
//     damage to a record no caller was promised (cut). The rule and its
//     table are at the top of repair.go.
//   - Record headers are checked apart from the bodies (the header CRC,
//     under the MAC), and each body by its own CRC, so headers can be
//     verified without reading bodies, and one body can be read and verified
//     on its own.
//   - Queue names the queue an operation belongs to: 0 is the directory's
//     default queue (and the queue field of a record of the directory, such
//     as a queue's creation); a named queue's ID is its incarnation, the LSN
//     of the record that created it, never reused, so a deleted and
//     recreated name is a different queue.
//   - Type is the caller's record type; flags and the reserved fields are 0
//     in format 2, and a reader refuses other values (a later walq that uses
//     them writes a new format version).
//
// Layout and constants are frozen: a file written once must read forever. A
// new layout is a new format version, and this package keeps reading every
// older one (format 1 is read by format1.go, for migration).
const (
	// FormatVersion is the format this build writes. Format 1 (82292fa and
	// its successors up to format 2) has no marker file.
	FormatVersion = 2

	markerMagic = "WALQDIR\n"
	// MarkerSize is the size of the marker file.
	MarkerSize = 32

	segmentMagic = "WALQLOG\n"
	// SegmentHeaderSize is the size of a segment header.
	SegmentHeaderSize = 56
	segOffVersion     = 8
	segOffDir         = 12
	segOffFirst       = 28
	segOffSalt        = 36
	segOffCRC         = 52

	frameMagic = "WQF2"
	// FrameHeaderSize is the size of a frame header.
	FrameHeaderSize = 40
	frOffCount      = 4
	frOffFirst      = 8
	frOffWatermark  = 16
	frOffPayload    = 24
	frOffHeaderCRC  = 28
	frOffMAC        = 32
	macSize         = 8

	// RecordHeaderSize is the size of one record header in a frame.
	RecordHeaderSize = 24
	rhOffType        = 0
	rhOffFlags       = 1
	rhOffLength      = 4
	rhOffQueue       = 8
	rhOffCRC         = 16

	// MaxFramePayload bounds a frame's payload (record headers and bodies);
	// a batch never grows past it (the queue's MaxBatchBytes is far below).
	MaxFramePayload = 1 << 30
)

// FrameOverhead returns the bytes a frame of n records adds to their bodies.
func FrameOverhead(n int) int { return FrameHeaderSize + n*RecordHeaderSize }

// DirID is a queue directory's identity: 16 random bytes made when the
// directory is created (or migrated from format 1), kept in its marker file,
// every segment header and every snapshot.
type DirID [16]byte

// NewDirID returns a random DirID.
func NewDirID() (DirID, error) {
	var id DirID
	if _, err := rand.Read(id[:]); err != nil {
		return id, fmt.Errorf("make directory id: %w", err)
	}
	return id, nil
}

// String returns the ID in hex.
func (id DirID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero DirID, which no directory has.
func (id DirID) IsZero() bool { return id == DirID{} }

// EncodeMarker returns the marker file's contents for id.
func EncodeMarker(id DirID) []byte {
	b := make([]byte, 0, MarkerSize)
	b = append(b, markerMagic...)
	b = binary.BigEndian.AppendUint32(b, FormatVersion)
	b = append(b, id[:]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeMarker reads a marker file's contents. A marker of an unknown (later)
// version returns an error wrapping ErrNewerFormat; every other problem is a
// match for ErrCorrupt. The version is checked before the CRC, so a later
// marker of another size is still reported as newer.
func DecodeMarker(data []byte) (DirID, error) {
	var id DirID
	if len(data) < 12 || string(data[:8]) != markerMagic {
		return id, corruptReason("not a walq format marker")
	}
	if v := binary.BigEndian.Uint32(data[8:]); v != FormatVersion {
		if v > FormatVersion {
			return id, fmt.Errorf("%w: format version %d, this build reads up to %d", ErrNewerFormat, v, FormatVersion)
		}
		return id, reasonf("format marker says version %d, which never had a marker", v)
	}
	if len(data) != MarkerSize {
		return id, reasonf("format marker of %d bytes, want %d", len(data), MarkerSize)
	}
	if got, want := binary.BigEndian.Uint32(data[28:]), crc32.Checksum(data[:28], castagnoli); got != want {
		return id, corruptReason("format marker crc mismatch")
	}
	copy(id[:], data[12:28])
	if id.IsZero() {
		return id, corruptReason("format marker holds the zero directory id")
	}
	return id, nil
}

// maxMarkerRead bounds how much of a file named as the marker is read: a
// marker is MarkerSize bytes, and a huge file there is damage, not a
// reason to fill memory.
const maxMarkerRead = 4096

// ReadMarker reads and decodes the format marker at path. Errors opening or
// reading the file are returned as they are (errors.Is(err,
// fs.ErrNotExist) holds for a missing one); a marker of a later version
// gives an error wrapping ErrNewerFormat; any other content that is not a
// valid marker gives one for which errors.Is(err, ErrCorrupt) holds.
func ReadMarker(fsys FS, path string) (DirID, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return DirID{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMarkerRead+1))
	if err != nil {
		return DirID{}, err
	}
	if len(data) > maxMarkerRead {
		return DirID{}, reasonf("format marker of more than %d bytes, want %d", maxMarkerRead, MarkerSize)
	}
	return DecodeMarker(data)
}

// segmentHeader is a decoded segment header.
type segmentHeader struct {
	dir   DirID
	first uint64
	salt  [16]byte
}

func appendSegmentHeader(dst []byte, h segmentHeader) []byte {
	start := len(dst)
	dst = append(dst, segmentMagic...)
	dst = binary.BigEndian.AppendUint32(dst, FormatVersion)
	dst = append(dst, h.dir[:]...)
	dst = binary.BigEndian.AppendUint64(dst, h.first)
	dst = append(dst, h.salt[:]...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func decodeSegmentHeader(data []byte) (segmentHeader, error) {
	var h segmentHeader
	if len(data) < SegmentHeaderSize {
		return h, reasonf("segment header cut short: %d of %d bytes", len(data), SegmentHeaderSize)
	}
	if string(data[:8]) != segmentMagic {
		return h, corruptReason("bad segment magic")
	}
	if got, want := binary.BigEndian.Uint32(data[segOffCRC:]), crc32.Checksum(data[:segOffCRC], castagnoli); got != want {
		return h, corruptReason("segment header crc mismatch")
	}
	if v := binary.BigEndian.Uint32(data[segOffVersion:]); v != FormatVersion {
		return h, reasonf("segment of format version %d, this build reads %d", v, FormatVersion)
	}
	copy(h.dir[:], data[segOffDir:])
	h.first = binary.BigEndian.Uint64(data[segOffFirst:])
	copy(h.salt[:], data[segOffSalt:])
	if h.first == 0 {
		return h, corruptReason("segment header says first LSN 0")
	}
	return h, nil
}

// macer computes frame MACs with one segment's salt. It is not safe for
// concurrent use.
type macer struct {
	b      cipher.Block
	x, sum [aes.BlockSize]byte // scratch, here so that they do not escape per call
}

func newMacer(salt [16]byte) *macer {
	b, err := aes.NewCipher(salt[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return &macer{b: b}
}

// mac returns the MAC of a frame header's first 32 bytes: the AES-128
// CBC-MAC of its two blocks. The result aliases m and is valid until the
// next call.
func (m *macer) mac(hdr []byte) []byte {
	m.b.Encrypt(m.x[:], hdr[:aes.BlockSize])
	subtle.XORBytes(m.x[:], m.x[:], hdr[aes.BlockSize:frOffMAC])
	m.b.Encrypt(m.sum[:], m.x[:])
	return m.sum[:macSize]
}

// frameHeader is a decoded frame header.
type frameHeader struct {
	count     uint32
	first     uint64
	watermark uint64
	payload   uint32
	headerCRC uint32
}

// size returns the frame's length on disk.
func (h frameHeader) size() int64 { return FrameHeaderSize + int64(h.payload) }

// last returns the LSN of the frame's last record.
func (h frameHeader) last() uint64 { return h.first + uint64(h.count) - 1 }

// checkFrameHeader decodes and authenticates the frame header at the start
// of data (at least FrameHeaderSize bytes). It checks the magic, the MAC and
// that the counts are possible; not the LSN (the caller knows which it
// expects) and not the payload.
func checkFrameHeader(m *macer, data []byte) (frameHeader, error) {
	var h frameHeader
	if len(data) < FrameHeaderSize {
		return h, reasonf("frame header cut short: %d of %d bytes", len(data), FrameHeaderSize)
	}
	if string(data[:4]) != frameMagic {
		return h, corruptReason("bad frame magic")
	}
	if subtle.ConstantTimeCompare(m.mac(data), data[frOffMAC:frOffMAC+macSize]) != 1 {
		return h, corruptReason("frame mac mismatch")
	}
	h = frameHeader{
		count:     binary.BigEndian.Uint32(data[frOffCount:]),
		first:     binary.BigEndian.Uint64(data[frOffFirst:]),
		watermark: binary.BigEndian.Uint64(data[frOffWatermark:]),
		payload:   binary.BigEndian.Uint32(data[frOffPayload:]),
		headerCRC: binary.BigEndian.Uint32(data[frOffHeaderCRC:]),
	}
	switch {
	case h.count == 0:
		return h, corruptReason("frame of 0 records")
	case h.first == 0:
		return h, corruptReason("frame at LSN 0")
	case h.payload > MaxFramePayload || uint64(h.count)*(RecordHeaderSize+1) > uint64(h.payload):
		return h, reasonf("frame of %d records cannot have a payload of %d bytes", h.count, h.payload)
	case h.first+uint64(h.count)-1 < h.first:
		return h, corruptReason("frame LSNs overflow")
	}
	return h, nil
}

// recordHeader is one decoded record header.
type recordHeader struct {
	typ    byte
	length uint32
	queue  uint64
	crc    uint32
}

func decodeRecordHeader(b []byte) (recordHeader, error) {
	h := recordHeader{
		typ:    b[rhOffType],
		length: binary.BigEndian.Uint32(b[rhOffLength:]),
		queue:  binary.BigEndian.Uint64(b[rhOffQueue:]),
		crc:    binary.BigEndian.Uint32(b[rhOffCRC:]),
	}
	switch {
	case h.typ == 0:
		return h, corruptReason("record type 0")
	case b[rhOffFlags] != 0 || b[2] != 0 || b[3] != 0 || binary.BigEndian.Uint32(b[20:]) != 0:
		return h, corruptReason("record header reserved bits set")
	case h.length == 0:
		return h, corruptReason("record with an empty body")
	}
	return h, nil
}

// decodedFrame is a frame that verified in full.
type decodedFrame struct {
	frameHeader
	records []Record
	offsets []int64 // offset of each body, from the start of the frame
}

// decodeFrame verifies the whole frame at the start of data: header (as
// checkFrameHeader), record headers and every body. Record bodies alias data.
func decodeFrame(m *macer, data []byte) (decodedFrame, error) {
	var f decodedFrame
	err := decodeFrameInto(m, data, &f)
	return f, err
}

// decodeFrameInto is decodeFrame into f, whose slices it reuses, so that a
// walk over many frames does not allocate per frame.
func decodeFrameInto(m *macer, data []byte, f *decodedFrame) error {
	h, err := checkFrameHeader(m, data)
	if err != nil {
		return err
	}
	f.frameHeader = h
	f.records, f.offsets = f.records[:0], f.offsets[:0]
	if h.size() > int64(len(data)) {
		return reasonf("frame of %d bytes runs past the end of the segment (%d bytes left)", h.size(), len(data))
	}
	hdrs := data[FrameHeaderSize : FrameHeaderSize+int(h.count)*RecordHeaderSize]
	if crc32.Checksum(hdrs, castagnoli) != h.headerCRC {
		return corruptReason("record headers crc mismatch")
	}
	off := int64(len(hdrs)) + FrameHeaderSize
	for i := range int(h.count) {
		rh, err := decodeRecordHeader(hdrs[i*RecordHeaderSize:])
		if err != nil {
			return fmt.Errorf("record %d: %w", h.first+uint64(i), err)
		}
		if off+int64(rh.length) > h.size() {
			return reasonf("record %d: body runs past its frame", h.first+uint64(i))
		}
		body := data[off : off+int64(rh.length)]
		if crc32.Checksum(body, castagnoli) != rh.crc {
			return reasonf("record %d: body crc mismatch", h.first+uint64(i))
		}
		f.records = append(f.records, Record{Type: rh.typ, LSN: h.first + uint64(i), Queue: rh.queue, Body: body})
		f.offsets = append(f.offsets, off)
		off += int64(rh.length)
	}
	if off != h.size() {
		return reasonf("frame payload of %d bytes, its records hold %d", h.payload, off-FrameHeaderSize)
	}
	return nil
}

// frameBuilder accumulates one batch's records and seals them into a frame.
type frameBuilder struct {
	hdrs   []byte // record headers
	bodies []byte
	count  int
	out    []byte // the sealed frame, reused
}

func (b *frameBuilder) reset() {
	b.hdrs, b.bodies, b.count = b.hdrs[:0], b.bodies[:0], 0
}

// add appends a record whose body encode appends to the bodies buffer.
func (b *frameBuilder) add(typ byte, queue uint64, encode func([]byte) []byte) int {
	if typ == 0 {
		panic("wal: record type 0 is reserved")
	}
	start := len(b.bodies)
	b.bodies = encode(b.bodies)
	body := b.bodies[start:]
	if len(body) == 0 {
		panic("wal: record body must not be empty")
	}
	var h [RecordHeaderSize]byte
	h[rhOffType] = typ
	binary.BigEndian.PutUint32(h[rhOffLength:], uint32(len(body)))
	binary.BigEndian.PutUint64(h[rhOffQueue:], queue)
	binary.BigEndian.PutUint32(h[rhOffCRC:], crc32.Checksum(body, castagnoli))
	b.hdrs = append(b.hdrs, h[:]...)
	b.count++
	return RecordHeaderSize + len(body)
}

// builderMark is a point add can be undone to.
type builderMark struct{ hdrs, bodies, count int }

func (b *frameBuilder) mark() builderMark {
	return builderMark{len(b.hdrs), len(b.bodies), b.count}
}

func (b *frameBuilder) undo(m builderMark) {
	b.hdrs, b.bodies, b.count = b.hdrs[:m.hdrs], b.bodies[:m.bodies], m.count
}

// payload returns the bytes after the frame header.
func (b *frameBuilder) payload() int { return len(b.hdrs) + len(b.bodies) }

// size is the length of the frame seal returns.
func (b *frameBuilder) size() int { return FrameHeaderSize + b.payload() }

// seal returns the frame for records starting at first, with the watermark
// given. The result aliases b and is valid until the next seal.
func (b *frameBuilder) seal(m *macer, first, watermark uint64) []byte {
	out := b.out[:0]
	out = append(out, frameMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(b.count))
	out = binary.BigEndian.AppendUint64(out, first)
	out = binary.BigEndian.AppendUint64(out, watermark)
	out = binary.BigEndian.AppendUint32(out, uint32(b.payload()))
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(b.hdrs, castagnoli))
	out = append(out, m.mac(out)...)
	out = append(out, b.hdrs...)
	out = append(out, b.bodies...)
	b.out = out
	return out
}

// Batch is one frame's worth of records for EncodeSegment.
type Batch struct {
	Watermark uint64
	Records   []Record // Type, Queue and Body are used; LSNs follow from the segment's first
}

// EncodeSegment returns the bytes of a format-2 segment of directory id
// whose first record is first, with the salt given and one frame per
// batch (empty batches are skipped). It is for tools and tests that need
// real segments without a Log; a Log makes its own salts.
func EncodeSegment(id DirID, salt [16]byte, first uint64, batches []Batch) []byte {
	out := appendSegmentHeader(nil, segmentHeader{dir: id, first: first, salt: salt})
	m := newMacer(salt)
	lsn := first
	var b frameBuilder
	for _, batch := range batches {
		b.reset()
		for _, r := range batch.Records {
			if r.Type == 0 || len(r.Body) == 0 {
				continue
			}
			b.add(r.Type, r.Queue, func(dst []byte) []byte { return append(dst, r.Body...) })
		}
		if b.count == 0 {
			continue
		}
		out = append(out, b.seal(m, lsn, batch.Watermark)...)
		lsn += uint64(b.count)
	}
	return out
}

// SegmentSalt returns the salt in a segment's header, or an error when the
// header does not verify. It is for tools and tests.
func SegmentSalt(data []byte) ([16]byte, error) {
	h, err := decodeSegmentHeader(data)
	return h.salt, err
}
