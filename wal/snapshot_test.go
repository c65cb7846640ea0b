package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotRoundTrip(t *testing.T) {
	dir := t.TempDir()
	bodies := map[uint64][]byte{
		7:   []byte("state at 7"),
		100: bytes.Repeat([]byte{0x93}, 5000),
		12:  {},
	}
	for lsn, body := range bodies {
		path, err := WriteSnapshot(OSFS(), dir, lsn, body, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) != SnapshotName(lsn) {
			t.Fatalf("path %s", path)
		}
		gotLSN, gotBody, err := ReadSnapshot(path)
		if err != nil || gotLSN != lsn || !bytes.Equal(gotBody, body) {
			t.Fatalf("read back %d %q %v", gotLSN, gotBody, err)
		}
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("stat %v %v", info, err)
		}
	}
	// Leftovers of an interrupted write and foreign files are not snapshots.
	writeFileT(t, filepath.Join(dir, snapshotTempName(200)), []byte("half"))
	writeFileT(t, filepath.Join(dir, "snapshot-12.snap"), []byte("short name"))
	writeFileT(t, filepath.Join(dir, SegmentName(1)), nil)
	snaps, err := ListSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lsns []uint64
	for _, s := range snaps {
		lsns = append(lsns, s.LSN)
		if s.Size != int64(snapshotHeaderSize+len(bodies[s.LSN])) || s.Path != filepath.Join(dir, s.Name) {
			t.Fatalf("bad entry %+v", s)
		}
	}
	if len(lsns) != 3 || lsns[0] != 100 || lsns[1] != 12 || lsns[2] != 7 {
		t.Fatalf("got %v, want newest first [100 12 7]", lsns)
	}
}

func encodeSnapshot(lsn uint64, body []byte) []byte {
	return append(appendSnapshotHeader(nil, lsn, body), body...)
}

func TestSnapshotTruncatedAtEveryLengthRejected(t *testing.T) {
	data := encodeSnapshot(42, []byte("snapshot body"))
	for n := 0; n < len(data); n++ {
		if _, _, err := DecodeSnapshot(data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	if _, _, err := DecodeSnapshot(append(bytes.Clone(data), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte accepted: %v", err)
	}
}

func TestSnapshotEveryBitFlipRejected(t *testing.T) {
	data := encodeSnapshot(42, []byte("snapshot body"))
	for bit := 0; bit < len(data)*8; bit++ {
		bad := bytes.Clone(data)
		bad[bit/8] ^= 1 << (bit % 8)
		if lsn, _, err := DecodeSnapshot(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: accepted lsn %d, err %v", bit, lsn, err)
		}
	}
}

func TestReadSnapshotErrorNamesFile(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteSnapshot(nil, dir, 9, []byte("body"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	data := readFileT(t, path)
	data[len(data)-1] ^= 1
	writeFileT(t, path, data)
	_, _, err = ReadSnapshot(path)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != SnapshotName(9) || ce.Dir != dir || ce.Offset != snapOffCRC {
		t.Fatalf("got %#v", err)
	}
	want := "walq: corrupt snapshot: file " + SnapshotName(9) + " offset 25: crc mismatch"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
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
		path, err := WriteSnapshot(ffs, dir, 5, body, 0o600)
		if !ffs.Failed() {
			if err != nil {
				t.Fatalf("no fault, error %v", err)
			}
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
		if _, err := os.Stat(filepath.Join(dir, snapshotTempName(5))); !os.IsNotExist(err) {
			t.Fatalf("op %d: temp file left: %v", n, err)
		}
		if final := filepath.Join(dir, SnapshotName(5)); fileExists(final) {
			if lsn, got, err := ReadSnapshot(final); err != nil || lsn != 5 || !bytes.Equal(got, body) {
				t.Fatalf("op %d: final file does not verify: %v", n, err)
			}
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(snapshotMagic))
	f.Add(encodeSnapshot(1, nil))
	f.Add(encodeSnapshot(77, []byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02}))
	f.Fuzz(func(t *testing.T, data []byte) {
		lsn, body, err := DecodeSnapshot(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if again := encodeSnapshot(lsn, body); !bytes.Equal(again, data) {
			t.Fatalf("accepted bytes that re-encode differently")
		}
	})
}
