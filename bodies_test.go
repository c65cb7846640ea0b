package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// TestBodyCache: bodies put recently are delivered from memory, never read;
// with the cache off, or past its bound, they are read from the log, one
// read each, and arrive intact either way.
func TestBodyCache(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cache      int64
		hits, miss uint64
	}{
		{"default", 0, 20, 0},
		{"none", -1, 0, 20},
		{"small", 4 * (100 + cacheEntryCost), 4, 16}, // the last four put fit
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Open(t.TempDir(), Options{Clock: NewManualClock(epoch), BodyCacheBytes: tc.cache})
			must(t, err)
			defer q.Close()
			bodies := make(map[uint64]string)
			for i := range 20 {
				b := fmt.Sprintf("%03d %s", i, string(make([]byte, 96)))
				bodies[mustPut(t, q, b)] = b
			}
			for range 20 {
				m, ok, err := q.TryGet()
				if err != nil || !ok {
					t.Fatalf("get: %v %v", ok, err)
				}
				if string(m.Body) != bodies[m.ID] {
					t.Fatalf("item %d: body %q, want %q", m.ID, m.Body, bodies[m.ID])
				}
				must(t, q.Ack(m.Receipt))
			}
			st := q.Stats().Bodies
			if st.Hits != tc.hits || st.Misses != tc.miss {
				t.Fatalf("hits %d, misses %d; want %d, %d", st.Hits, st.Misses, tc.hits, tc.miss)
			}
			if want := int64(tc.miss) * 100; st.ReadBytes != want {
				t.Fatalf("read %d bytes of bodies, want %d (one read of each body missed)", st.ReadBytes, want)
			}
			if st.CacheBytes > max(tc.cache, 0) && tc.cache != 0 {
				t.Fatalf("cache holds %d bytes, bound %d", st.CacheBytes, tc.cache)
			}
		})
	}
}

// TestBodiesRaceCompaction: consumers read bodies from disk (no cache)
// while compactions copy them forward and remove the segments that held
// them, over and over, with small segments: every delivery has the body
// that was put, none fails, and what stays after the run reopens intact.
// A dangling reference (a body whose segment went away under it with no
// newer place) fails the test as a lost put would. The run ends after 12
// compactions and 250 deliveries, or 60 and 1,200 in a build with the tag
// long. The reopen is in this process: the fsyncs of segment rolls and
// compactions are skipped too (noSyncFS).
func TestBodiesRaceCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 8 << 10, BodyCacheBytes: -1, DisableAutoCompact: true, Sync: SyncNever,
		Visibility: time.Minute, fs: noSyncOS()}
	q, err := Open(dir, opts)
	must(t, err)
	var mu sync.Mutex
	bodies := make(map[uint64][]byte)
	body := func(id uint64) []byte {
		mu.Lock()
		defer mu.Unlock()
		return bodies[id]
	}
	put := func(r *rand.Rand) {
		b := make([]byte, r.IntN(3000))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		mu.Lock()
		defer mu.Unlock()
		id, err := q.Put(context.Background(), b)
		if err != nil {
			t.Error(err)
			return
		}
		bodies[id] = b
	}
	// A backlog that outlives many compactions, then churn on top of it.
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		put(r)
	}
	wantCompactions, wantDelivered := 12, 250
	if testrule.Long {
		wantCompactions, wantDelivered = 60, 1200
	}
	// The run ends once both counts are reached (the minute is only a
	// bound for a queue that stopped delivering).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var delivered, compactions int
	var dmu sync.Mutex
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for ctx.Err() == nil {
				put(r)
				m, ok, err := q.TryGet()
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				if want := body(m.ID); string(m.Body) != string(want) {
					t.Errorf("item %d: %d bytes delivered, want the %d put", m.ID, len(m.Body), len(want))
					return
				}
				// Half go back (another read later, perhaps after a move).
				if r.IntN(2) == 0 {
					must(t, q.Nack(m.Receipt, nil))
				} else {
					must(t, q.Ack(m.Receipt))
					mu.Lock()
					delete(bodies, m.ID)
					mu.Unlock()
				}
				dmu.Lock()
				delivered++
				dmu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := q.Compact(); err != nil {
				t.Error(err)
				return
			}
			compactions++
			dmu.Lock()
			enough := compactions >= wantCompactions && delivered >= wantDelivered
			dmu.Unlock()
			if enough {
				cancel()
			}
		}
	}()
	wg.Wait()
	if st := q.Stats(); st.Bodies.Failures != 0 || st.Dead != 0 {
		t.Fatalf("%d bodies failed, %d dead letters", st.Bodies.Failures, st.Dead)
	}
	relocated := q.Stats().Bodies.RelocatedBytes
	if compactions < wantCompactions || delivered < wantDelivered || relocated == 0 {
		t.Fatalf("%d compactions, %d deliveries, %d bytes relocated: the run proved little", compactions, delivered, relocated)
	}
	must(t, q.Close())
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	got := storedBodies(t, q)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(bodies) {
		t.Fatalf("%d items after reopening, %d put and not acked", len(got), len(bodies))
	}
	for id, b := range bodies {
		if string(got[id]) != string(b) {
			t.Fatalf("item %d after reopening: %d bytes, want %d", id, len(got[id]), len(b))
		}
	}
	t.Logf("%d deliveries, %d compactions, %d bytes relocated", delivered, compactions, relocated)
}

// TestCompactionKeepsDenseSegments: a backlog held while other items churn
// is not copied by compaction: the sealed segments that hold it leave the
// log for the bodies directory (renamed, not rewritten), the churn's
// segments are removed, and after more churn and a reopen every held body
// is read back intact from there. Once the backlog drains, its segments
// go too.
func TestCompactionKeepsDenseSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 16 << 10, BodyCacheBytes: -1, DisableAutoCompact: true, Sync: SyncNever}
	q, err := Open(dir, opts)
	must(t, err)
	// The held items wait in a paused queue, the churn goes through the
	// default one.
	hq, err := q.OpenQueue("held", QueueOptions{})
	must(t, err)
	must(t, hq.Pause(time.Time{}))
	held := make(map[uint64]string)
	for i := range 200 {
		b := fmt.Sprintf("held %03d %s", i, string(make([]byte, 500)))
		held[mustPut(t, hq, b)] = b
	}
	doChurn := func() {
		for i := range 300 {
			mustPut(t, q, fmt.Sprintf("churn %d %s", i, string(make([]byte, 200))))
		}
		for {
			m, ok, err := q.TryGet()
			must(t, err)
			if !ok {
				break
			}
			must(t, q.Ack(m.Receipt))
		}
	}
	doChurn()
	must(t, q.Compact())
	first := q.Stats().Bodies.RelocatedBytes
	kept, err := q.log.Kept()
	must(t, err)
	if len(kept) == 0 {
		t.Fatalf("no segment kept in the bodies directory after a compaction with a held backlog")
	}
	for range 3 {
		doChurn()
		must(t, q.Compact())
	}
	// The backlog's segments were dense: at most the odd partly filled one
	// was copied, never the backlog again and again.
	if r := q.Stats().Bodies.RelocatedBytes; r > first+20<<10 {
		t.Fatalf("%d bytes relocated by three more compactions (%d by the first): the held backlog was copied", r-first, first)
	}
	must(t, q.Close())
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	hq, err = q.OpenQueue("held", QueueOptions{})
	must(t, err)
	must(t, hq.Resume())
	for range len(held) {
		m, ok, err := hq.TryGet()
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if string(m.Body) != held[m.ID] {
			t.Fatalf("item %d: body %.20q, want %.20q", m.ID, m.Body, held[m.ID])
		}
		must(t, hq.Ack(m.Receipt))
	}
	must(t, q.Compact())
	if kept, err := q.log.Kept(); err != nil || len(kept) != 0 {
		t.Fatalf("kept segments %v (%v) after the backlog drained and a compaction", kept, err)
	}
}

// TestOpenVerifiesKeptHeaders: the headers of a kept segment that holds
// live bodies are verified at Open (damage there refuses the open as
// corruption, and changes nothing), while its bodies are not read until
// delivered.
func TestOpenVerifiesKeptHeaders(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 16 << 10, BodyCacheBytes: -1, DisableAutoCompact: true}
	q, err := Open(dir, opts)
	must(t, err)
	hq, err := q.OpenQueue("held", QueueOptions{})
	must(t, err)
	must(t, hq.Pause(time.Time{}))
	for i := range 100 {
		mustPut(t, hq, fmt.Sprintf("held %03d %s", i, string(make([]byte, 500))))
	}
	for i := range 100 {
		mustPut(t, q, fmt.Sprintf("churn %d", i))
	}
	must(t, q.Compact())
	kept, err := q.log.Kept()
	must(t, err)
	must(t, q.Close())
	if len(kept) == 0 {
		t.Fatal("no kept segment")
	}
	path := filepath.Join(dir, "bodies", kept[0].Name)
	good, err := os.ReadFile(path)
	must(t, err)
	bad := append([]byte(nil), good...)
	bad[wal.SegmentHeaderSize+9] ^= 1 // the first frame's header
	must(t, os.WriteFile(path, bad, 0o600))
	if q, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		if err == nil {
			q.Close()
		}
		t.Fatalf("Open with a damaged frame header in a kept segment: %v, want ErrCorrupt", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, bad) {
		t.Fatal("the refused open changed the kept segment")
	}
	must(t, os.WriteFile(path, good, 0o600))
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	if got := len(storedBodies(t, q)); got != 200 {
		t.Fatalf("%d items with bodies after the repair, want the 200 put", got)
	}
}

// TestOpenVerifiesCoveredSegments: the log segments that a clean Close's
// snapshot covers are not replayed, but those that hold live bodies have
// their frame headers verified at Open (in the background, beside the
// snapshot's decoding). Damage in one of them is corruption; damage in one
// whose items were all acked is garbage, which Open passes over and
// removes. The opens are in this process: the fsyncs are skipped
// (noSyncFS).
func TestOpenVerifiesCoveredSegments(t *testing.T) {
	base := t.TempDir()
	opts := Options{SegmentSize: 16 << 10, BodyCacheBytes: -1, DisableAutoCompact: true, fs: noSyncOS()}
	q, err := Open(base, opts)
	must(t, err)
	const n, acked = 1200, 300
	for i := range n {
		mustPut(t, q, fmt.Sprintf("item %04d %s", i, strings.Repeat("x", 80)))
	}
	for range acked {
		m := mustTryGet(t, q)
		must(t, q.Ack(m.Receipt))
	}
	// Which sealed segments hold live bodies, as Open will find them.
	segs := q.log.Segments()
	live := make([]bool, len(segs))
	q.mu.Lock()
	q.st.EachBody(0, func(_ uint64, b state.BodyRef) bool {
		for i := range segs {
			if b.InLog() && b.LSN >= segs[i].First && (i+1 == len(segs) || b.LSN < segs[i+1].First) {
				live[i] = true
			}
		}
		return true
	})
	q.mu.Unlock()
	must(t, q.Close())
	if q.snapLSN.Load() == 0 {
		t.Fatal("Close wrote no snapshot")
	}
	garbage, held := -1, -1
	for i := range len(segs) - 2 { // sealed, and covered by the snapshot
		switch {
		case !live[i] && garbage < 0:
			garbage = i
		case live[i] && i > 0 && live[i-1]:
			held = i
		}
	}
	if garbage < 0 || held < 0 {
		t.Fatalf("no covered segment of each kind among %d (live %v)", len(segs), live)
	}
	damage := func(t *testing.T, seg int) (dir, path string, bad []byte) {
		dir = copyDir(t, base)
		path = filepath.Join(dir, "log", segs[seg].Name)
		good, err := os.ReadFile(path)
		must(t, err)
		bad = append([]byte(nil), good...)
		bad[wal.SegmentHeaderSize+9] ^= 1 // the first frame's header
		must(t, os.WriteFile(path, bad, 0o600))
		return dir, path, bad
	}
	t.Run("a segment that holds live bodies", func(t *testing.T) {
		dir, path, bad := damage(t, held)
		if q, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segs[held].Name) {
			if err == nil {
				q.Close()
			}
			t.Fatalf("Open with a damaged frame header in %s: %v, want ErrCorrupt naming it", segs[held].Name, err)
		}
		if now, _ := os.ReadFile(path); !bytes.Equal(now, bad) {
			t.Fatal("the refused open changed the segment")
		}
	})
	t.Run("a segment of acked items only", func(t *testing.T) {
		dir, path, _ := damage(t, garbage)
		q, err := Open(dir, opts)
		must(t, err)
		defer q.Close()
		bodies := storedBodies(t, q)
		if len(bodies) != n-acked {
			t.Fatalf("%d items after the open, want %d", len(bodies), n-acked)
		}
		for id, b := range bodies {
			if want := fmt.Sprintf("item %04d %s", id-1, strings.Repeat("x", 80)); string(b) != want {
				t.Fatalf("item %d: body %q, want %q", id, b, want)
			}
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the garbage segment %s is still there after the open (%v)", segs[garbage].Name, err)
		}
	})
}

// TestCloseSealsCoveredTail: a Close after which a snapshot covers every
// record (one it writes, or a compaction's) leaves an empty tail segment
// after the snapshot's LSN, so the next Open reads no body to find the
// log's end; a Close with nothing new adds no segment.
func TestCloseSealsCoveredTail(t *testing.T) {
	opts := Options{SegmentSize: 1 << 20, DisableAutoCompact: true, Sync: SyncNever}
	tail := func(t *testing.T, dir string) (wal.Segment, int) {
		t.Helper()
		segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
		must(t, err)
		return segs[len(segs)-1], len(segs)
	}
	check := func(t *testing.T, dir string, n int) {
		t.Helper()
		snaps, err := wal.ListSnapshots(dir)
		must(t, err)
		last, _ := tail(t, dir)
		if len(snaps) == 0 || last.First != snaps[0].LSN+1 || last.Size != wal.SegmentHeaderSize {
			t.Fatalf("after Close: tail %s of %d bytes, snapshots %v: want an empty tail after the snapshot's LSN", last.Name, last.Size, snaps)
		}
		q, err := Open(dir, opts)
		must(t, err)
		defer q.Close()
		if r := q.Stats().Recovery; r.Replayed != 0 {
			t.Errorf("%d records replayed, want 0", r.Replayed)
		}
		if got := len(storedBodies(t, q)); got != n {
			t.Errorf("%d items after the reopen, want %d", got, n)
		}
	}
	fill := func(t *testing.T, q *Queue, n int) {
		t.Helper()
		for i := range n { // one record each: Close writes a snapshot past 1,000
			mustPut(t, q, fmt.Sprintf("item %d %s", i, strings.Repeat("y", 300)))
		}
	}
	t.Run("snapshot written by Close", func(t *testing.T) {
		dir := t.TempDir()
		q, err := Open(dir, opts)
		must(t, err)
		fill(t, q, 2000)
		must(t, q.Close())
		check(t, dir, 2000)
	})
	t.Run("snapshot written by a compaction", func(t *testing.T) {
		dir := t.TempDir()
		q, err := Open(dir, opts)
		must(t, err)
		fill(t, q, 500)
		must(t, q.Compact())
		must(t, q.Close())
		check(t, dir, 500)
	})
	t.Run("nothing new", func(t *testing.T) {
		dir := t.TempDir()
		q, err := Open(dir, opts)
		must(t, err)
		fill(t, q, 2000)
		must(t, q.Close())
		_, before := tail(t, dir)
		q, err = Open(dir, opts)
		must(t, err)
		must(t, q.Close())
		if _, after := tail(t, dir); after != before {
			t.Errorf("%d segments after an open and close with nothing new, %d before", after, before)
		}
	})
}
