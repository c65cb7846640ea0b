package walq

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

const reviewPreallocChild = "WALQ_REVIEW_PREALLOC_CHILD"

// allocated returns the bytes the file at path holds on the disk and its
// size.
func reviewAllocated(t *testing.T, path string) (alloc, size int64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512, st.Size
}

// TestReviewDiskPreallocKeptPastSeal: a process killed (or a log that
// failed, whose Close gives nothing back) leaves its tail with the space
// set aside past its end. Opened again with a smaller SegmentSize, the
// tail is already at least that long, so reserve sets nothing aside and
// marks it unreserved, and release, which gives back only what a
// reserved tail holds, does nothing when it is sealed: the sealed segment
// keeps megabytes allocated past its end for as long as it lives (in the
// log, or in bodies/), and Stats (LogBytes, KeptBytes) count only its
// size. docs/guarantees.md: "the part not written is given back when it
// is sealed or closed".
func TestReviewDiskPreallocKeptPastSeal(t *testing.T) {
	if dir := os.Getenv(reviewPreallocChild); dir != "" {
		q, err := Open(dir, Options{SegmentSize: 8 << 20, DiskWatermark: -1})
		must(t, err)
		for range 3 {
			if _, err := q.Put(context.Background(), make([]byte, 1<<20-256)); err != nil {
				t.Fatal(err)
			}
		}
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		return
	}
	mnt := mountTmpfs(t, "64m")
	dir := filepath.Join(mnt, "queue")
	exe, err := os.Executable()
	must(t, err)
	cmd := exec.Command(exe, "-test.run=^TestReviewDiskPreallocKeptPastSeal$", "-test.count=1")
	cmd.Env = append(os.Environ(), reviewPreallocChild+"="+dir)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
	must(t, err)
	tail := segs[len(segs)-1]
	alloc, size := reviewAllocated(t, tail.Path)
	t.Logf("after the kill: tail %s, %d KiB long, %d KiB allocated", tail.Name, size>>10, alloc>>10)

	// The operator opens it with smaller segments.
	opts := Options{SegmentSize: 1 << 20, DiskWatermark: -1, DisableAutoCompact: true}
	q, err := Open(dir, opts)
	must(t, err)
	if _, err := q.Put(context.Background(), []byte("after")); err != nil { // seals the old tail
		t.Fatal(err)
	}
	must(t, q.Close())
	alloc, size = reviewAllocated(t, tail.Path)
	t.Logf("sealed: %s, %d KiB long, %d KiB allocated", tail.Name, size>>10, alloc>>10)
	if alloc > size+64<<10 {
		t.Errorf("the sealed segment %s keeps %d KiB allocated past its end (%d KiB long)", tail.Name, (alloc-size)>>10, size>>10)
	}
	// Reopened and compacted: it is dense, so it is kept whole in bodies/,
	// still holding the space.
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	must(t, q.Compact())
	st := q.Stats()
	var onDisk int64
	for _, p := range []string{filepath.Join(dir, "log"), filepath.Join(dir, "bodies")} {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			a, _ := reviewAllocated(t, filepath.Join(p, e.Name()))
			onDisk += a
		}
	}
	t.Logf("after a compaction: Stats LogBytes+KeptBytes %d KiB; the files hold %d KiB", (st.LogBytes+st.KeptBytes)>>10, onDisk>>10)
}
