package layout

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/walq/walq/wal"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		want Kind
	}{
		{"LOCK", Lock},
		{"RESERVE", Reserve},
		{"log", LogDir},
		{wal.SnapshotName(7), Snapshot},
		{"snapshot-00000000000000000000.snap", Snapshot},
		{"snapshot-00000000000000000146.tmp", SnapshotTemp},
		{"lost+found", Ignored},
		{".DS_Store", Ignored},
		{".", Ignored},
		{"WALQ-FORMAT", Marker},
		{"WALQ-FORMAT.tmp", MarkerTmp},
		{"walq-format", Reserved},
		{"WALQ-FORMAT.bak", Reserved},
		{"walq.id", Reserved},
		{"WalqSomething", Reserved},
		{"README", Foreign},
		{"FORMAT", Foreign},
		{"wal", Foreign},
		{"snapshot-", Reserved},
		{"snapshot-1.snap", Reserved},
		{"snapshot-00000000000000000007.snap.gz", Reserved},
		{"snapshot-99999999999999999999.snap", Reserved}, // beyond 64 bits
		{"notes.txt", Foreign},
		{"Lock", Foreign},
		{"LOCK.bak", Foreign},
		{"2024", Foreign},
		{"00000000000000000001", Foreign}, // a segment, but not at the top
		{"", Foreign},
		{"Snapshot-00000000000000000007.snap", Foreign},
	}
	for _, tc := range cases {
		if got := Classify(tc.name); got != tc.want {
			t.Errorf("Classify(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestClassifyLog(t *testing.T) {
	cases := []struct {
		name string
		want Kind
	}{
		{wal.SegmentName(1), Segment},
		{"00000000000000000146.seg", Segment},
		{"00000000000000000146.seg.tmp", SegmentTemp},
		{"00000000000000000146.seg.broken", Broken},
		{"00000000000000000146.seg.broken.3", Broken},
		{"00000000000000000146.seg.index", Reserved},
		{"00000000000000000146.seg.tmp.1", Reserved},
		{"00000000000000000146.seg.broken.", Reserved},
		{"00000000000000000000.seg", Reserved}, // LSN 0 is never a segment
		{"00000000000000000146", Format1},
		{"00000000000000000146.START", Format1},
		{"00000000000000000146.END", Format1},
		{"00000000000000000146.START.TEMP", Format1},
		{"00000000000000000146.END.TEMP", Format1},
		{"00000000000000000146.broken", Broken},
		{"00000000000000000146.broken.3", Broken},
		{".swp", Ignored},
		{"lost+found", Ignored},
		{"00000000000000000000", Reserved}, // index 0 is never a segment
		{"99999999999999999999", Reserved},
		{"00000000000000000146.index", Reserved},
		{"00000000000000000146.broken.", Reserved},
		{"00000000000000000146.broken.x", Reserved},
		{"00000000000000000146.TEMP", Reserved},
		{"README", Foreign},
		{"LOCK", Foreign},
		{"0000000000000000014", Foreign}, // 19 digits
		{"segment", Foreign},
	}
	for _, tc := range cases {
		if got := ClassifyLog(tc.name); got != tc.want {
			t.Errorf("ClassifyLog(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"log", "lost+found", "LOCK.d", "WALQ-FORMAT.tmp", "log/00000000000000000009.seg"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"LOCK", ".hidden", "WALQ-FORMAT", wal.SnapshotName(5), "log/" + wal.SegmentName(1),
		"log/00000000000000000003", "log/00000000000000000011.seg.tmp", "log/.x", "log/README"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "LOCK.d"), filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	l, err := List(wal.OSFS(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Name: "LOCK", Kind: Lock},
		{Name: "LOCK.d", Kind: Foreign, IsDir: true},
		{Name: "WALQ-FORMAT", Kind: Marker},
		{Name: "WALQ-FORMAT.tmp", Kind: MarkerTmp, IsDir: true},
		{Name: "linked", Kind: Foreign, IsDir: true},
		{Name: "log", Kind: LogDir, IsDir: true},
		{Name: "log/00000000000000000001.seg", Kind: Segment},
		{Name: "log/00000000000000000003", Kind: Format1},
		{Name: "log/00000000000000000009.seg", Kind: Segment, IsDir: true},
		{Name: "log/00000000000000000011.seg.tmp", Kind: SegmentTemp},
		{Name: "log/README", Kind: Foreign},
		{Name: wal.SnapshotName(5), Kind: Snapshot},
	}
	if !slices.Equal(l.Entries, want) {
		t.Fatalf("List:\n got %+v\nwant %+v", l.Entries, want)
	}
	if !l.HasLog || !l.Queue() {
		t.Fatalf("HasLog %v, Queue %v", l.HasLog, l.Queue())
	}
	var wrong []string
	for _, e := range l.Entries {
		if e.WrongType() {
			wrong = append(wrong, e.Name)
		}
	}
	if !slices.Equal(wrong, []string{"WALQ-FORMAT.tmp", "log/00000000000000000009.seg"}) {
		t.Fatalf("wrong types %q", wrong)
	}

	// The marker alone makes a directory a queue.
	marked := t.TempDir()
	os.WriteFile(filepath.Join(marked, MarkerName), nil, 0o600)
	os.WriteFile(filepath.Join(marked, "notes"), nil, 0o600)
	if l, err = List(wal.OSFS(), marked); err != nil || !l.Queue() {
		t.Fatalf("a directory with a marker: Queue %v, %v", l != nil && l.Queue(), err)
	}

	empty := t.TempDir()
	os.Mkdir(filepath.Join(empty, "lost+found"), 0o700)
	os.WriteFile(filepath.Join(empty, "notes"), nil, 0o600)
	l, err = List(wal.OSFS(), empty)
	if err != nil {
		t.Fatal(err)
	}
	if l.Queue() || l.HasLog || len(l.Entries) != 1 {
		t.Fatalf("a directory with lost+found and a foreign file: %+v", l)
	}
}
