package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// entry1 is a format-1 entry: uvarint(length) and the envelope of a record.
func entry1(typ byte, lsn uint64, body []byte) []byte {
	rec := AppendRecord(nil, typ, lsn, body)
	return append(binary.AppendUvarint(nil, uint64(len(rec))), rec...)
}

// entryPos is where a format-1 record lies.
type entryPos struct {
	file     string
	off, end int64
}

// writeFormat1 writes a format-1 log into a new directory: segments of
// the test records first..last for each range given, as tidwall/wal wrote
// them. It returns the directory and where every record is.
func writeFormat1(t *testing.T, ranges ...[2]uint64) (string, map[uint64]entryPos) {
	t.Helper()
	dir := t.TempDir()
	pos := map[uint64]entryPos{}
	for _, r := range ranges {
		name := Format1SegmentName(r[0])
		var data []byte
		for lsn := r[0]; lsn <= r[1]; lsn++ {
			off := int64(len(data))
			data = append(data, entry1(1, lsn, testBody(lsn))...)
			pos[lsn] = entryPos{name, off, int64(len(data))}
		}
		writeFileT(t, filepath.Join(dir, name), data)
	}
	return dir, pos
}

// format1Case damages a copy of a format-1 log and says what ScanFormat1
// must find: records 1..last and a tail of tailBytes at tailAt (tailBytes
// 0: none), or corruption at index/offset with a reason.
type format1Case struct {
	name    string
	mutate  func(t *testing.T, dir string, pos map[uint64]entryPos)
	last    uint64
	tailAt  entryPos
	tailLen int64
	corrupt *wantCorruption1
}

type wantCorruption1 struct {
	file   string
	index  uint64
	offset int64
	reason string
}

// TestScanFormat1 reads format-1 logs the way they were written and
// verified: a torn last entry with no later record after it is a tail;
// damage with a later record after it, a record at the wrong index, damage
// in an older segment and a gap between segments are corruption.
func TestScanFormat1(t *testing.T) {
	ranges := [][2]uint64{{1, 15}, {16, 30}, {31, 45}}
	_, pos := writeFormat1(t, ranges...)
	const last = 45
	tail := Format1SegmentName(31)
	path := func(dir, name string) string { return filepath.Join(dir, name) }
	flip := func(t *testing.T, dir string, p entryPos, off int64, mask byte) {
		data := readFileT(t, path(dir, p.file))
		data[off] ^= mask
		writeFileT(t, path(dir, p.file), data)
	}
	appendTo := func(t *testing.T, dir, name string, b []byte) {
		writeFileT(t, path(dir, name), append(readFileT(t, path(dir, name)), b...))
	}
	at := func(lsn uint64, reason string) *wantCorruption1 {
		return &wantCorruption1{pos[lsn].file, lsn, pos[lsn].off, reason}
	}
	cases := []format1Case{{name: "clean", mutate: func(*testing.T, string, map[uint64]entryPos) {}, last: last}}
	// A kill -9 tears the last write anywhere.
	for lsn := uint64(last - 1); lsn <= last; lsn++ {
		p := pos[lsn]
		for cut := p.off + 1; cut < p.end; cut++ {
			cases = append(cases, format1Case{
				name: fmt.Sprintf("torn_last_entry/lsn_%d/cut_at_%d", lsn, cut),
				mutate: func(t *testing.T, dir string, _ map[uint64]entryPos) {
					if err := os.Truncate(path(dir, p.file), cut); err != nil {
						t.Fatal(err)
					}
				},
				last: lsn - 1, tailAt: p, tailLen: cut - p.off,
			})
		}
	}
	// A torn put whose body embeds a whole real entry (of the torn record
	// itself, and of the first record): the search for a later record
	// starts where the damaged entry's own length prefix says it ends, so
	// the copy is never taken for one.
	for _, src := range []uint64{last, 1} {
		for _, keepAfter := range []int{0, 1, 17} {
			cases = append(cases, format1Case{
				name: fmt.Sprintf("torn_put_embedding_a_real_entry/of_lsn_%d/cut_%d_after_it", src, keepAfter),
				mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
					p := pos[last]
					data := readFileT(t, path(dir, p.file))
					sp := pos[src]
					embedded := bytes.Clone(readFileT(t, path(dir, sp.file))[sp.off:sp.end])
					body := slices.Concat([]byte("head"), embedded, bytes.Repeat([]byte{'t'}, 20))
					rec := entry1(1, last, body)
					cut := len(rec) - len(body) + len("head") + len(embedded) + keepAfter
					writeFileT(t, path(dir, p.file), slices.Concat(data[:p.off], rec[:cut]))
				},
				last: last - 1, tailAt: pos[last], tailLen: -1,
			})
		}
	}
	cases = append(cases, []format1Case{
		{name: "zero_filled_tail", mutate: func(t *testing.T, dir string, _ map[uint64]entryPos) {
			appendTo(t, dir, tail, make([]byte, 4096))
		}, last: last, tailAt: entryPos{tail, pos[last].end, 0}, tailLen: 4096},
		{name: "garbage_tail", mutate: func(t *testing.T, dir string, _ map[uint64]entryPos) {
			appendTo(t, dir, tail, garbage(3, 3000))
		}, last: last, tailAt: entryPos{tail, pos[last].end, 0}, tailLen: 3000},
		{name: "bad_crc_last_entry", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			flip(t, dir, pos[last], pos[last].end-1, 1)
		}, last: last - 1, tailAt: pos[last], tailLen: pos[last].end - pos[last].off},
		{name: "flipped_bit_mid_tail_with_good_records_after", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			flip(t, dir, pos[33], pos[33].end-3, 4)
		}, corrupt: at(33, fmt.Sprintf("crc mismatch; a valid record follows at offset %d", pos[34].off))},
		{name: "length_prefix_overflows_mid_tail", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			data := readFileT(t, path(dir, tail))
			for i := range int64(11) {
				data[pos[33].off+i] = 0xff
			}
			writeFileT(t, path(dir, tail), data)
		}, corrupt: at(33, fmt.Sprintf("entry length overflows; a valid record follows at offset %d", pos[34].off))},
		{name: "zeroed_record_mid_tail", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			data := readFileT(t, path(dir, tail))
			clear(data[pos[33].off:pos[33].end])
			writeFileT(t, path(dir, tail), data)
		}, corrupt: at(33, "empty entry")},
		{name: "wrong_lsn_on_the_last_entry", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			p := pos[last]
			data := readFileT(t, path(dir, tail))
			writeFileT(t, path(dir, tail), slices.Concat(data[:p.off], entry1(1, last+1, testBody(last))))
		}, corrupt: at(last, fmt.Sprintf("lsn gap: want %d, got %d", last, last+1))},
		{name: "lsn_repeated_inside_a_segment", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			p := pos[17]
			data := readFileT(t, path(dir, p.file))
			writeFileT(t, path(dir, p.file), slices.Concat(data[:p.end], data[p.off:p.end], data[p.end:]))
		}, corrupt: &wantCorruption1{pos[17].file, 18, pos[18].off, "lsn out of order: want 18, got 17"}},
		{name: "bad_crc_in_an_older_segment", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			flip(t, dir, pos[15], pos[15].end-1, 0x80) // nothing follows it there
		}, corrupt: at(15, "crc mismatch")},
		{name: "torn_older_segment", mutate: func(t *testing.T, dir string, pos map[uint64]entryPos) {
			if err := os.Truncate(path(dir, pos[15].file), pos[15].end-1); err != nil {
				t.Fatal(err)
			}
		}, corrupt: at(15, "runs past the end of the segment")},
		{name: "missing_middle_segment", mutate: func(t *testing.T, dir string, _ map[uint64]entryPos) {
			if err := os.Remove(path(dir, Format1SegmentName(16))); err != nil {
				t.Fatal(err)
			}
		}, corrupt: &wantCorruption1{tail, 31, 0, "lsn gap: segment starts at 31, want 16"}},
		{name: "format_2_files_ignored", mutate: func(t *testing.T, dir string, _ map[uint64]entryPos) {
			writeFileT(t, path(dir, SegmentName(46)), []byte("not format 1"))
			writeFileT(t, path(dir, "notes"), nil)
		}, last: last},
	}...)

	template, _ := writeFormat1(t, ranges...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			tc.mutate(t, dir, pos)
			before := dirContents(t, dir)
			for _, fromDisk := range []bool{false, true} {
				var r replayed
				ffs := NewFaultFS(OSFS(), 0)
				res, err := ScanFormat1(ffs, dir, 0, fromDisk, nil, func(p Position, rec Record) error {
					if want := pos[rec.LSN]; p.File != want.file || p.Offset != want.off || p.Frame != want.off {
						return fmt.Errorf("record %d at %+v, want %+v", rec.LSN, p, want)
					}
					return r.apply(p, rec)
				})
				if drops := ffs.OpCount("dropcache"); (drops > 0) != fromDisk {
					t.Fatalf("fromDisk %v: %d cache drops", fromDisk, drops)
				}
				if tc.corrupt != nil {
					var ce *CorruptionError
					if !errors.As(err, &ce) || ce.Dir != dir || ce.File != tc.corrupt.file || ce.Index != tc.corrupt.index ||
						ce.Offset != tc.corrupt.offset || !strings.Contains(ce.Err.Error(), tc.corrupt.reason) {
						t.Fatalf("got %v, want %+v", err, *tc.corrupt)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				checkRecords(t, r.recs, 1, tc.last)
				if res.First != 1 || res.Last != tc.last || res.Records != int(tc.last) {
					t.Fatalf("result %+v", res)
				}
				switch {
				case tc.tailLen == 0 && res.Tail != nil:
					t.Fatalf("tail %+v of a clean log", res.Tail)
				case tc.tailLen != 0 && (res.Tail == nil || res.Tail.File != tc.tailAt.file || res.Tail.Offset != tc.tailAt.off ||
					(tc.tailLen > 0 && res.Tail.Bytes != tc.tailLen)):
					t.Fatalf("tail %+v, want %d bytes at %+v", res.Tail, tc.tailLen, tc.tailAt)
				}
			}
			if d := diffContents(before, dirContents(t, dir)); d != "" {
				t.Fatalf("ScanFormat1 changed the directory: %s", d)
			}
		})
	}
}

// TestScanFormat1From: segments wholly before from are neither read nor
// verified, and records before from are not passed on.
func TestScanFormat1From(t *testing.T) {
	dir, pos := writeFormat1(t, [2]uint64{1, 15}, [2]uint64{16, 30}, [2]uint64{31, 45})
	p := pos[3]
	data := readFileT(t, filepath.Join(dir, p.file))
	data[p.end-1] ^= 1
	writeFileT(t, filepath.Join(dir, p.file), data)
	var r replayed
	res, err := ScanFormat1(nil, dir, 20, false, nil, r.apply)
	if err != nil || res.First != 1 || res.Last != 45 {
		t.Fatalf("from 20: %+v %v", res, err)
	}
	checkRecords(t, r.recs, 20, 45)
	if _, err := ScanFormat1(nil, dir, 16, false, nil, nil); err != nil {
		t.Fatalf("from 16: %v", err)
	}
	if _, err := ScanFormat1(nil, dir, 15, false, nil, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("from 15 reads the damaged segment: %v", err)
	}
	// An empty directory is an empty log.
	if res, err := ScanFormat1(nil, t.TempDir(), 0, false, nil, nil); err != nil || res.Records != 0 {
		t.Fatalf("empty: %+v %v", res, err)
	}
	segs, err := ListFormat1Segments(dir)
	if err != nil || len(segs) != 3 || segs[1].First != 16 || !IsFormat1Name(segs[0].Name) || IsFormat1Name(SegmentName(1)) {
		t.Fatalf("list: %+v %v", segs, err)
	}
}

// TestLaterRecordAfter checks where the search for a later record starts
// and which records count as later. The damaged entry sits at offset 0 of
// data and should have carried LSN 10.
func TestLaterRecordAfter(t *testing.T) {
	const want = 10
	overflow := bytes.Repeat([]byte{0xff}, 11)
	// damaged frames a body whose CRC is wrong.
	damaged := func(body []byte) []byte {
		f := entry1(1, want, body)
		f[len(f)-1] ^= 1
		return f
	}
	later := entry1(1, want+1, testBody(want+1))
	cases := []struct {
		name string
		data []byte
		off  int // -1: nothing later follows
	}{
		{"declared_end_past_eof_hides_an_embedded_later_entry",
			entry1(1, want, slices.Concat([]byte("b"), later, make([]byte, 40)))[:2+HeaderSize+1+len(later)], -1},
		{"embedded_later_entry_inside_a_whole_damaged_entry",
			damaged(slices.Concat([]byte("b"), later)), -1},
		{"later_entry_at_the_declared_end",
			slices.Concat(damaged([]byte("body")), later), len(damaged([]byte("body")))},
		{"later_entry_after_garbage_past_the_declared_end",
			slices.Concat(damaged([]byte("body")), []byte{7, 7, 7}, later), len(damaged([]byte("body"))) + 3},
		{"entry_with_the_damaged_entry_lsn_is_not_later",
			slices.Concat(damaged([]byte("body")), entry1(1, want, testBody(want))), -1},
		{"entry_with_an_earlier_lsn_is_not_later",
			slices.Concat(damaged([]byte("body")), entry1(1, want-3, testBody(want-3))), -1},
		{"prefix_overflows_later_entry_at_next_bytes",
			slices.Concat(overflow, later), len(overflow)},
		{"prefix_overflows_earlier_entry_ignored",
			slices.Concat(overflow, entry1(1, 1, testBody(1))), -1},
		{"prefix_incomplete_at_eof", []byte{0x80, 0x80}, -1},
		{"zeros", make([]byte, 100), -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := laterRecordAfter(tc.data, 0, want); got != tc.off {
				t.Fatalf("got %d, want %d", got, tc.off)
			}
		})
	}
}
