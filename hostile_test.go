package walq

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/wal"
)

// TestBodiesOfRealFrames: a producer puts bodies made of copies of the
// queue's own frames (MACs and LSNs intact) and the write of the last one
// is torn at every length a kill -9 could leave. No open is refused, no
// copy is ever read as a record, and every item reported done is there,
// byte for byte. A kill -9 leaves the page cache to the next open, so the
// fsyncs are skipped (noSyncFS); the records still say they were synced. A
// build with the tag long tears the write at every length, the default run
// at a sample of them.
func TestBodiesOfRealFrames(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{Sync: SyncAlways, DisableAutoCompact: true, fs: noSyncOS()})
	must(t, err)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		mustPut(t, q, "plain item")
	}
	segs := segments(t, dir)
	data, err := os.ReadFile(segs[len(segs)-1].Path)
	must(t, err)
	frames := data[wal.SegmentHeaderSize:]
	first := frames[:wal.FrameHeaderSize+int(binary.BigEndian.Uint32(frames[24:]))]
	bodies := [][]byte{
		bytes.Clone(frames),                       // every frame so far, back to back
		append(bytes.Clone(first), "tail"...),     // a frame at the very start
		append([]byte("head"), first...),          // a frame after a prefix
		append(bytes.Repeat(first, 3), frames...), // repeated copies
	}
	for _, b := range bodies {
		if _, err := q.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	must(t, q.Close())
	segs = segments(t, dir)
	last := segs[len(segs)-1]
	whole, err := os.ReadFile(last.Path)
	must(t, err)
	// The last frame holds the last put; tear it at every length in a build
	// with the tag long. The default run tears it at its boundaries (none of
	// it written, its first byte, around the ends of its header and of its
	// record's header, all but its last byte) and at a dozen lengths at
	// random (sampleSeed).
	lastFrame := int64(len(whole)) - int64(wal.FrameOverhead(1)) - int64(len(bodies[len(bodies)-1])) - 16
	var cuts []int64
	if testrule.Long {
		for cut := lastFrame; cut < int64(len(whole)); cut++ {
			cuts = append(cuts, cut)
		}
	} else {
		for _, off := range []int{0, 1, wal.FrameHeaderSize - 1, wal.FrameHeaderSize, wal.FrameHeaderSize + 1,
			wal.FrameOverhead(1) - 1, wal.FrameOverhead(1), wal.FrameOverhead(1) + 1} {
			cuts = append(cuts, lastFrame+int64(off))
		}
		cuts = append(cuts, int64(len(whole))-1)
		rng := rand.New(rand.NewPCG(sampleSeed(t), 0x7ea2))
		for range 12 {
			cuts = append(cuts, lastFrame+rng.Int64N(int64(len(whole))-lastFrame))
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
	}
	for _, cut := range cuts {
		dirCopy := copyDir(t, dir)
		path := dirCopy + "/log/" + last.Name
		must(t, os.WriteFile(path, whole[:cut], 0o600))
		q, err := Open(dirCopy, Options{fs: noSyncOS()})
		if err != nil {
			t.Fatalf("cut at %d of %d: Open = %v", cut, len(whole), err)
		}
		got := map[string]int{}
		for {
			m, ok, err := q.TryGet()
			must(t, err)
			if !ok {
				break
			}
			got[string(m.Body)]++
		}
		q.Close()
		if got["plain item"] != 20 {
			t.Fatalf("cut at %d: %d plain items, want 20", cut, got["plain item"])
		}
		for i, b := range bodies[:len(bodies)-1] {
			if got[string(b)] != 1 {
				t.Fatalf("cut at %d: hostile body %d found %d times", cut, i, got[string(b)])
			}
		}
		if n := len(got); n != len(bodies)+1 && n != len(bodies) {
			t.Fatalf("cut at %d: %d distinct bodies, want %d or %d", cut, n, len(bodies), len(bodies)+1)
		}
	}
}
