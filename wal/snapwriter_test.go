package wal

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestSnapshotWriter: a snapshot written in pieces of any size is the
// same file, byte for byte, as one written whole, and reads back; a state
// larger than the writer's buffer and the fsync interval included.
func TestSnapshotWriter(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, size := range []int{0, 1, 4095, 1 << 20, 1<<20 + 17, snapshotSyncEvery + 3} {
		dir := t.TempDir()
		state := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(size), byte(size >> 8), byte(size >> 16), byte(size >> 24)}).Read(state)
		w, err := CreateSnapshot(OSFS(), dir, testDir, 99, SectionDirIndex4, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		for p := state; len(p) > 0; {
			n := min(len(p), 1+r.IntN(300_000))
			if k, err := w.Write(p[:n]); err != nil || k != n {
				t.Fatalf("Write = %d, %v", k, err)
			}
			p = p[n:]
		}
		if w.Size() != int64(size) {
			t.Fatalf("Size() = %d, want %d", w.Size(), size)
		}
		path, err := w.Commit()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readFileT(t, path), EncodeSnapshotSection(testDir, 99, SectionDirIndex4, state); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes of state: the file (%d bytes) is not what WriteSnapshot writes (%d bytes)", size, len(got), len(want))
		}
		snap, err := ReadSnapshot(path)
		if err != nil || snap.Kind != SectionDirIndex4 || !bytes.Equal(snap.Body, state) {
			t.Fatalf("read back: kind %d, %d bytes, %v", snap.Kind, len(snap.Body), err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("%d files in the directory, want the snapshot alone", len(entries))
		}
	}
}

// TestSnapshotWriterFails: a failure at any step of the write, or an
// abort, leaves no snapshot and no temp file behind.
func TestSnapshotWriterFails(t *testing.T) {
	state := bytes.Repeat([]byte("state "), 400_000) // over one buffer
	for _, op := range []string{"file.write", "file.readat", "file.writeat", "file.sync", "file.close", "rename", "syncdir", ""} {
		dir := t.TempDir()
		fsys := NewFaultFS(OSFS(), 0)
		w, err := CreateSnapshot(fsys, dir, testDir, 5, SectionDirIndex4, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if op != "" {
			fsys.FailNext(op)
		}
		_, werr := w.Write(state)
		if op == "" {
			w.Abort()
		} else if _, err := w.Commit(); err == nil && werr == nil {
			t.Fatalf("%s failed, Commit returned nil", op)
		}
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		if op == "syncdir" {
			// The rename happened: the file is complete, only its
			// directory entry may not be durable yet.
			if len(left) > 1 {
				t.Fatalf("%s: files left %v", op, left)
			}
			continue
		}
		if len(left) != 0 {
			t.Fatalf("%s: files left %v", op, left)
		}
	}
}
