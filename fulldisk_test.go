package walq

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// A real full disk: the queue in a size-limited tmpfs, filled under load
// until its writes fail. Every call must tell the truth (a Put that
// returned nil is durable, an Ack that returned nil is final, failures are
// ErrFailed, ErrFull or ENOSPC), the queue must fail as a whole, a reopen on
// the still-full disk must work (recovery releases the RESERVE file), and
// once space is freed the reopened queue takes puts again.
func TestFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	filler := filepath.Join(mnt, "filler")
	writeFile(t, filler, 1<<20) // freed later, to make room again
	dir := filepath.Join(mnt, "queue")
	opts := Options{Visibility: time.Minute, Backoff: func(int) time.Duration { return 0 }, DisableAutoCompact: true,
		DiskWatermark: -1} // the writes themselves meet the full disk
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}

	led := newDiskLedger()
	ctx := context.Background()
	stop := make(chan struct{})
	var stopOnce sync.Once
	failedAt := make(chan time.Time, 1)
	stopAll := func() {
		stopOnce.Do(func() {
			failedAt <- time.Now()
			close(stop)
		})
	}
	var wg sync.WaitGroup
	for p := range 3 {
		rng := rand.New(rand.NewPCG(uint64(p), 7))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				items := make([]Item, 1+rng.IntN(3))
				for i := range items {
					items[i].Body = fullDiskBody(rng.Uint64(), 1+rng.IntN(900<<10)/len(items))
				}
				led.attempt(items)
				ids, err := q.PutBatch(ctx, items)
				if err != nil {
					led.failure(t, "PutBatch", err)
					stopAll()
					continue
				}
				led.put(ids, items)
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for {
				gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				m, err := q.Get(gctx)
				cancel()
				if err != nil {
					select {
					case <-stop:
						if !errors.Is(err, ErrFailed) {
							t.Errorf("Get blocked at the failure returned %v, want ErrFailed", err)
						}
						return
					default:
					}
					led.failure(t, "Get", err)
					stopAll()
					return
				}
				if err := q.Ack(m.Receipt); err != nil {
					led.failure(t, "Ack", err)
					stopAll()
					continue
				}
				led.ack(m.ID)
			}
		})
	}
	var failed time.Time
	select {
	case failed = <-failedAt:
	case <-time.After(15 * time.Second):
		t.Fatal("the disk never filled")
	}
	waitGroup(t, &wg, 5*time.Second, "producers and consumers after the failure")
	if since := time.Since(failed); since > 5*time.Second {
		t.Errorf("the blocked calls took %v to return after the failure", since)
	}
	// The queue failed as a whole: every call says so, a Get at once.
	if _, err := q.Put(ctx, []byte("after")); !errors.Is(err, ErrFailed) {
		t.Errorf("Put after the failure: %v, want ErrFailed", err)
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	start := time.Now()
	if _, err := q.Get(gctx); !errors.Is(err, ErrFailed) || time.Since(start) > time.Second {
		t.Errorf("Get after the failure: %v after %v, want ErrFailed at once", err, time.Since(start))
	}
	cancel()
	q.Close()
	if led.puts == 0 {
		t.Fatal("no put succeeded before the disk filled")
	}

	// Reopen on the still-full disk.
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("reopen on the full disk: %v", err)
	}
	led.check(t, q, "reopen on the full disk")
	// Close on the full disk loses nothing, and says nothing failed: it
	// does not start a segment it has no room for.
	if err := q.Close(); err != nil {
		t.Errorf("Close on the full disk: %v", err)
	}

	// Free space, reopen, and go on.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("reopen after freeing space: %v", err)
	}
	defer q.Close()
	led.check(t, q, "reopen after freeing space")
	for i := range 4 {
		items := []Item{{Body: fullDiskBody(uint64(1000+i), 100<<10)}}
		ids, err := q.PutBatch(ctx, items)
		if err != nil {
			t.Fatalf("put %d after freeing space: %v", i, err)
		}
		led.put(ids, items)
	}
	led.check(t, q, "puts after freeing space")
	t.Logf("%d batches put, %d items acked, %d failures reported: %s", led.puts, len(led.acked), len(led.failures),
		strings.Join(led.failures, "; "))
}

// The reported bug: on an 8 MiB tmpfs, batches of 900 KiB until the disk
// is full, the last torn by it. Reopening must work, on the still-full
// disk, and must neither leave a partial .broken copy nor add another
// .broken file on each try. The first tear is easy (recovery releases the
// RESERVE file and has room for the copy, but then cannot put the reserve
// back); the second, with no reserve left, is the bug. (It passes once the
// wal package keeps bounded .broken copies.)
func TestFullDiskTornBatch(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "queue")
	opts := Options{DisableAutoCompact: true, DiskWatermark: -1}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 900 << 10
	// Leave room for two batches and half of the third.
	writeFile(t, filepath.Join(mnt, "filler"), freeBytes(t, mnt)-2*batch-batch/2)
	logDir := filepath.Join(dir, "log")
	ctx := context.Background()
	items := 0
	for round := range 2 {
		var putErr error
		for i := 0; putErr == nil && i < 10; i++ {
			seed := uint64(100*round + 10*i)
			b := []Item{{Body: fullDiskBody(seed, batch/3)}, {Body: fullDiskBody(seed+1, batch/3)}, {Body: fullDiskBody(seed+2, batch/3)}}
			if _, putErr = q.PutBatch(ctx, b); putErr == nil {
				items += len(b)
			}
		}
		if !errors.Is(putErr, ErrFailed) {
			t.Fatalf("round %d: the batch the disk could not hold: %v, want ErrFailed", round, putErr)
		}
		q.Close()
		var before []string
		for try := range 3 {
			q, err = Open(dir, opts)
			if err != nil {
				t.Fatalf("round %d: reopen %d on the full disk: %v (log directory: %v)", round, try, err, brokenFiles(t, logDir))
			}
			if st := q.Stats(); st.Items != items {
				t.Errorf("round %d: reopen %d: %d items, want the %d of the whole batches", round, try, st.Items, items)
			}
			broken := brokenFiles(t, logDir)
			if try > 0 && len(broken) != len(before) {
				t.Fatalf("round %d: reopen %d added a .broken file: %v, then %v", round, try, before, broken)
			}
			before = broken
			if try < 2 {
				q.Close()
			}
		}
		if len(before) > round+1 {
			t.Errorf("round %d: .broken files %v for %d torn tails", round, before, round+1)
		}
		for _, name := range before {
			if fi, err := os.Stat(filepath.Join(logDir, name)); err != nil || fi.Size() == 0 {
				t.Errorf("round %d: %s: %v, empty: a partial copy", round, name, err)
			}
		}
	}
	q.Close()
}

// mountTmpfs mounts a tmpfs of the given size on a temporary directory and
// unmounts it at the end of the test. It skips the test when it cannot.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a real full disk needs root to mount a size-limited tmpfs")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs of %s on %s: %v", size, mnt, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

func freeBytes(t *testing.T, path string) int {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	return int(fs.Bavail) * int(fs.Bsize)
}

func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, max(size, 0)), 0o600); err != nil {
		t.Fatalf("write %s (%d bytes): %v", path, size, err)
	}
}

func brokenFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".broken") {
			names = append(names, e.Name())
		}
	}
	return names
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// fullDiskBody is n bytes that follow from seed.
func fullDiskBody(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// diskLedger is what the calls reported: items put (by ID, with the hash of
// their body), items acked, bodies attempted, and the failures.
type diskLedger struct {
	mu        sync.Mutex
	stored    map[uint64]uint64 // put reported done: ID -> body hash
	acked     map[uint64]bool   // ack reported done
	attempted map[uint64]bool   // body hashes of every put started
	failures  []string
	puts      int
}

func newDiskLedger() *diskLedger {
	return &diskLedger{stored: make(map[uint64]uint64), acked: make(map[uint64]bool), attempted: make(map[uint64]bool)}
}

func bodyHash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func (l *diskLedger) put(ids []uint64, items []Item) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.puts++
	for i, id := range ids {
		l.stored[id] = bodyHash(items[i].Body)
	}
}

func (l *diskLedger) ack(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[id] = true
}

// failure records a failed call and checks that it says why truthfully.
func (l *diskLedger) failure(t *testing.T, call string, err error) {
	if !errors.Is(err, ErrFailed) && !errors.Is(err, ErrFull) && !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("%s on a full disk: %v, want ErrFailed, ErrFull or ENOSPC", call, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 5 {
		l.failures = append(l.failures, call+": "+err.Error())
	}
}

// attempt records a body about to be put, before the call.
func (l *diskLedger) attempt(items []Item) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range items {
		l.attempted[bodyHash(it.Body)] = true
	}
}

// check holds the reopened queue's state against what the calls reported:
// every item put and not acked is stored with its body, no acked item is,
// and every stored item was put by some call (perhaps one that failed).
func (l *diskLedger) check(t *testing.T, q *Queue, where string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	present := make(map[uint64]uint64)
	for id, b := range storedBodies(t, q) {
		present[id] = bodyHash(b)
	}
	for id, h := range l.stored {
		got, ok := present[id]
		switch {
		case l.acked[id] && ok:
			t.Errorf("%s: item %d was acked (reported done) but is stored", where, id)
		case !l.acked[id] && !ok:
			t.Errorf("%s: item %d was put (reported done) and never acked, but is lost", where, id)
		case ok && got != h:
			t.Errorf("%s: item %d has another body than was put", where, id)
		}
	}
	for id, h := range present {
		if _, reported := l.stored[id]; !reported && !l.attempted[h] {
			t.Errorf("%s: item %d is stored but no put carried its body", where, id)
		}
	}
}

// TestFullDiskReopenWithOpenLeases: leases open when the disk is full must
// be ended by every recovery, which writes their expiry records: the first
// reopen takes room from the reserve, and the reserve must then still hold
// what it could, so that the next reopen on the still-full disk works too.
func TestFullDiskReopenWithOpenLeases(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "queue")
	opts := Options{Visibility: time.Hour, MaxAttempts: 100, Backoff: func(int) time.Duration { return 0 }, DisableAutoCompact: true,
		DiskWatermark: -1}
	ctx := context.Background()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := q.Put(ctx, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	fill := func() {
		// Fill the disk to the last byte, beside the queue, as another
		// process on it would.
		for freeBytes(t, mnt) > 0 {
			f, err := os.CreateTemp(mnt, "filler-")
			if err != nil {
				return
			}
			f.Write(make([]byte, min(freeBytes(t, mnt), 1<<20)))
			f.Close()
		}
	}
	fill()
	for round := range 5 {
		q, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("reopen %d on the full disk: %v", round, err)
		}
		// Lease what the full disk lets us: each lease open at the close
		// needs an expiry record at the next open.
		leased := 0
		for range 10 {
			if _, ok, err := q.TryGet(); err != nil || !ok {
				break
			}
			leased++
		}
		st := q.Stats()
		fill() // whatever the reserve gave back is taken
		q.Close()
		t.Logf("round %d: expired %d leases at open, leased %d, items %d", round, st.Recovery.LeasesExpired, leased, st.Items)
		if st.Items != 40 {
			t.Fatalf("round %d: %d items, want 40", round, st.Items)
		}
	}
}

// TestCloseOnFullDisk: a Close that would start a new segment (a snapshot
// is due) on a disk with no room left loses nothing and reports no
// failure: it leaves the tail as it is.
func TestCloseOnFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "queue")
	opts := Options{Sync: SyncNever, DisableAutoCompact: true, DiskWatermark: -1}
	q, err := Open(dir, opts)
	must(t, err)
	const n = 1200 // records past closeSnapshotMin: Close wants a snapshot
	for i := range n {
		mustPut(t, q, fmt.Sprintf("item %d", i))
	}
	if _, err := q.log.Sync(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	writeFile(t, filler, freeBytes(t, mnt))
	if free := freeBytes(t, mnt); free != 0 {
		t.Fatalf("%d bytes still free", free)
	}
	if err := q.Close(); err != nil {
		t.Errorf("Close on the full disk: %v", err)
	}
	must(t, os.Remove(filler))
	q, err = Open(dir, opts)
	must(t, err)
	defer q.Close()
	bodies := storedBodies(t, q)
	if len(bodies) != n {
		t.Fatalf("%d items after the reopen, want %d", len(bodies), n)
	}
	for id, b := range bodies {
		if want := fmt.Sprintf("item %d", id-1); string(b) != want {
			t.Fatalf("item %d: %q, want %q", id, b, want)
		}
	}
}

// TestDuplicateAnswerOnAFullDisk is the first durability bug of the answers
// on a real full disk: producer A's Put holds key K in memory while its
// write waits, and the write then fails for want of room. Producer B's
// Put(K) must not have answered ErrDuplicate meanwhile (on 997a6e0 it did,
// at once, and B dropped an order whose holder never reached the disk): it
// waits for A's record and answers its failure. After a reopen with room,
// K is free and nothing is stored.
func TestDuplicateAnswerOnAFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "queue")
	g := &gateFS{FS: wal.OSFS(), release: make(chan struct{})}
	t.Cleanup(g.open)
	q, err := Open(dir, withFS(Options{Sync: SyncAlways, DiskWatermark: -1}, g))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		g.open() // a failing test must not leave Close waiting on the write
		q.Close()
	}()
	filler := filepath.Join(mnt, "filler")
	writeFile(t, filler, freeBytes(t, mnt)-256<<10)
	ctx := context.Background()

	g.arm()
	held := make(chan error, 1)
	go func() {
		_, err := q.Put(ctx, fullDiskBody(1, 1<<20), WithKey("order-7"))
		held <- err
	}()
	<-g.entered
	res, returned := answerOf(t, q, func() error {
		_, err := q.Put(ctx, []byte("the same order again"), WithKey("order-7"))
		return err
	})
	if returned {
		t.Fatalf("B's Put answered %v while A's record holding the key was not on the disk", <-res)
	}
	g.open()
	if err := recv(t, "A's put", held); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("A's put on the full disk: %v, want ErrFailed for ENOSPC", err)
	}
	if err := recv(t, "B's put", res); errors.Is(err, ErrDuplicate) || !errors.Is(err, ErrFailed) {
		t.Fatalf("B's put: %v, want the failure of the write that was to hold the key, not ErrDuplicate", err)
	}
	q.Close()

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	q, err = Open(dir, Options{Sync: SyncAlways, DiskWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if st := q.Stats(); st.Items != 0 || st.Keys != 0 {
		t.Fatalf("after the reopen: %d items, %d keys; the put that failed stored nothing", st.Items, st.Keys)
	}
	if _, err := q.Put(ctx, []byte("the order, put again"), WithKey("order-7")); err != nil {
		t.Fatalf("the key after the reopen: %v, want it free", err)
	}
}
