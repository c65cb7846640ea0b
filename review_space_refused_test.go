package walq

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// reviewTree describes every entry under dir: its name, size, content hash,
// modification and change times and inode, so that any change a refused
// Open makes shows.
func reviewTree(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		for _, s := range skip {
			if rel == s {
				return nil
			}
		}
		st := info.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("mode=%v size=%d mtime=%d.%09d ctime=%d.%09d ino=%d blocks=%d",
			info.Mode(), info.Size(), st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Ino, st.Blocks)
		if !info.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha=%x", sha256.Sum256(data))
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func reviewTreeDiff(before, after map[string]string) []string {
	var diffs []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: removed (was %s)", k, v))
		} else if w != v {
			diffs = append(diffs, fmt.Sprintf("%s: %s -> %s", k, v, w))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: created (%s)", k, v))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// reviewKeptDir makes a directory whose compaction moved a dense sealed
// segment to bodies/ (a kept segment holding live bodies), closed cleanly.
func reviewKeptDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	opts := Options{SegmentSize: 4096, DisableAutoCompact: true, noCloseSnapshot: true, Clock: NewManualClock(epoch)}
	q, err := Open(dir, opts)
	must(t, err)
	ctx := context.Background()
	for i := 0; len(q.log.Segments()) < 3; i++ {
		_, err := q.Put(ctx, bytes.Repeat([]byte{byte('a' + i%26)}, 1000))
		must(t, err)
	}
	_, err = q.Put(ctx, []byte("in the tail"))
	must(t, err)
	must(t, q.Compact())
	kept, _, err := wal.ListKept(wal.OSFS(), filepath.Join(dir, layout.BodiesDirName))
	must(t, err)
	if len(kept) == 0 {
		t.Fatalf("layout: the compaction kept no segment in bodies/")
	}
	must(t, q.Close())
	return dir
}

// TestReviewSpaceRefusedOpenCutsTheTail (a hostile review's finding, kept as a regression test; what follows is what the build before its fix did): docs/guarantees.md (Corruption):
// "Damage to anything promised durable makes Open fail with a
// *CorruptionError ... and nothing on disk is changed"; recovery.go: "When
// Open refuses the directory it has cut nothing". A directory whose newest
// segment ends in a torn frame (a crash) and whose kept segment in bodies/
// (live bodies, promised durable) has a damaged header: Open is refused
// with a *CorruptionError naming the kept segment, but by then wal.Open
// has already cut the tail and written its .broken copy (verifyBodyFiles
// runs after the log's recovery).
func TestReviewSpaceRefusedOpenCutsTheTail(t *testing.T) {
	dir := reviewKeptDir(t)
	// A torn frame at the end of the newest segment, as a crash leaves.
	segs := segments(t, dir)
	tail := segs[len(segs)-1]
	f, err := os.OpenFile(tail.Path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.Write([]byte{40, 1, 0, 0, 0, 0, 0, 0})
	must(t, err)
	must(t, f.Close())
	// Damage the header of the kept segment (its directory ID).
	kept, _, err := wal.ListKept(wal.OSFS(), filepath.Join(dir, layout.BodiesDirName))
	must(t, err)
	flipBit(t, filepath.Join(dir, layout.BodiesDirName, kept[0].Name), 14)

	before := reviewTree(t, dir, layout.LockName, layout.ReserveName, ".")
	q, err := Open(dir, Options{SegmentSize: 4096})
	if err == nil {
		q.Close()
		t.Fatal("Open succeeded with a damaged kept segment")
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("Open = %v, want a *CorruptionError", err)
	}
	t.Logf("refused: %v", err)
	if d := reviewTreeDiff(before, reviewTree(t, dir, layout.LockName, layout.ReserveName, ".")); len(d) > 0 {
		t.Errorf("the refused Open changed the directory (LOCK, RESERVE and the top directory left out):\n%s", strings.Join(d, "\n"))
	}
}

// TestReviewSpaceRefusedOpenRewritesReserve (a hostile review's finding, kept as a regression test; what follows is what the build before its fix did): a refused Open on corruption
// (a bit flipped in a promised record) removes RESERVE and writes a new
// one: a new file (inode, times), and the top directory's times change.
// guarantees.md says nothing on disk is changed.
func TestReviewSpaceRefusedOpenRewritesReserve(t *testing.T) {
	dir := reviewKeptDir(t)
	segs := segments(t, dir)
	last := segs[len(segs)-1]
	flipBit(t, last.Path, wal.SegmentHeaderSize+int64(wal.FrameOverhead(1))+3)
	before := reviewTree(t, dir, layout.LockName)
	q, err := Open(dir, Options{SegmentSize: 4096})
	if err == nil {
		q.Close()
		t.Fatal("Open succeeded on a damaged record")
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if d := reviewTreeDiff(before, reviewTree(t, dir, layout.LockName)); len(d) > 0 {
		t.Errorf("the refused Open changed the directory (LOCK left out):\n%s", strings.Join(d, "\n"))
	}
}
