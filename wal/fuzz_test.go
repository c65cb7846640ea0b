package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// fuzzSalt is the salt of every frame and segment the fuzz targets see.
var fuzzSalt = [16]byte{'f', 'u', 'z', 'z', 's', 'a', 'l', 't', 0, 1, 2, 3, 4, 5, 6, 7}

// fuzzFrame seals a frame with fuzzSalt of the given bodies (type 1 + i,
// queue i).
func fuzzFrame(first, watermark uint64, bodies ...string) []byte {
	var b frameBuilder
	for i, body := range bodies {
		b.add(byte(1+i), uint64(i), func(dst []byte) []byte { return append(dst, body...) })
	}
	return bytes.Clone(b.seal(newMacer(fuzzSalt), first, watermark))
}

// FuzzDecodeFrame decodes arbitrary bytes as a frame with a fixed salt, as
// they are and with the MAC (and the record headers' CRC) made right, so
// that the fuzzer reaches the checks behind the MAC. It must never panic;
// every error is corruption; checkFrameHeader accepts whatever decodeFrame
// accepts; and what decodes re-encodes, through frameBuilder.seal, to the
// very bytes it was decoded from.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(fuzzFrame(1, 0, "a"))
	f.Add(fuzzFrame(7, 6, "one", "two", "three"))
	f.Add(fuzzFrame(1<<40, 1<<39, string(bytes.Repeat([]byte{0x93}, 300))))
	whole := fuzzFrame(3, 2, "x", "yy")
	f.Add(whole[:FrameHeaderSize])
	f.Add(whole[:len(whole)-1])
	f.Add(append(bytes.Clone(whole), fuzzFrame(5, 4, "z")...))
	f.Add([]byte(frameMagic))
	f.Add(make([]byte, FrameHeaderSize+RecordHeaderSize+1))
	m := newMacer(fuzzSalt)
	f.Fuzz(func(t *testing.T, data []byte) {
		variants := [][]byte{data}
		if len(data) >= FrameHeaderSize {
			remac := bytes.Clone(data)
			copy(remac[frOffMAC:], m.mac(remac))
			variants = append(variants, remac)
			n := int(binary.BigEndian.Uint32(data[frOffCount:]))
			if end := FrameHeaderSize + n*RecordHeaderSize; n > 0 && end <= len(data) {
				fixed := bytes.Clone(data)
				binary.BigEndian.PutUint32(fixed[frOffHeaderCRC:], crc32.Checksum(fixed[FrameHeaderSize:end], castagnoli))
				copy(fixed[frOffMAC:], m.mac(fixed))
				variants = append(variants, fixed)
			}
		}
		for _, data := range variants {
			h, herr := checkFrameHeader(m, data)
			if herr != nil && !errors.Is(herr, ErrCorrupt) {
				t.Fatalf("header error %v is not ErrCorrupt", herr)
			}
			fr, err := decodeFrame(m, data)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v is not ErrCorrupt", err)
				}
				continue
			}
			if herr != nil || h != fr.frameHeader {
				t.Fatalf("decodeFrame accepted a header checkFrameHeader does not: %v, %+v vs %+v", herr, h, fr.frameHeader)
			}
			if int(fr.count) != len(fr.records) || fr.size() > int64(len(data)) {
				t.Fatalf("frame %+v of %d records in %d bytes", fr.frameHeader, len(fr.records), len(data))
			}
			var b frameBuilder
			for i, r := range fr.records {
				if r.LSN != fr.first+uint64(i) || !bytes.Equal(data[fr.offsets[i]:fr.offsets[i]+int64(len(r.Body))], r.Body) {
					t.Fatalf("record %d at %d does not match its bytes", i, fr.offsets[i])
				}
				b.add(r.Type, r.Queue, func(dst []byte) []byte { return append(dst, r.Body...) })
			}
			if again := b.seal(m, fr.first, fr.watermark); !bytes.Equal(again, data[:fr.size()]) {
				t.Fatalf("accepted % x\nwhich re-encodes as % x", data[:fr.size()], again)
			}
		}
	})
}

// FuzzSegment scans arbitrary bytes after a valid segment header as the
// only segment of a log. Scan must never panic; it returns either a Tail or
// a *CorruptionError, never both; a Tail starts where the frames it passed
// end, at most at the end of the file, and runs to the end; and every
// record it passes verifies: a whole frame at its position, with the LSNs
// following each other from the segment's first, its body where it says.
func FuzzSegment(f *testing.F) {
	var seg []byte
	for lsn := uint64(1); lsn <= 4; lsn++ {
		seg = append(seg, fuzzFrame(lsn, lsn-1, string(testBody(lsn)))...)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-5])
	f.Add(append(bytes.Clone(seg), make([]byte, 40)...))
	batch := fuzzFrame(5, 4, "a", "bb", "ccc")
	f.Add(append(bytes.Clone(seg), batch...))
	// A damaged frame with a later one that states it fsynced, and one
	// whose body holds a copy of a real frame, torn.
	damaged := bytes.Clone(seg)
	damaged[len(fuzzFrame(1, 0, string(testBody(1))))+FrameHeaderSize+RecordHeaderSize] ^= 1
	f.Add(damaged)
	copyBody := fuzzFrame(5, 4, string(fuzzFrame(2, 1, "copy")))
	f.Add(append(bytes.Clone(seg), copyBody[:len(copyBody)-3]...))
	f.Add([]byte{})
	f.Add([]byte{0})
	hdr := appendSegmentHeader(nil, segmentHeader{dir: testDir, first: 1, salt: fuzzSalt})
	m := newMacer(fuzzSalt)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		file := append(bytes.Clone(hdr), data...)
		if err := os.WriteFile(filepath.Join(dir, SegmentName(1)), file, 0o600); err != nil {
			t.Fatal(err)
		}
		end := int64(SegmentHeaderSize)
		next := uint64(1)
		res, err := Scan(dir, 0, 0, func(p Position, r Record) error {
			if r.LSN != next || p.Index != next || p.File != SegmentName(1) {
				t.Fatalf("record %d at %+v, want lsn %d", r.LSN, p, next)
			}
			fr, err := decodeFrame(m, file[p.Frame:])
			if err != nil || p.Frame < SegmentHeaderSize || p.Frame > end || r.LSN < fr.first || r.LSN > fr.last() {
				t.Fatalf("record %d: its frame at %d does not verify: %v", r.LSN, p.Frame, err)
			}
			got := fr.records[r.LSN-fr.first]
			if got.Type != r.Type || got.Queue != r.Queue || !bytes.Equal(got.Body, r.Body) ||
				!bytes.Equal(file[p.Offset:p.Offset+int64(len(r.Body))], r.Body) {
				t.Fatalf("record %d does not match its frame", r.LSN)
			}
			if r.LSN == fr.last() {
				if p.Frame != end {
					t.Fatalf("frame at %d, the one before ended at %d", p.Frame, end)
				}
				end = p.Frame + fr.size()
			}
			next++
			return nil
		})
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) || res.Tail != nil {
				t.Fatalf("error %v (tail %+v): want a *CorruptionError and no tail", err, res.Tail)
			}
			if ce.Offset != end || ce.Index != next {
				t.Fatalf("corruption at %d index %d, after frames up to %d", ce.Offset, ce.Index, end)
			}
			return
		}
		switch {
		case res.Tail == nil && end != int64(len(file)):
			t.Fatalf("accepted %d of %d bytes without a tail", end, len(file))
		case res.Tail != nil && (res.Tail.Offset != end || res.Tail.Offset > int64(len(file)) || res.Tail.Offset+res.Tail.Bytes != int64(len(file)) || res.Tail.Bytes <= 0):
			t.Fatalf("tail %+v after %d of %d bytes", res.Tail, end, len(file))
		case res.Last != next-1 || res.Records != int(next-1):
			t.Fatalf("result %+v after %d records", res, next-1)
		}
	})
}
