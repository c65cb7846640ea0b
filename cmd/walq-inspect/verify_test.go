package main

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/wal"
)

// The corruption table of the core issue, applied to copies of the fixture
// directories: verify must exit 1 on every corruption and 0 on a torn tail
// (a warning), on harmless leftovers and on clean directories. summary and
// log must never fail with a usage error or panic on any of them.

type damageCase struct {
	name    string
	fixture string
	mutate  func(t *testing.T, dir string)
	corrupt bool     // verify exits 1
	want    []string // in verify's output
}

// TestVerifyCorruptionTable: what verify says of a log, clean or damaged.
func TestVerifyCorruptionTable(t *testing.T) {
	cases := []damageCase{
		{name: "clean_segments", fixture: "segments", want: []string{"ok: 3 segments, index 1..180", "verdict   ok: no corruption found"}},
		{name: "clean_compacted_with_snapshot_temp", fixture: "compacting",
			want: []string{"snapshot-00000000000000000147.tmp", "harmless", "verdict   ok"}},
		{name: "clean_empty", fixture: "empty", want: []string{"verdict   ok"}},
		{name: "clean_synced", fixture: "synced", want: []string{"verdict   ok: no corruption found\n"}},
		{name: "zero_filled_tail", fixture: "segments", mutate: appendToLastSegment(make([]byte, 100)),
			want: []string{"warning: recovery would cut 100 bytes", "bad frame magic", "verdict   ok: no corruption found (1 warning)"}},
		{name: "garbage_tail", fixture: "segments", mutate: appendToLastSegment(garbage(300)),
			want: []string{"warning: recovery would cut 300 bytes"}},
		{name: "bad_crc_final_record", fixture: "segments", mutate: flipLastByte,
			want: []string{"warning: recovery would cut", "body crc mismatch", "0 later frames verify"}},
		// Under SyncAlways the last batch is promised once its fsync
		// returns, but no frame states it: recovery cannot tell bit rot
		// there from a torn write, and cuts it (wal/repair.go).
		{name: "bad_crc_final_record_synced", fixture: "synced", mutate: flipLastByte,
			want: []string{"warning: recovery would cut", "above the highest watermark stated, 9"}},
		{name: "segment_of_only_a_header_after_a_roll", fixture: "segments", mutate: addEmptySegment,
			want: []string{"ok: 4 segments"}},
		{name: "empty_segment_file", fixture: "segments", corrupt: true, mutate: addZeroLengthSegment,
			want: []string{"segment header cut short: 0 of 56 bytes"}},
		{name: "leftover_segment_temp", fixture: "segments", mutate: copyFirstSegmentAs(wal.SegmentName(181) + ".tmp"),
			want: []string{"00000000000000000181.seg.tmp", "a segment being created", "harmless", "verdict   ok"}},
		{name: "leftover_marker_temp", fixture: "segments", mutate: writeFile(layout.MarkerTemp, "x"),
			want: []string{"WALQ-FORMAT.tmp (1 B): the format marker being written", "harmless", "verdict   ok"}},
		{name: "leftover_broken", fixture: "segments", mutate: writeFile("log/"+wal.SegmentName(121)+".broken", "x"),
			want: []string{"00000000000000000121.seg.broken (1 B): bytes that an open cut", "verdict   ok"}},
		{name: "leftover_format1_segment_after_migration", fixture: "segments",
			mutate: writeFile("log/"+wal.Format1SegmentName(1), "x"),
			want:   []string{"log/00000000000000000001 (1 B): a format-1 log file, left by a migration", "verdict   ok"}},
		{name: "flipped_bit_mid_tail_with_good_frames_after", fixture: "segments",
			mutate: func(t *testing.T, dir string) { damage(t, dir, lastIndex(t, dir)-3) },
			want:   []string{"warning: recovery would cut", "3 later frames verify", "body crc mismatch"}},
		{name: "flipped_bit_in_promised_record", fixture: "promised", corrupt: true,
			want: []string{"recovery would refuse", "record 3: body crc mismatch; the frame at offset", "states records up to 9 were fsynced"}},
		{name: "bad_crc_in_older_segment", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) { damage(t, dir, 10) },
			want: []string{"segment 00000000000000000001.seg index 10 offset", "body crc mismatch",
				"in a segment older than the newest"}},
		{name: "bad_crc_in_two_segments", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) { damage(t, dir, 10, 100) },
			want:   []string{"index 10 offset", "index 100 offset", "2 problems"}},
		// A compaction that wrote its snapshot but was stopped before it
		// removed the segments the snapshot covers.
		{name: "bad_crc_in_covered_segment", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				snapshotAtSecondSegment(t, dir)
				damage(t, dir, 10)
			},
			want: []string{"index 10 offset", "(recovery does not read this segment: snapshot-", "covers it wholly, and the next open removes it)",
				"state     ok"}},
		{name: "lsn_gap_inside_segment", fixture: "segments", corrupt: true, mutate: dropFrame(20),
			want: []string{"lsn gap: want 20, got 21"}},
		{name: "missing_middle_segment", fixture: "segments", corrupt: true, mutate: removeSegment(1),
			want: []string{"lsn gap: segment starts at"}},
		{name: "segment_of_another_directory_first", fixture: "foreign", corrupt: true,
			want: []string{"segment 00000000000000000001.seg index 1 offset 12: segment of directory", "copied in from another queue",
				"corruption: 1 problem found"}},
		{name: "segment_of_another_directory_last", fixture: "segments", corrupt: true, mutate: copyTwinSegment(-1),
			want: []string{"segment of directory", "copied in from another queue", "corruption: 1 problem found"}},
		{name: "segment_of_another_directory_alone", fixture: "synced", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				other := t.TempDir()
				if _, err := buildSynced(other); err != nil {
					t.Fatal(err)
				}
				name := wal.SegmentName(1)
				copyFile(t, filepath.Join(other, layout.LogDirName, name), filepath.Join(dir, layout.LogDirName, name))
			},
			want: []string{"segment 00000000000000000001.seg index 1 offset 12: segment of directory"}},
	}
	runVerifyCases(t, cases)
}

// TestVerifyDirectoryTable: what verify says of the directory around the
// log: foreign entries, the marker, snapshots and format-1 directories.
// (The cases are apart from the log's so that each table stays short.)
func verifyTableCases() []damageCase {
	return []damageCase{
		{name: "snapshot_of_another_directory", fixture: "compacting", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				other := t.TempDir()
				if _, err := buildCompacting(other); err != nil {
					t.Fatal(err)
				}
				copyFile(t, snapshotPath(t, other), snapshotPath(t, dir))
			},
			want: []string{"corrupt snapshot", "snapshot of directory", "no snapshot verifies"}},
		{name: "format1_snapshot_in_format2_directory", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				name := wal.SnapshotName(28)
				copyFile(t, filepath.Join("..", "..", "testdata", "format1", name), filepath.Join(dir, name))
			},
			want: []string{"a format-1 snapshot in a directory of format 2"}},
		{name: "foreign_file", fixture: "segments", mutate: writeFile("notes.txt", "hello"),
			want: []string{"foreign   warning: notes.txt: not a file of a walq queue", "verdict   ok: no corruption found (1 warning)"}},
		{name: "foreign_file_in_log", fixture: "segments", mutate: writeFile("log/\x1b[2Jx", "hello"),
			want: []string{`"log/\x1b[2Jx": not a file of a walq queue`, "verdict   ok: no corruption found (1 warning)"}},
		{name: "lost_found_and_dotfiles", fixture: "segments",
			mutate: func(t *testing.T, dir string) {
				mkdirIn("lost+found")(t, dir)
				writeFile(".DS_Store", "x")(t, dir)
				writeFile("log/.nfs01", "x")(t, dir)
			},
			want: []string{"files     ok: nothing that walq.Open would refuse", "verdict   ok: no corruption found\n"}},
		{name: "file_of_a_newer_walq", fixture: "segments", corrupt: true, mutate: writeFile("walq-names", "2"),
			want: []string{"walq-names: a name in walq's own scheme that this build does not know", "verdict   not verified"}},
		{name: "newer_name_in_log", fixture: "segments", corrupt: true, mutate: writeFile("log/00000000000000000001.index", "x"),
			want: []string{"log/00000000000000000001.index: a name in walq's own scheme"}},
		{name: "directory_named_like_a_segment", fixture: "segments", corrupt: true, mutate: mkdirIn("log/00000000000000000999.seg"),
			want: []string{"log/00000000000000000999.seg: a directory, but walq keeps a segment by that name", "corruption: 1 problem found"}},
		{name: "missing_marker", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, layout.MarkerName)) },
			want:   []string{"format    PROBLEM: walq: corrupt directory", "file WALQ-FORMAT offset 0: format marker missing, but log/00000000000000000001.seg is a format-2 segment"}},
		{name: "damaged_marker", fixture: "segments", corrupt: true, mutate: flipMarkerByte(20),
			want: []string{"format    PROBLEM: walq: corrupt directory", "file WALQ-FORMAT offset 0: format marker crc mismatch"}},
		{name: "not_a_marker", fixture: "segments", corrupt: true, mutate: writeFile(layout.MarkerName, "2"),
			want: []string{"file WALQ-FORMAT offset 0: not a walq format marker"}},
		{name: "marker_of_version_1", fixture: "segments", corrupt: true, mutate: flipMarkerByte(11, 0x03),
			want: []string{"file WALQ-FORMAT offset 0: format marker says version 1, which never had a marker"}},
		{name: "marker_is_a_directory", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, layout.MarkerName))
				mkdirIn(layout.MarkerName)(t, dir)
			},
			want: []string{"WALQ-FORMAT: a directory, but walq keeps a format marker by that name"}},
		{name: "truncated_snapshot", fixture: "compacting", corrupt: true, mutate: truncateSnapshot,
			want: []string{"corrupt snapshot", "body length"}},
		{name: "bad_newest_snapshot_after_truncation", fixture: "compacting", corrupt: true, mutate: flipSnapshotByte,
			want: []string{"corrupt snapshot", "crc mismatch", "no snapshot verifies"}},
		{name: "snapshot_newer_than_log", fixture: "compacting", corrupt: true, mutate: cutLogBefore(130),
			want: []string{"the snapshot covers index 140 but the log ends at 129"}},
		{name: "snapshot_newer_than_a_cut", fixture: "compacting", corrupt: true,
			mutate: func(t *testing.T, dir string) { cutLogInside(130)(t, dir) },
			want:   []string{"tail      PROBLEM: recovery would refuse: ", "and snapshot-00000000000000000140.snap covers index 140", "the records from 130 on were promised durable"}},

		{name: "format1_clean", fixture: "format1", want: []string{"format    1 (no marker)", "ok: 3 segments of format 1, index 27..", "verdict   ok: no corruption found\n"}},
		{name: "format1_torn_tail", fixture: "format1", mutate: cutFormat1Tail(3),
			want: []string{"the next open would leave out", "verdict   ok: no corruption found (1 warning)"}},
		{name: "format1_both_start_and_end_leftovers", fixture: "format1", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				copyFormat1SegmentAs(".START")(t, dir)
				copyFormat1SegmentAs(".END")(t, dir)
			},
			want: []string{"both .START and .END leftovers"}},
	}
}

// verifyCasesOn returns the cases of verifyTableCases on the format-1
// fixture (format1 true) or on the others.
func verifyCasesOn(format1 bool) []damageCase {
	var out []damageCase
	for _, c := range verifyTableCases() {
		if (c.fixture == "format1") == format1 {
			out = append(out, c)
		}
	}
	return out
}

// TestVerifyDirectoryTable and TestVerifyDirectoryTableFormat1 run the
// cases on the format-2 fixtures and on the format-1 one: two tests, so
// that each stays within the default run's limit.
func TestVerifyDirectoryTable(t *testing.T) { runVerifyCases(t, verifyCasesOn(false)) }

func TestVerifyDirectoryTableFormat1(t *testing.T) { runVerifyCases(t, verifyCasesOn(true)) }

// runVerifyCases runs each case on a copy of its fixture, in parallel.
func runVerifyCases(t *testing.T, cases []damageCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := copyDir(t, fixtureNamed(t, tc.fixture).dir)
			if tc.mutate != nil {
				tc.mutate(t, dir)
			}
			checkVerify(t, dir, tc.corrupt, tc.want)
		})
	}
}

// A torn last frame, cut at every byte: always a tail that recovery would
// cut.
func TestVerifyTornLastFrameAtEveryByte(t *testing.T) {
	base := fixtureNamed(t, "segments").dir
	pos, err := recordPositions(base)
	if err != nil {
		t.Fatal(err)
	}
	last := pos[uint64(len(pos))]
	segs, _, err := wal.ListSegments(filepath.Join(base, layout.LogDirName))
	if err != nil {
		t.Fatal(err)
	}
	tail := segs[len(segs)-1]
	if tail.Name != last.File {
		t.Fatalf("the last record is not in the last segment")
	}
	dir := copyDir(t, base)
	path := filepath.Join(dir, layout.LogDirName, tail.Name)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The default run cuts at every fifth byte and the frame's last; the
	// long tests at every byte.
	stride := int64(5)
	if testrule.Long {
		stride = 1
	}
	for size := last.Frame + 1; size < tail.Size; size++ {
		if (size-last.Frame-1)%stride != 0 && size != tail.Size-1 {
			continue
		}
		// The frame's own bytes up to size, never zeros where a shorter
		// cut left the file.
		if err := os.WriteFile(path, whole[:size], 0o600); err != nil {
			t.Fatal(err)
		}
		checkVerify(t, dir, false, []string{"warning: recovery would cut", "0 later frames verify"})
	}
}

func checkVerify(t *testing.T, dir string, corrupt bool, want []string) {
	t.Helper()
	stdout, stderr, code := inspect("verify", dir)
	wantCode := exitOK
	if corrupt {
		wantCode = exitFailed
	}
	if code != wantCode {
		t.Errorf("verify exit %d, want %d\n%s%s", code, wantCode, stdout, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("verify output lacks %q:\n%s%s", w, stdout, stderr)
		}
	}
	if !corrupt && strings.Contains(stdout, "PROBLEM") {
		t.Errorf("problem reported on a sound directory:\n%s", stdout)
	}
	for _, args := range [][]string{{"summary", dir}, {"log", dir}, {"log", "--json", dir}, {"state", dir}, {"dead", dir}, {"space", dir}, {"item", dir, "3"}} {
		out, errOut, code := inspect(args...)
		if code != exitOK && code != exitFailed {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		if !corrupt && code != exitOK && args[0] != "item" {
			t.Errorf("%v on a sound directory: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

func lastIndex(t *testing.T, dir string) uint64 {
	t.Helper()
	pos, err := recordPositions(dir)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(len(pos))
}

// damage flips a bit in the last byte of each record named.
func damage(t *testing.T, dir string, indexes ...uint64) {
	t.Helper()
	pos, err := recordPositions(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, index := range indexes {
		if err := flipRecordByte(dir, pos, index, 0x01); err != nil {
			t.Fatal(err)
		}
	}
}

func segmentPaths(t *testing.T, dir string) []wal.Segment {
	t.Helper()
	segs, _, err := wal.ListSegments(filepath.Join(dir, layout.LogDirName))
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

func appendToLastSegment(data []byte) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		segs := segmentPaths(t, dir)
		f, err := os.OpenFile(segs[len(segs)-1].Path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
}

func garbage(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func flipLastByte(t *testing.T, dir string) {
	segs := segmentPaths(t, dir)
	path := segs[len(segs)-1].Path
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// addEmptySegment adds the segment a roll would have made next, its header
// written and no frame yet: the last segment's header with the next LSN
// (and its CRC), as a test outside package wal can make it.
func addEmptySegment(t *testing.T, dir string) {
	segs := segmentPaths(t, dir)
	data, err := os.ReadFile(segs[len(segs)-1].Path)
	if err != nil {
		t.Fatal(err)
	}
	next := lastIndex(t, dir) + 1
	h := append([]byte(nil), data[:wal.SegmentHeaderSize]...)
	binary.BigEndian.PutUint64(h[28:], next)
	binary.BigEndian.PutUint32(h[52:], crc32.Checksum(h[:52], castagnoli))
	if err := os.WriteFile(filepath.Join(dir, layout.LogDirName, wal.SegmentName(next)), h, 0o600); err != nil {
		t.Fatal(err)
	}
}

// addZeroLengthSegment adds an empty file named as the next segment, which
// walq never makes: a segment is renamed into place with its header.
func addZeroLengthSegment(t *testing.T, dir string) {
	path := filepath.Join(dir, layout.LogDirName, wal.SegmentName(lastIndex(t, dir)+1))
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// copyFirstSegmentAs copies the first segment to another name in log/.
func copyFirstSegmentAs(name string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		copyFile(t, segmentPaths(t, dir)[0].Path, filepath.Join(dir, layout.LogDirName, name))
	}
}

// copyTwinSegment puts the twin fixture's segment i (-1: the last) in place
// of the same-named segment of dir.
func copyTwinSegment(i int) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		segs := segmentPaths(t, fixtureNamed(t, "twin").dir)
		if i < 0 {
			i += len(segs)
		}
		copyFile(t, segs[i].Path, filepath.Join(dir, layout.LogDirName, segs[i].Name))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// dropFrame cuts the frame holding record index out of its segment: the
// frames after it verify, but their LSNs no longer follow.
func dropFrame(index uint64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		pos, err := recordPositions(dir)
		if err != nil {
			t.Fatal(err)
		}
		at, next := pos[index], pos[index+1]
		if at.File != next.File || at.Frame == next.Frame {
			t.Fatalf("record %d is not alone in its frame, or is the last of its segment", index)
		}
		path := filepath.Join(dir, layout.LogDirName, at.File)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data[:at.Frame:at.Frame], data[next.Frame:]...)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotAtSecondSegment writes the snapshot a compaction would write at
// the first LSN of the second segment, and removes nothing: the first
// segment is wholly covered.
func snapshotAtSecondSegment(t *testing.T, dir string) {
	t.Helper()
	lsn := segmentPaths(t, dir)[1].First
	id := markerID(t, dir)
	st, err := rebuild.StateAt(dir, id, 0, lsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := st.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wal.WriteSnapshot(nil, dir, id, lsn, body, 0o600); err != nil {
		t.Fatal(err)
	}
}

func markerID(t *testing.T, dir string) wal.DirID {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, layout.MarkerName))
	if err != nil {
		t.Fatal(err)
	}
	id, err := wal.DecodeMarker(data)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// flipMarkerByte xors mask (default 0x01) into byte i of the marker.
func flipMarkerByte(i int, mask ...byte) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		m := byte(0x01)
		if len(mask) > 0 {
			m = mask[0]
		}
		path := filepath.Join(dir, layout.MarkerName)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[i] ^= m
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// format1Segments lists the segments of a format-1 log.
func format1Segments(t *testing.T, dir string) []wal.Segment {
	t.Helper()
	segs, err := wal.ListFormat1Segments(filepath.Join(dir, layout.LogDirName))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no format-1 segments (%v)", err)
	}
	return segs
}

// cutFormat1Tail drops the last n bytes of the last format-1 segment.
func cutFormat1Tail(n int64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		segs := format1Segments(t, dir)
		last := segs[len(segs)-1]
		if err := os.Truncate(last.Path, last.Size-n); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFormat1SegmentAs(suffix string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		first := format1Segments(t, dir)[0]
		copyFile(t, first.Path, first.Path+suffix)
	}
}

func removeSegment(i int) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.Remove(segmentPaths(t, dir)[i].Path); err != nil {
			t.Fatal(err)
		}
	}
}

func mkdirIn(name string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(name, content string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func snapshotPath(t *testing.T, dir string) string {
	t.Helper()
	snaps, err := wal.ListSnapshots(dir)
	if err != nil || len(snaps) == 0 {
		t.Fatalf("no snapshot (%v)", err)
	}
	return snaps[0].Path
}

func truncateSnapshot(t *testing.T, dir string) {
	path := snapshotPath(t, dir)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, info.Size()/2); err != nil {
		t.Fatal(err)
	}
}

func flipSnapshotByte(t *testing.T, dir string) {
	path := snapshotPath(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-10] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cutLogBefore cuts the log cleanly (at a frame boundary) before index,
// which must begin its frame.
func cutLogBefore(index uint64) func(t *testing.T, dir string) {
	return cutLogAt(index, 0)
}

// cutLogInside cuts the log in the middle of the frame holding index (10
// bytes into it), as a torn write would.
func cutLogInside(index uint64) func(t *testing.T, dir string) {
	return cutLogAt(index, 10)
}

func cutLogAt(index uint64, into int64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		pos, err := recordPositions(dir)
		if err != nil {
			t.Fatal(err)
		}
		at := pos[index]
		if pos[index-1].Frame == at.Frame {
			t.Fatalf("record %d does not begin its frame", index)
		}
		for _, s := range segmentPaths(t, dir) {
			if s.Name > at.File {
				if err := os.Remove(s.Path); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.Truncate(filepath.Join(dir, layout.LogDirName, at.File), at.Frame+into); err != nil {
			t.Fatal(err)
		}
	}
}
