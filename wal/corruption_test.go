package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The base log of the corruption table: three segments, the tail holding
// several records.
const (
	baseSegmentSize = 512
	baseRecords     = 50
)

func baseLog(t *testing.T) (string, logLayout) {
	t.Helper()
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: baseSegmentSize}, baseRecords)
	ll := readLayout(t, dir)
	if len(ll.segs) != 3 || ll.last != baseRecords || baseRecords-ll.tail().First < 5 {
		t.Fatalf("base log layout changed: %d segments, last %d, tail starts at %d", len(ll.segs), ll.last, ll.tail().First)
	}
	return dir, ll
}

// corruptionCase damages a copy of the base log. mutate returns the bytes
// Open must cut off the tail (nil: nothing to cut). Repaired cases set
// first/last, the records that must survive; refused cases set want.
type corruptionCase struct {
	name        string
	mutate      func(t *testing.T, ll logLayout) (cut []byte)
	first, last uint64
	want        func(ll logLayout) wantCorruption
}

type wantCorruption struct {
	file   string
	index  uint64
	offset int64
	reason string
}

func TestRecoveryCorruptionTable(t *testing.T) {
	template, base := baseLog(t)
	tail := base.tail()
	mid := base.segs[1]
	lastLSN := base.last
	at := func(lsn uint64) wantCorruption {
		p := base.recs[lsn]
		return wantCorruption{file: p.File, index: lsn, offset: p.Offset}
	}
	flip := func(path string, off int64, mask byte) {
		data := readFileT(t, path)
		data[off] ^= mask
		writeFileT(t, path, data)
	}
	appendTo := func(path string, extra []byte) {
		writeFileT(t, path, append(readFileT(t, path), extra...))
	}

	var cases []corruptionCase
	// A crash tears the last write anywhere: cut the tail segment at every
	// byte offset of its last three records.
	for lsn := lastLSN - 2; lsn <= lastLSN; lsn++ {
		p := base.recs[lsn]
		for cut := p.Offset; cut < p.End; cut++ {
			cases = append(cases, corruptionCase{
				name: fmt.Sprintf("torn_last_record/lsn_%d/cut_at_%d", lsn, cut),
				mutate: func(t *testing.T, ll logLayout) []byte {
					path := ll.path(p.File)
					data := readFileT(t, path)
					writeFileT(t, path, data[:cut])
					if cut == p.Offset {
						return nil // a clean end: nothing to cut
					}
					return data[p.Offset:cut]
				},
				first: 1, last: lsn - 1,
			})
		}
	}
	// A torn put whose body embeds complete, valid frames: real bytes of
	// records of this log (the last record's own, whose LSN is the one
	// recovery expects next, and the first record's), and frames this
	// package seals with later LSNs. The bytes after the last embedded frame
	// are cut off, anywhere up to the record's last byte. Nothing in a body
	// may make recovery take the torn write for corruption.
	embeds := []struct {
		name  string
		frame func(ll logLayout) []byte
	}{
		{"real_copy_of_the_torn_record", func(ll logLayout) []byte {
			p := ll.recs[lastLSN]
			return readFileT(t, ll.path(p.File))[p.Offset:p.End]
		}},
		{"real_copy_of_record_1", func(ll logLayout) []byte {
			p := ll.recs[1]
			return readFileT(t, ll.path(p.File))[p.Offset:p.End]
		}},
		{"sealed_lsn_next", func(logLayout) []byte { return frame(1, lastLSN+1, testBody(lastLSN+1)) }},
		{"sealed_lsn_far_ahead", func(logLayout) []byte { return frame(3, lastLSN+1000, testBody(7)) }},
		{"sealed_frames_back_to_back", func(logLayout) []byte {
			return slices.Concat(frame(1, lastLSN, testBody(lastLSN)), frame(1, lastLSN+1, testBody(lastLSN+1)))
		}},
	}
	for _, e := range embeds {
		for _, keepAfter := range []int{0, 1, 17} {
			cases = append(cases, corruptionCase{
				name: fmt.Sprintf("torn_put_whose_body_embeds_a_frame/%s/cut_%d_after_it", e.name, keepAfter),
				mutate: func(t *testing.T, ll logLayout) []byte {
					p := ll.recs[lastLSN]
					path := ll.path(p.File)
					data := readFileT(t, path)
					embedded := e.frame(ll)
					body := slices.Concat([]byte("head"), embedded, bytes.Repeat([]byte{'t'}, 20))
					rec := frame(1, lastLSN, body)
					headLen := len(rec) - len(body)
					cut := headLen + len("head") + len(embedded) + keepAfter
					torn := rec[:cut]
					writeFileT(t, path, slices.Concat(data[:p.Offset], torn))
					return torn
				},
				first: 1, last: lastLSN - 1,
			})
		}
	}
	cases = append(cases, []corruptionCase{
		{
			name: "zero_filled_tail",
			mutate: func(t *testing.T, ll logLayout) []byte {
				zeros := make([]byte, 4096)
				appendTo(ll.path(tail.Name), zeros)
				return zeros
			},
			first: 1, last: lastLSN,
		},
		{
			name: "zero_filled_last_record",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[lastLSN]
				path := ll.path(p.File)
				data := readFileT(t, path)
				data = append(data[:p.Offset+3], make([]byte, 600)...)
				writeFileT(t, path, data)
				return data[p.Offset:]
			},
			first: 1, last: lastLSN - 1,
		},
		{
			name: "garbage_tail",
			mutate: func(t *testing.T, ll logLayout) []byte {
				garbage := make([]byte, 3000)
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range garbage {
					garbage[i] = byte(rng.Uint32())
				}
				appendTo(ll.path(tail.Name), garbage)
				return garbage
			},
			first: 1, last: lastLSN,
		},
		{
			name: "bad_crc_final_record",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[lastLSN]
				flip(ll.path(p.File), p.End-int64(len(testBody(lastLSN)))-2, 0x10) // inside the CRC field
				return readFileT(t, ll.path(p.File))[p.Offset:]
			},
			first: 1, last: lastLSN - 1,
		},
		{
			name: "bad_body_final_record",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[lastLSN]
				flip(ll.path(p.File), p.End-1, 0x01)
				return readFileT(t, ll.path(p.File))[p.Offset:]
			},
			first: 1, last: lastLSN - 1,
		},
		{
			name: "empty_segment_after_clean_roll",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeFileT(t, ll.path(SegmentName(lastLSN+1)), nil)
				return nil
			},
			first: 1, last: lastLSN,
		},
		{
			name: "foreign_files_ignored",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeFileT(t, ll.path("notes.txt"), []byte("not a segment"))
				writeFileT(t, ll.path(SegmentName(1)+".broken"), []byte("an old repair"))
				writeFileT(t, ll.path(SegmentName(0)), []byte("index 0 is no segment"))
				writeFileT(t, ll.path(SnapshotName(3)), []byte("a snapshot"))
				if err := os.Mkdir(ll.path(SegmentName(99)), 0o700); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			first: 1, last: lastLSN,
		},
		{
			name: "leftover_start_before_removes",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeStartLeftover(t, ll, mid.First+2)
				return nil
			},
			first: mid.First + 2, last: lastLSN,
		},
		{
			name: "leftover_start_after_some_removes",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeStartLeftover(t, ll, mid.First+2)
				if err := os.Remove(ll.path(ll.segs[0].Name)); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			first: mid.First + 2, last: lastLSN,
		},
		{
			name: "leftover_start_temp_removed",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeFileT(t, ll.path(SegmentName(mid.First+2)+startSuffix+tempSuffix), []byte("half a copy"))
				return nil
			},
			first: 1, last: lastLSN,
		},
		// Refused: each of these would lose or invent records if cut.
		{
			name: "flipped_bit_mid_tail_with_good_records_after",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[tail.First+1]
				flip(ll.path(p.File), p.End-3, 0x04)
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				w := at(tail.First + 1)
				w.reason = "crc mismatch; a valid record follows at offset " + fmt.Sprint(base.recs[tail.First+2].Offset)
				return w
			},
		},
		{
			name: "length_prefix_damaged_mid_tail",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[tail.First+1]
				flip(ll.path(p.File), p.Offset, 0x40) // length grows by 64: runs into the next records
				return nil
			},
			want: func(ll logLayout) wantCorruption { w := at(tail.First + 1); w.reason = "crc mismatch"; return w },
		},
		{
			// A prefix that does not decode says nothing about where the
			// next write starts: the search for a later record starts at the
			// next byte, and finds the genuine one after.
			name: "length_prefix_overflows_mid_tail",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[tail.First+1]
				data := readFileT(t, ll.path(p.File))
				for i := range 11 {
					data[p.Offset+int64(i)] = 0xff
				}
				writeFileT(t, ll.path(p.File), data)
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				w := at(tail.First + 1)
				w.reason = "entry length overflows; a valid record follows at offset " + fmt.Sprint(base.recs[tail.First+2].Offset)
				return w
			},
		},
		{
			name: "zeroed_record_mid_tail",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[tail.First+1]
				data := readFileT(t, ll.path(p.File))
				clear(data[p.Offset:p.End])
				writeFileT(t, ll.path(p.File), data)
				return nil
			},
			want: func(ll logLayout) wantCorruption { w := at(tail.First + 1); w.reason = "empty entry"; return w },
		},
		{
			name: "bad_crc_in_older_segment",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[mid.First-1] // the last record of the first segment: nothing follows it there
				flip(ll.path(p.File), p.End-1, 0x80)
				return nil
			},
			want: func(ll logLayout) wantCorruption { w := at(mid.First - 1); w.reason = "crc mismatch"; return w },
		},
		{
			name: "torn_older_segment",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[mid.First-1]
				if err := os.Truncate(ll.path(p.File), p.End-1); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				w := at(mid.First - 1)
				w.reason = "runs past the end of the segment"
				return w
			},
		},
		{
			name: "lsn_gap_inside_segment",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[mid.First+1]
				path := ll.path(p.File)
				data := readFileT(t, path)
				writeFileT(t, path, slices.Concat(data[:p.Offset], data[p.End:]))
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				w := at(mid.First + 1)
				w.reason = fmt.Sprintf("lsn gap: want %d, got %d", mid.First+1, mid.First+2)
				return w
			},
		},
		{
			name: "lsn_repeated_inside_segment",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[mid.First+1]
				path := ll.path(p.File)
				data := readFileT(t, path)
				writeFileT(t, path, slices.Concat(data[:p.End], data[p.Offset:p.End], data[p.End:]))
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				w := at(mid.First + 2)
				w.reason = fmt.Sprintf("lsn out of order: want %d, got %d", mid.First+2, mid.First+1)
				return w
			},
		},
		{
			name: "wrong_lsn_on_final_record",
			mutate: func(t *testing.T, ll logLayout) []byte {
				p := ll.recs[lastLSN]
				path := ll.path(p.File)
				data := readFileT(t, path)
				writeFileT(t, path, slices.Concat(data[:p.Offset], frame(1, lastLSN+1, testBody(lastLSN))))
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				w := at(lastLSN)
				w.reason = fmt.Sprintf("lsn gap: want %d, got %d", lastLSN, lastLSN+1)
				return w
			},
		},
		{
			name: "missing_middle_segment",
			mutate: func(t *testing.T, ll logLayout) []byte {
				if err := os.Remove(ll.path(mid.Name)); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				return wantCorruption{file: tail.Name, index: tail.First,
					reason: fmt.Sprintf("lsn gap: segment starts at %d, want %d", tail.First, mid.First)}
			},
		},
		{
			name: "segment_after_a_gap",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeFileT(t, ll.path(SegmentName(lastLSN+5)), nil)
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				return wantCorruption{file: SegmentName(lastLSN + 5), index: lastLSN + 5,
					reason: fmt.Sprintf("lsn gap: segment starts at %d, want %d", lastLSN+5, lastLSN+1)}
			},
		},
		{
			name: "both_start_and_end_leftovers",
			mutate: func(t *testing.T, ll logLayout) []byte {
				writeStartLeftover(t, ll, mid.First+2)
				writeFileT(t, ll.path(tail.Name+endSuffix), nil)
				return nil
			},
			want: func(ll logLayout) wantCorruption {
				return wantCorruption{file: SegmentName(mid.First+2) + startSuffix,
					reason: "both .START and .END leftovers present"}
			},
		},
	}...)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, template)
			ll := base
			ll.dir = dir
			cut := tc.mutate(t, ll)
			before := dirContents(t, dir)
			if tc.want != nil {
				checkRefused(t, dir, tc.want(ll), before)
				return
			}
			checkRepaired(t, dir, tc, cut, before)
		})
	}
}

// writeStartLeftover leaves what an interrupted TruncateFront(index) leaves
// after it wrote the .START copy and before it removed anything.
func writeStartLeftover(t *testing.T, ll logLayout, index uint64) {
	t.Helper()
	p := ll.recs[index]
	data := readFileT(t, ll.path(p.File))
	writeFileT(t, ll.path(SegmentName(index)+startSuffix), data[p.Offset:])
}

func checkRefused(t *testing.T, dir string, want wantCorruption, before map[string]string) {
	t.Helper()
	check := func(what string, err error) {
		t.Helper()
		var ce *CorruptionError
		if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
			t.Fatalf("%s: got %v, want a *CorruptionError", what, err)
		}
		if ce.Dir != dir || ce.File != want.file || ce.Index != want.index || ce.Offset != want.offset ||
			!strings.Contains(ce.Err.Error(), want.reason) {
			t.Fatalf("%s: got %q (file %s index %d offset %d), want file %s index %d offset %d reason %q",
				what, err, ce.File, ce.Index, ce.Offset, want.file, want.index, want.offset, want.reason)
		}
	}
	_, err := Scan(dir, 0, 0, nil)
	check("scan", err)
	l, _, err := Open(dir, Options{SegmentSize: baseSegmentSize}, 0, func(Position, Record) error { return nil })
	if l != nil {
		l.Close()
	}
	check("open", err)
	if !sameContents(before, dirContents(t, dir)) {
		t.Fatal("refused open modified the directory")
	}
}

func checkRepaired(t *testing.T, dir string, tc corruptionCase, cut []byte, before map[string]string) {
	t.Helper()
	// Scan, read-only, sees what Open will keep, and the tail it will cut.
	var scanned replayed
	res, err := Scan(dir, 0, 0, scanned.apply)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	checkRecords(t, scanned.recs, tc.first, tc.last)
	if (res.Tail != nil) != (cut != nil) || (res.Tail != nil && res.Tail.Bytes != int64(len(cut))) {
		t.Fatalf("scan tail %+v, want %d bytes", res.Tail, len(cut))
	}
	if !sameContents(before, dirContents(t, dir)) {
		t.Fatal("scan modified the directory")
	}

	var r replayed
	l, info, err := Open(dir, Options{SegmentSize: baseSegmentSize}, 0, r.apply)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	checkRecords(t, r.recs, tc.first, tc.last)
	if info.First != tc.first || info.Last != tc.last || info.Replayed != len(r.recs) {
		t.Fatalf("info %+v, want %d..%d", info, tc.first, tc.last)
	}
	if info.CutBytes != int64(len(cut)) {
		t.Fatalf("cut %d bytes, want %d", info.CutBytes, len(cut))
	}
	if cut == nil {
		if info.BrokenFile != "" {
			t.Fatalf("broken file %q for a clean tail", info.BrokenFile)
		}
	} else if got := readFileT(t, filepath.Join(dir, info.BrokenFile)); !bytes.Equal(got, cut[:min(len(cut), brokenKeep)]) {
		t.Fatalf("%s holds %d bytes, not the first of the %d cut", info.BrokenFile, len(got), len(cut))
	}
	for _, name := range info.LeftoversCleaned {
		if strings.HasSuffix(name, startSuffix) && fileExists(filepath.Join(dir, name)) {
			t.Fatalf("leftover %s still there", name)
		}
	}
	for name := range before {
		if name := strings.TrimPrefix(name, "/"); !isSegmentOrLeftover(name) && !fileExists(filepath.Join(dir, name)) {
			t.Fatalf("foreign file %s was removed", name)
		}
	}
	// The repaired log takes the next record at the right index and
	// reopens without another repair.
	if lsn, c := l.Append(1, testBody(tc.last+1)); lsn != tc.last+1 || c.Wait() != nil {
		t.Fatalf("append after repair: lsn %d", lsn)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs, info := reopen(t, dir, Options{SegmentSize: baseSegmentSize})
	checkRecords(t, recs, tc.first, tc.last+1)
	if info.CutBytes != 0 || len(info.LeftoversCleaned) != 0 {
		t.Fatalf("second open repaired again: %+v", info)
	}
}

func isSegmentOrLeftover(name string) bool {
	_, _, ok := parseSegmentName(name)
	return ok || isLeftoverTemp(name)
}
