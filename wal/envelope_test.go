package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// The format-1 envelope (envelope.go) is read-only now, for migration;
// these pin it as it was written.

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		typ  byte
		lsn  uint64
		body []byte
	}{
		{"one_byte_body", 1, 1, []byte{0x80}},
		{"max_type_and_lsn", 255, ^uint64(0), []byte("x")},
		{"msgpack_map", 7, 1 << 40, []byte{0x81, 0xa2, 'i', 'd', 0x2a}},
		{"large_body", 3, 99, bytes.Repeat([]byte{0xab}, 1<<16)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("prefix")
			enc := AppendRecord(bytes.Clone(prefix), tc.typ, tc.lsn, tc.body)
			if !bytes.Equal(enc[:len(prefix)], prefix) {
				t.Fatal("AppendRecord changed dst")
			}
			entry := enc[len(prefix):]
			if len(entry) != HeaderSize+len(tc.body) {
				t.Fatalf("encoded %d bytes, want %d", len(entry), HeaderSize+len(tc.body))
			}
			rec, err := DecodeRecord(entry)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Type != tc.typ || rec.LSN != tc.lsn || !bytes.Equal(rec.Body, tc.body) {
				t.Fatalf("decoded %+v", rec)
			}
		})
	}
}

// TestRecordFormatFrozen pins the byte layout: if it fails, the format
// changed, and old logs would no longer read.
func TestRecordFormatFrozen(t *testing.T) {
	got := AppendRecord(nil, 2, 0x0102030405060708, []byte{0xc0})
	want := []byte{1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0xc0}
	crc := crc32.Checksum(append(want[:10:10], 0xc0), crc32.MakeTable(crc32.Castagnoli))
	binary.BigEndian.PutUint32(want[10:], crc)
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
}

func TestRecordEveryBitFlipRejected(t *testing.T) {
	enc := AppendRecord(nil, 5, 123456, []byte("a msgpack body"))
	for bit := 0; bit < len(enc)*8; bit++ {
		bad := bytes.Clone(enc)
		bad[bit/8] ^= 1 << (bit % 8)
		if rec, err := DecodeRecord(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: accepted %+v, err %v", bit, rec, err)
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good := AppendRecord(nil, 1, 1, []byte("body"))
	withVersion := func(v byte) []byte {
		b := bytes.Clone(good)
		b[0] = v
		binary.BigEndian.PutUint32(b[offCRC:], recordCRC(b))
		return b
	}
	typeZero := bytes.Clone(good)
	typeZero[offType] = 0
	binary.BigEndian.PutUint32(typeZero[offCRC:], recordCRC(typeZero))
	headerOnly := bytes.Clone(good[:HeaderSize])
	binary.BigEndian.PutUint32(headerOnly[offCRC:], crc32.Checksum(headerOnly[:offCRC], castagnoli))

	cases := []struct {
		name  string
		entry []byte
		want  string
	}{
		{"nil", nil, "empty entry"},
		{"empty", []byte{}, "empty entry"},
		{"one_zero_byte", []byte{0}, "unknown record version 0"},
		{"zeros_header_size", make([]byte, HeaderSize), "unknown record version 0"},
		{"zeros_long", make([]byte, 4096), "unknown record version 0"},
		{"short", good[:5], "short record"},
		{"header_only_empty_body", headerOnly, "short record"},
		{"version_0", withVersion(0), "unknown record version 0"},
		{"version_2", withVersion(2), "unknown record version 2"},
		{"type_0", typeZero, "record type 0"},
		{"truncated_body", good[:len(good)-1], "crc mismatch"},
		{"extra_byte", append(bytes.Clone(good), 0), "crc mismatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRecord(tc.entry)
			if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAppendRecordPanicsOnProgrammingErrors(t *testing.T) {
	for name, fn := range map[string]func(){
		"empty_body": func() { AppendRecord(nil, 1, 1, nil) },
		"type_0":     func() { AppendRecord(nil, 0, 1, []byte("x")) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			fn()
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 20))
	f.Add(AppendRecord(nil, 1, 1, []byte("body")))
	f.Add(AppendRecord(nil, 9, 1<<62, []byte{0x81, 0xa1, 'k', 0x01}))
	f.Fuzz(func(t *testing.T, entry []byte) {
		rec, err := DecodeRecord(entry)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		// Accepted: re-encoding must give back the very same bytes, which
		// means the CRC in the input was the right one.
		if again := AppendRecord(nil, rec.Type, rec.LSN, rec.Body); !bytes.Equal(again, entry) {
			t.Fatalf("accepted % x, which re-encodes as % x", entry, again)
		}
	})
}
