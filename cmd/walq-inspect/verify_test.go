package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walq/walq/internal/layout"
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

func TestVerifyCorruptionTable(t *testing.T) {
	cases := []damageCase{
		{name: "clean_segments", fixture: "segments", want: []string{"ok: 3 segments, index 1..180", "verdict   ok: no corruption found"}},
		{name: "clean_compacted_with_snapshot_temp", fixture: "compacting",
			want: []string{"snapshot-00000000000000000146.tmp", "harmless", "verdict   ok"}},
		{name: "clean_empty", fixture: "empty", want: []string{"verdict   ok"}},
		{name: "zero_filled_tail", fixture: "segments", mutate: appendToLastSegment(make([]byte, 100)),
			want: []string{"warning: incomplete tail", "verdict   ok: no corruption found (1 warning)"}},
		{name: "garbage_tail", fixture: "segments", mutate: appendToLastSegment(garbage(300)),
			want: []string{"warning: incomplete tail"}},
		{name: "bad_crc_final_record", fixture: "segments", mutate: flipLastByte,
			want: []string{"warning: incomplete tail", "crc mismatch"}},
		{name: "empty_segment_after_clean_roll", fixture: "segments", mutate: addEmptySegment,
			want: []string{"ok: 4 segments"}},
		{name: "leftover_start_of_interrupted_truncation", fixture: "segments", mutate: copyFirstSegmentAs(".START"),
			want: []string{".START", "harmless", "verdict   ok"}},
		{name: "flipped_bit_mid_tail_with_good_records_after", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) { damage(t, dir, lastIndex(t, dir)-3) },
			want:   []string{"crc mismatch; a valid record follows"}},
		{name: "bad_crc_in_older_segment", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) { damage(t, dir, 10) },
			want:   []string{"segment 00000000000000000001 index 10 offset", "crc mismatch"}},
		{name: "bad_crc_in_two_segments", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) { damage(t, dir, 10, 100) },
			want:   []string{"index 10 offset", "index 100 offset", "2 problems"}},
		{name: "lsn_gap_inside_segment", fixture: "segments", corrupt: true, mutate: dropRecord(20),
			want: []string{"lsn gap: want 20, got 21"}},
		{name: "missing_middle_segment", fixture: "segments", corrupt: true, mutate: removeSegment(1),
			want: []string{"lsn gap: segment starts at"}},
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
		{name: "file_of_a_newer_walq", fixture: "segments", corrupt: true, mutate: writeFile("WALQ-FORMAT", "2"),
			want: []string{"WALQ-FORMAT: a name in walq's own scheme that this build does not know", "verdict   not verified"}},
		{name: "newer_name_in_log", fixture: "segments", corrupt: true, mutate: writeFile("log/00000000000000000001.index", "x"),
			want: []string{"log/00000000000000000001.index: a name in walq's own scheme"}},
		{name: "directory_named_like_a_segment", fixture: "segments", corrupt: true, mutate: mkdirIn("log/00000000000000000999"),
			want: []string{"log/00000000000000000999: a directory, but walq keeps a segment by that name", "corruption: 1 problem found"}},
		{name: "both_start_and_end_leftovers", fixture: "segments", corrupt: true,
			mutate: func(t *testing.T, dir string) {
				copyFirstSegmentAs(".START")(t, dir)
				copyFirstSegmentAs(".END")(t, dir)
			},
			want: []string{"both .START and .END leftovers"}},
		{name: "truncated_snapshot", fixture: "compacting", corrupt: true, mutate: truncateSnapshot,
			want: []string{"corrupt snapshot", "body length"}},
		{name: "bad_newest_snapshot_after_truncation", fixture: "compacting", corrupt: true, mutate: flipSnapshotByte,
			want: []string{"corrupt snapshot", "crc mismatch", "no snapshot verifies"}},
		{name: "snapshot_newer_than_log", fixture: "compacting", corrupt: true, mutate: cutLogBefore(130),
			want: []string{"the snapshot covers index 140 but the log ends at 129"}},
	}
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

// A torn last record, cut at every byte: always an incomplete tail.
func TestVerifyTornLastRecordAtEveryByte(t *testing.T) {
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
	for size := last.Offset + 1; size < tail.Size; size++ {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		checkVerify(t, dir, false, []string{"warning: incomplete tail"})
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

func addEmptySegment(t *testing.T, dir string) {
	path := filepath.Join(dir, layout.LogDirName, wal.SegmentName(lastIndex(t, dir)+1))
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFirstSegmentAs(suffix string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		first := segmentPaths(t, dir)[0]
		data, err := os.ReadFile(first.Path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(first.Path+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// dropRecord cuts record index out of its segment: the records after it
// verify, but their LSNs no longer match their positions.
func dropRecord(index uint64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		pos, err := recordPositions(dir)
		if err != nil {
			t.Fatal(err)
		}
		at, next := pos[index], pos[index+1]
		if at.File != next.File {
			t.Fatalf("record %d is the last of its segment", index)
		}
		path := filepath.Join(dir, layout.LogDirName, at.File)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data[:at.Offset:at.Offset], data[next.Offset:]...)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
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

// cutLogBefore cuts the log cleanly (at a record boundary) before index.
func cutLogBefore(index uint64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		pos, err := recordPositions(dir)
		if err != nil {
			t.Fatal(err)
		}
		at := pos[index]
		for _, s := range segmentPaths(t, dir) {
			if s.Name > at.File {
				if err := os.Remove(s.Path); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.Truncate(filepath.Join(dir, layout.LogDirName, at.File), at.Offset); err != nil {
			t.Fatal(err)
		}
	}
}
