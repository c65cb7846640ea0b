package wal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
)

// TestFormatFrozen pins the bytes of the marker, a segment header and a
// frame, built here from the drawings in format.go and not by the
// encoders: if it fails, the format changed, and written logs would no
// longer read.
func TestFormatFrozen(t *testing.T) {
	c := crc32.MakeTable(crc32.Castagnoli)
	id := DirID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

	marker := append([]byte("WALQDIR\n"), 0, 0, 0, 2)
	marker = append(marker, id[:]...)
	marker = binary.BigEndian.AppendUint32(marker, crc32.Checksum(marker, c))
	if got := EncodeMarker(id); !bytes.Equal(got, marker) || len(got) != MarkerSize {
		t.Fatalf("marker\n got % x\nwant % x", got, marker)
	}

	salt := [16]byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf}
	seg := append([]byte("WALQLOG\n"), 0, 0, 0, 2)
	seg = append(seg, id[:]...)
	seg = append(seg, 0, 0, 0, 0, 0, 0, 0x30, 0x39) // first LSN 12345
	seg = append(seg, salt[:]...)
	seg = binary.BigEndian.AppendUint32(seg, crc32.Checksum(seg, c))
	if got := appendSegmentHeader(nil, segmentHeader{dir: id, first: 12345, salt: salt}); !bytes.Equal(got, seg) || len(got) != SegmentHeaderSize {
		t.Fatalf("segment header\n got % x\nwant % x", got, seg)
	}
	if h, err := decodeSegmentHeader(seg); err != nil || h.dir != id || h.first != 12345 || h.salt != salt {
		t.Fatalf("decode: %+v %v", h, err)
	}

	// A frame of two records, LSNs 7 and 8, watermark 5.
	bodies := [][]byte{[]byte("first"), {0x81, 0xa1, 'k', 0x01}}
	types := []byte{3, 200}
	queues := []uint64{0, 0x0102030405060708}
	var hdrs, payload []byte
	for i, b := range bodies {
		h := []byte{types[i], 0, 0, 0}
		h = binary.BigEndian.AppendUint32(h, uint32(len(b)))
		h = binary.BigEndian.AppendUint64(h, queues[i])
		h = binary.BigEndian.AppendUint32(h, crc32.Checksum(b, c))
		h = append(h, 0, 0, 0, 0)
		hdrs = append(hdrs, h...)
		payload = append(payload, b...)
	}
	want := []byte("WQF2")
	want = binary.BigEndian.AppendUint32(want, 2)
	want = binary.BigEndian.AppendUint64(want, 7)
	want = binary.BigEndian.AppendUint64(want, 5)
	want = binary.BigEndian.AppendUint32(want, uint32(len(hdrs)+len(payload)))
	want = binary.BigEndian.AppendUint32(want, crc32.Checksum(hdrs, c))
	// The MAC as drawn: AES-128 in CBC mode with a zero IV over the 32
	// header bytes, keyed with the salt; the last cipher block's first 8
	// bytes.
	block, err := aes.NewCipher(salt[:])
	if err != nil {
		t.Fatal(err)
	}
	cbc := make([]byte, 32)
	cipher.NewCBCEncrypter(block, make([]byte, 16)).CryptBlocks(cbc, want)
	want = append(want, cbc[16:24]...)
	want = append(want, hdrs...)
	want = append(want, payload...)

	var b frameBuilder
	for i, body := range bodies {
		n := b.add(types[i], queues[i], func(dst []byte) []byte { return append(dst, body...) })
		if n != RecordHeaderSize+len(body) {
			t.Fatalf("add returned %d", n)
		}
	}
	got := b.seal(newMacer(salt), 7, 5)
	if !bytes.Equal(got, want) || len(got) != FrameOverhead(2)+len(payload) {
		t.Fatalf("frame\n got % x\nwant % x", got, want)
	}
	fr, err := decodeFrame(newMacer(salt), want)
	if err != nil || fr.count != 2 || fr.first != 7 || fr.watermark != 5 || fr.last() != 8 || fr.size() != int64(len(want)) {
		t.Fatalf("decode: %+v %v", fr.frameHeader, err)
	}
	for i, r := range fr.records {
		if r.Type != types[i] || r.Queue != queues[i] || r.LSN != 7+uint64(i) || !bytes.Equal(r.Body, bodies[i]) ||
			!bytes.Equal(want[fr.offsets[i]:fr.offsets[i]+int64(len(bodies[i]))], bodies[i]) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	// The same frame does not verify under another salt.
	other := salt
	other[0] ^= 1
	if _, err := decodeFrame(newMacer(other), want); err == nil || !strings.Contains(err.Error(), "frame mac mismatch") {
		t.Fatalf("another salt: %v", err)
	}
}

// TestFrameEveryBitFlipRejected: no single bit flip of a frame decodes.
func TestFrameEveryBitFlipRejected(t *testing.T) {
	frame := fuzzFrame(9, 8, "one", "two", "three")
	m := newMacer(fuzzSalt)
	for bit := range len(frame) * 8 {
		bad := bytes.Clone(frame)
		bad[bit/8] ^= 1 << (bit % 8)
		if f, err := decodeFrame(m, bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: accepted %+v, err %v", bit, f.frameHeader, err)
		}
	}
}

func TestBuilderUndo(t *testing.T) {
	var b frameBuilder
	b.add(1, 0, func(dst []byte) []byte { return append(dst, "keep"...) })
	mark := b.mark()
	b.add(2, 5, func(dst []byte) []byte { return append(dst, "drop"...) })
	b.undo(mark)
	b.add(3, 0, func(dst []byte) []byte { return append(dst, "after"...) })
	fr, err := decodeFrame(newMacer(fuzzSalt), b.seal(newMacer(fuzzSalt), 1, 0))
	if err != nil || len(fr.records) != 2 || string(fr.records[0].Body) != "keep" || string(fr.records[1].Body) != "after" || fr.records[1].Type != 3 {
		t.Fatalf("%+v %v", fr.records, err)
	}
	b.reset()
	if b.count != 0 || b.payload() != 0 {
		t.Fatal("reset")
	}
}

func TestSegmentNames(t *testing.T) {
	if got := SegmentName(42); got != "00000000000000000042.seg" {
		t.Fatalf("SegmentName(42) = %s", got)
	}
	for _, tc := range []struct {
		name  string
		first uint64
		ok    bool
	}{
		{SegmentName(1), 1, true},
		{SegmentName(^uint64(0)), ^uint64(0), true},
		{"00000000000000000000.seg", 0, false},
		{"0000000000000000042.seg", 0, false},   // 19 digits
		{"000000000000000000042.seg", 0, false}, // 21 digits
		{"99999999999999999999.seg", 0, false},  // past uint64
		{"0000000000000000004x.seg", 0, false},
		{"00000000000000000042", 0, false}, // format 1
		{"00000000000000000042.seg.tmp", 0, false},
		{"00000000000000000042.seg.broken", 0, false},
	} {
		first, ok := parseSegmentName(tc.name)
		if first != tc.first || ok != tc.ok {
			t.Errorf("parseSegmentName(%q) = %d %v", tc.name, first, ok)
		}
	}
	if !isSegmentFile(SegmentName(3)) || !isSegmentFile(Format1SegmentName(3)) || isSegmentFile("notes") {
		t.Fatal("isSegmentFile")
	}
}

func TestDirID(t *testing.T) {
	a, err := NewDirID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewDirID()
	if a.IsZero() || a == b || !(DirID{}).IsZero() {
		t.Fatalf("ids %v %v", a, b)
	}
	if s := a.String(); len(s) != 32 || s != hex.EncodeToString(a[:]) {
		t.Fatalf("String %q", s)
	}
}

func TestCorruptionErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  CorruptionError
		want string
	}{
		{CorruptionError{File: SegmentName(1), Index: 17, Offset: 4096, Err: corruptReason("crc mismatch")},
			"walq: corrupt log: segment 00000000000000000001.seg index 17 offset 4096: crc mismatch"},
		{CorruptionError{File: SnapshotName(9), Offset: 41, Err: corruptReason("crc mismatch")},
			"walq: corrupt snapshot: file snapshot-00000000000000000009.snap offset 41: crc mismatch"},
		{CorruptionError{Dir: "/q", File: "WALQ-FORMAT", Err: corruptReason("bad")},
			"walq: corrupt directory /q: file WALQ-FORMAT offset 0: bad"},
		{CorruptionError{Err: corruptReason("bad")}, "walq: corrupt data: offset 0: bad"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q\nwant %q", got, tc.want)
		}
		if !errors.Is(&tc.err, ErrCorrupt) {
			t.Error("not ErrCorrupt")
		}
	}
	if !errors.Is(reasonf("x %d", 1), ErrCorrupt) {
		t.Fatal("reasonf")
	}
}

// benchFrame fills b with n records of body.
func benchFrame(b *frameBuilder, n int, body []byte) {
	for range n {
		b.add(1, 0, func(dst []byte) []byte { return append(dst, body...) })
	}
}

// BenchmarkSeal measures what a frame costs the writer: the record
// headers with each body's CRC (add), then the frame header with the CRC
// of the record headers and the MAC, and the copy into one buffer (seal).
func BenchmarkSeal(b *testing.B) {
	m := newMacer(fuzzSalt)
	for _, n := range []int{1, 16, 256} {
		for _, size := range []int{100, 4096} {
			b.Run(fmt.Sprintf("records=%d/body=%d", n, size), func(b *testing.B) {
				body := bytes.Repeat([]byte{0xab}, size)
				var fb frameBuilder
				benchFrame(&fb, n, body) // warm the buffers
				fb.seal(m, 1, 0)
				b.SetBytes(int64(n * size))
				b.ReportAllocs()
				for b.Loop() {
					fb.reset()
					benchFrame(&fb, n, body)
					fb.seal(m, 1, 0)
				}
			})
		}
	}
}

// BenchmarkDecodeFrame measures what a frame costs the reader: the MAC,
// the record headers and every body's CRC.
func BenchmarkDecodeFrame(b *testing.B) {
	m := newMacer(fuzzSalt)
	for _, n := range []int{1, 16, 256} {
		for _, size := range []int{100, 4096} {
			b.Run(fmt.Sprintf("records=%d/body=%d", n, size), func(b *testing.B) {
				var fb frameBuilder
				benchFrame(&fb, n, bytes.Repeat([]byte{0xab}, size))
				frame := bytes.Clone(fb.seal(m, 1, 0))
				b.SetBytes(int64(n * size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := decodeFrame(m, frame); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
