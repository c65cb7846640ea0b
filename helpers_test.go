package walq

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// settle does at once what the timer loop does when the clock reaches a
// due time, so a test that advanced a ManualClock sees its effects without
// waiting for the loop's goroutine.
func (q *Queue) settle() { q.tick() }

// waitForWaiters returns once n Gets are blocked waiting for an item.
func (q *Queue) waitForWaiters(n int) {
	for {
		q.mu.Lock()
		got := q.rt.waiters.len()
		q.mu.Unlock()
		if got >= n {
			return
		}
		runtime.Gosched()
	}
}

// stateBytes is the canonical encoding of the queue's state: equal states
// give equal bytes.
func (q *Queue) stateBytes() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bodies.drainLocked(q.st)
	b, err := q.st.MarshalSnapshot()
	if err != nil {
		panic(err)
	}
	return b
}

// waitForTimerAt returns once the timer loop has planned to wake at or
// before at (it has seen the change that needs it), yielding meanwhile.
// Only before the clock reaches at: a loop that has woken and done what
// was due plans past it, and the wait would not end.
func (q *Queue) waitForTimerAt(at int64) {
	for {
		q.mu.Lock()
		planned := q.timerAt
		q.mu.Unlock()
		if planned <= at {
			runtime.Gosched()
			return
		}
		runtime.Gosched()
	}
}

// dirIDOf reads the directory ID from a queue directory's marker.
func dirIDOf(t testing.TB, dir string) wal.DirID {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "WALQ-FORMAT"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := wal.DecodeMarker(data)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// storedBodies reads the body of every stored item of every queue as a
// delivery would (from memory or from the log, checked by its CRC),
// without leasing anything.
func storedBodies(t testing.TB, q *Queue) map[uint64][]byte {
	t.Helper()
	var srcs []bodySource
	q.mu.Lock()
	q.bodies.drainLocked(q.st)
	q.st.Each(func(it *state.Item) { srcs = append(srcs, q.sourceLocked(it.ID, it.Body, false)) })
	q.mu.Unlock()
	out := make(map[uint64][]byte, len(srcs))
	for _, src := range srcs {
		b, err := q.loadBody(src)
		if err != nil {
			t.Fatalf("body of item %d: %v", src.id, err)
		}
		out[src.id] = b
	}
	return out
}

// noSyncFS is an FS whose fsyncs (of files and of directories) return at
// once without reaching the disk; every other operation, and every call
// itself, goes through as before. It is for tests that check what a queue
// in this process, or a reopen in this process, sees: the page cache serves
// them the same bytes with or without the fsyncs, whose wait for the disk
// is most of such a test's time. A FaultFS over it still counts and fails
// the fsyncs. Tests of what survives a crash or a power loss do not use it.
type noSyncFS struct{ wal.FS }

// noSyncOS is the OS file system without its fsyncs.
func noSyncOS() wal.FS { return noSyncFS{wal.OSFS()} }

func (f noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{file}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

// DropCache passes on to the wrapped FS (the recovery reads past the page
// cache): dropping only clean pages, it drops none of the unsynced ones.
func (f noSyncFS) DropCache(file wal.File) error {
	d, ok := f.FS.(wal.CacheDropper)
	if !ok {
		return nil
	}
	if nf, ok := file.(noSyncFile); ok {
		file = nf.File
	}
	return d.DropCache(file)
}

type noSyncFile struct{ wal.File }

func (noSyncFile) Sync() error { return nil }

// sampleSeed is the seed of the random part of a sample that a test takes
// in the default run (a build with the tag long runs every case): a new one
// each run, logged, and set by WALQ_SAMPLE_SEED to replay a failure.
func sampleSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("WALQ_SAMPLE_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("WALQ_SAMPLE_SEED=%q: %v", v, err)
		}
	}
	t.Logf("sample seed %d (WALQ_SAMPLE_SEED)", seed)
	return seed
}

// sampled says which of n cases (seeds, rounds) a test runs: every one in a
// build with the tag long; in the default run the first, the last and k-2
// more at random (sampleSeed).
func sampled(t *testing.T, n, k int) []bool {
	t.Helper()
	run := make([]bool, n)
	if testrule.Long || k >= n {
		for i := range run {
			run[i] = true
		}
		return run
	}
	rng := rand.New(rand.NewPCG(sampleSeed(t), 0x5a3b))
	run[0], run[n-1] = true, true
	for _, i := range rng.Perm(n - 2)[:max(k-2, 0)] {
		run[i+1] = true
	}
	return run
}
