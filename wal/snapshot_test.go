package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// encodeSnapshot1 builds a version-1 snapshot from its drawing in
// snapshot.go (this build only reads them).
func encodeSnapshot1(lsn uint64, body []byte) []byte {
	b := append([]byte(snapshotMagic), snapshotVersion1)
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	crc := crc32.Update(0, castagnoli, b)
	crc = crc32.Update(crc, castagnoli, body)
	b = binary.BigEndian.AppendUint32(b, crc)
	return append(b, body...)
}

// section is one section of a version-2 snapshot body.
type section struct {
	kind  byte
	queue uint64
	data  []byte
}

// encodeSnapshot2 builds a version-2 snapshot with any sections, from its
// drawing, with a correct CRC.
func encodeSnapshot2(id DirID, lsn uint64, sections ...section) []byte {
	var body []byte
	for _, s := range sections {
		body = append(body, s.kind)
		body = binary.BigEndian.AppendUint64(body, s.queue)
		body = binary.BigEndian.AppendUint64(body, uint64(len(s.data)))
		body = append(body, s.data...)
	}
	b := append([]byte(snapshotMagic), snapshotVersion2)
	b = append(b, id[:]...)
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	crc := crc32.Update(0, castagnoli, b)
	crc = crc32.Update(crc, castagnoli, body)
	b = binary.BigEndian.AppendUint32(b, crc)
	return append(b, body...)
}

func TestSnapshotRoundTrip(t *testing.T) {
	dir := t.TempDir()
	bodies := map[uint64][]byte{
		7:   []byte("state at 7"),
		100: bytes.Repeat([]byte{0x93}, 5000),
		12:  {},
	}
	for lsn, body := range bodies {
		path, err := WriteSnapshot(OSFS(), dir, testDir, lsn, body, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) != SnapshotName(lsn) {
			t.Fatalf("path %s", path)
		}
		snap, err := ReadSnapshot(path)
		if err != nil || snap.Version != 2 || snap.Dir != testDir || snap.LSN != lsn || !bytes.Equal(snap.Body, body) {
			t.Fatalf("read back %+v %v", snap, err)
		}
		// The file is exactly the drawing.
		if got := readFileT(t, path); !bytes.Equal(got, encodeSnapshot2(testDir, lsn, section{SectionDirIndex4, 0, body})) {
			t.Fatalf("snapshot %d is not the drawn layout", lsn)
		}
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("stat %v %v", info, err)
		}
		if fileExists(filepath.Join(dir, snapshotTempName(lsn))) {
			t.Fatal("temp file left")
		}
	}
	// Leftovers of an interrupted write and foreign files are not snapshots.
	writeFileT(t, filepath.Join(dir, snapshotTempName(200)), []byte("half"))
	writeFileT(t, filepath.Join(dir, "snapshot-12.snap"), []byte("short name"))
	writeFileT(t, filepath.Join(dir, SegmentName(1)), nil)
	if err := os.Mkdir(filepath.Join(dir, SnapshotName(300)), 0o700); err != nil {
		t.Fatal(err)
	}
	snaps, err := ListSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lsns []uint64
	for _, s := range snaps {
		lsns = append(lsns, s.LSN)
		if s.Size != int64(snapshot2HeaderSize+sectionHeaderSize+len(bodies[s.LSN])) || s.Path != filepath.Join(dir, s.Name) {
			t.Fatalf("bad entry %+v", s)
		}
	}
	if !slices.Equal(lsns, []uint64{100, 12, 7}) {
		t.Fatalf("got %v, want newest first [100 12 7]", lsns)
	}
}

// TestSnapshotVersion1Read: this build still reads the snapshots of format
// 1, which have no directory ID and no sections.
func TestSnapshotVersion1Read(t *testing.T) {
	data := encodeSnapshot1(0x0102030405060708, []byte{0xc0})
	want := []byte("WALQSNAP\x01\x01\x02\x03\x04\x05\x06\x07\x08\x00\x00\x00\x00\x00\x00\x00\x01")
	want = binary.BigEndian.AppendUint32(want, crc32.Update(crc32.Update(0, castagnoli, want), castagnoli, []byte{0xc0}))
	want = append(want, 0xc0)
	if !bytes.Equal(data, want) {
		t.Fatalf("the drawn version-1 layout changed:\n% x\n% x", data, want)
	}
	snap, err := DecodeSnapshot(data)
	if err != nil || snap.Version != 1 || !snap.Dir.IsZero() || snap.LSN != 0x0102030405060708 || !bytes.Equal(snap.Body, []byte{0xc0}) {
		t.Fatalf("%+v %v", snap, err)
	}
	path := filepath.Join(t.TempDir(), SnapshotName(3))
	writeFileT(t, path, encodeSnapshot1(3, nil))
	if snap, err := ReadSnapshot(path); err != nil || snap.Version != 1 || snap.LSN != 3 || len(snap.Body) != 0 {
		t.Fatalf("%+v %v", snap, err)
	}
}

// snapshotVariants are a snapshot of each version to damage.
func snapshotVariants() map[string][]byte {
	return map[string][]byte{
		"v1": encodeSnapshot1(42, []byte("snapshot body")),
		"v2": appendSnapshot2(nil, testDir, 42, SectionDirIndex, []byte("snapshot body")),
	}
}

func TestSnapshotTruncatedOrExtendedRejected(t *testing.T) {
	for name, data := range snapshotVariants() {
		t.Run(name, func(t *testing.T) {
			for n := range len(data) {
				if _, err := DecodeSnapshot(data[:n]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("truncated to %d bytes: %v", n, err)
				}
			}
			for _, extra := range [][]byte{{0}, data} {
				if _, err := DecodeSnapshot(slices.Concat(data, extra)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%d trailing bytes accepted: %v", len(extra), err)
				}
			}
		})
	}
}

// TestSnapshotEveryBitFlipRejected: no single bit flip decodes. A flip
// that makes the version higher is a newer format; any other is
// corruption.
func TestSnapshotEveryBitFlipRejected(t *testing.T) {
	for name, data := range snapshotVariants() {
		t.Run(name, func(t *testing.T) {
			for bit := range len(data) * 8 {
				bad := bytes.Clone(data)
				bad[bit/8] ^= 1 << (bit % 8)
				snap, err := DecodeSnapshot(bad)
				newer := bit/8 == snapOffVersion && bad[snapOffVersion] > snapshotVersion2
				switch {
				case err == nil:
					t.Fatalf("bit %d flipped: accepted %+v", bit, snap)
				case newer && (!errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt)):
					t.Fatalf("bit %d flipped (version %d): %v, want ErrNewerFormat", bit, bad[snapOffVersion], err)
				case !newer && !errors.Is(err, ErrCorrupt):
					t.Fatalf("bit %d flipped: %v, want ErrCorrupt", bit, err)
				}
			}
		})
	}
}

// TestSnapshotSections: a version-2 body is sections; exactly one for the
// default queue is read, a kind or queue this build does not know is a
// newer format (never skipped), and anything malformed is corruption, all
// under a correct CRC.
func TestSnapshotSections(t *testing.T) {
	state := []byte("state")
	def := section{SectionQueueState, 0, state}
	cases := []struct {
		name   string
		data   []byte
		newer  bool
		reason string // for corruption
	}{
		{"unknown_kind", encodeSnapshot2(testDir, 5, section{5, 0, state}), true, ""},
		{"dir_state_and_queue_state", encodeSnapshot2(testDir, 5, section{SectionDirState, 0, state}, def), false, "two state sections"},
		{"unknown_kind_after_the_default", encodeSnapshot2(testDir, 5, def, section{9, 0, nil}), true, ""},
		{"named_queue", encodeSnapshot2(testDir, 5, section{SectionQueueState, 3, state}), true, ""},
		{"named_queue_after_the_default", encodeSnapshot2(testDir, 5, def, section{SectionQueueState, 1, nil}), true, ""},
		{"two_default_sections", encodeSnapshot2(testDir, 5, def, def), false, "two state sections"},
		{"no_section", encodeSnapshot2(testDir, 5), false, "no state section"},
		{"truncated_section_header", func() []byte {
			b := encodeSnapshot2(testDir, 5, def)
			b = append(b, 1, 0, 0) // three bytes of another section header
			binary.BigEndian.PutUint64(b[snap2OffLength:], uint64(len(b)-snapshot2HeaderSize))
			crc := crc32.Update(crc32.Update(0, castagnoli, b[:snap2OffCRC]), castagnoli, b[snapshot2HeaderSize:])
			binary.BigEndian.PutUint32(b[snap2OffCRC:], crc)
			return b
		}(), false, "truncated section header"},
		{"section_runs_past_the_end", func() []byte {
			b := encodeSnapshot2(testDir, 5, def)
			binary.BigEndian.PutUint64(b[snapshot2HeaderSize+9:], uint64(len(state)+1))
			crc := crc32.Update(crc32.Update(0, castagnoli, b[:snap2OffCRC]), castagnoli, b[snapshot2HeaderSize:])
			binary.BigEndian.PutUint32(b[snap2OffCRC:], crc)
			return b
		}(), false, "runs past the end"},
		{"section_length_huge", func() []byte {
			b := encodeSnapshot2(testDir, 5, def)
			binary.BigEndian.PutUint64(b[snapshot2HeaderSize+9:], ^uint64(0))
			crc := crc32.Update(crc32.Update(0, castagnoli, b[:snap2OffCRC]), castagnoli, b[snapshot2HeaderSize:])
			binary.BigEndian.PutUint32(b[snap2OffCRC:], crc)
			return b
		}(), false, "runs past the end"},
		{"version_0", func() []byte { b := encodeSnapshot1(5, state); b[snapOffVersion] = 0; return b }(), false, "unknown snapshot version 0"},
		{"version_3", func() []byte { b := encodeSnapshot1(5, state); b[snapOffVersion] = 3; return b }(), true, ""},
		{"bad_magic", append([]byte("WALQSNAQ"), encodeSnapshot1(5, state)[8:]...), false, "bad magic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := DecodeSnapshot(tc.data)
			switch {
			case err == nil:
				t.Fatalf("accepted %+v", snap)
			case tc.newer && (!errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt)):
				t.Fatalf("got %v, want ErrNewerFormat", err)
			case !tc.newer && (!errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.reason)):
				t.Fatalf("got %v, want corruption %q", err, tc.reason)
			}
		})
	}
	// The default section found among none other decodes, of any size.
	for _, n := range []int{0, 1, 1000} {
		data := encodeSnapshot2(testDir, 9, section{SectionQueueState, 0, bytes.Repeat([]byte{7}, n)})
		if snap, err := DecodeSnapshot(data); err != nil || len(snap.Body) != n || snap.Dir != testDir || snap.LSN != 9 {
			t.Fatalf("%d bytes: %+v %v", n, snap, err)
		}
	}
}

func TestReadSnapshotErrorNamesFile(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteSnapshot(nil, dir, testDir, 9, []byte("body"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	data := readFileT(t, path)
	data[len(data)-1] ^= 1
	writeFileT(t, path, data)
	_, err = ReadSnapshot(path)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != SnapshotName(9) || ce.Dir != dir || ce.Offset != snap2OffCRC {
		t.Fatalf("got %#v", err)
	}
	want := "walq: corrupt snapshot: file " + SnapshotName(9) + " offset 41: crc mismatch"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	// A newer snapshot names its path; a missing one is no corruption.
	newer := encodeSnapshot2(testDir, 9, section{7, 0, nil})
	writeFileT(t, path, newer)
	if _, err := ReadSnapshot(path); !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), path) {
		t.Fatalf("newer: %v", err)
	}
	if _, err := ReadSnapshot(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

// TestWriteSnapshotFaultEveryStep fails each file operation of
// WriteSnapshot in turn: a failed write never leaves a temp file, and never
// leaves a final file that does not verify.
func TestWriteSnapshotFaultEveryStep(t *testing.T) {
	body := []byte("the live state")
	for n := 1; ; n++ {
		dir := t.TempDir()
		ffs := NewFaultFS(OSFS(), n)
		path, err := WriteSnapshot(ffs, dir, testDir, 5, body, 0o600)
		if !ffs.Failed() {
			if err != nil {
				t.Fatalf("no fault, error %v", err)
			}
			t.Logf("WriteSnapshot ran %d file operations", n-1)
			break
		}
		if err == nil {
			t.Fatalf("op %d failed but WriteSnapshot succeeded", n)
		}
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("op %d: error %v does not wrap the cause", n, err)
		}
		if path != "" {
			t.Fatalf("op %d: path %q with error", n, path)
		}
		if fileExists(filepath.Join(dir, snapshotTempName(5))) {
			t.Fatalf("op %d: temp file left", n)
		}
		if final := filepath.Join(dir, SnapshotName(5)); fileExists(final) {
			if snap, err := ReadSnapshot(final); err != nil || snap.LSN != 5 || !bytes.Equal(snap.Body, body) {
				t.Fatalf("op %d: final file does not verify: %v", n, err)
			}
		}
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(snapshotMagic))
	f.Add(encodeSnapshot1(1, nil))
	f.Add(encodeSnapshot1(77, []byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02}))
	f.Add(appendSnapshot2(nil, testDir, 1, SectionDirIndex, nil))
	f.Add(appendSnapshot2(nil, testDir, 77, SectionDirIndex, []byte{0x82, 0xa1, 'a', 0x01}))
	f.Add(encodeSnapshot2(testDir, 3, section{1, 0, []byte("a")}, section{1, 0, []byte("b")}))
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := DecodeSnapshot(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerFormat) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrNewerFormat", err)
			}
			return
		}
		// Accepted: re-encoding must give back the very same bytes.
		var again []byte
		switch snap.Version {
		case 1:
			again = encodeSnapshot1(snap.LSN, snap.Body)
		case 2:
			again = appendSnapshot2(nil, snap.Dir, snap.LSN, snap.Kind, snap.Body)
		default:
			t.Fatalf("version %d", snap.Version)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted % x, which re-encodes as % x", data, again)
		}
	})
}

// TestSnapshotOptionalSections: a section of kind SectionOptional or above
// that this build does not know is skipped, wherever it lies and whatever
// queue it names, and the state section beside it is read, by the whole-
// file decoder and by OpenSnapshot; a snapshot of optional sections only
// still has no state section.
func TestSnapshotOptionalSections(t *testing.T) {
	state := []byte("index")
	file := EncodeSnapshotSections(testDir, 12,
		Section{Kind: SectionOptional, Queue: 7, Data: []byte("history")},
		Section{Kind: SectionDirIndex4, Data: state},
		Section{Kind: 0xff, Data: nil})
	snap, err := DecodeSnapshot(file)
	if err != nil || string(snap.Body) != "index" || snap.Kind != SectionDirIndex4 || snap.LSN != 12 ||
		string(snap.Skipped) != string([]byte{SectionOptional, 0xff}) {
		t.Fatalf("DecodeSnapshot = %+v, %v", snap, err)
	}
	path := filepath.Join(t.TempDir(), SnapshotName(12))
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := OpenSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "index" || r.Close() != nil {
		t.Fatalf("OpenSnapshot read %q, %v", got, err)
	}
	if _, err := DecodeSnapshot(EncodeSnapshotSections(testDir, 12, Section{Kind: SectionOptional, Data: state})); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("optional sections only: %v, want no state section", err)
	}
	// A kind below SectionOptional this build does not know is refused.
	if _, err := DecodeSnapshot(EncodeSnapshotSections(testDir, 12, Section{Kind: SectionDirIndex4, Data: state}, Section{Kind: SectionOptional - 1})); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("kind %d: %v, want ErrNewerFormat", SectionOptional-1, err)
	}
}
