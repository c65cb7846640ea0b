package walq

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// gatedFS counts the log's fsyncs and, while armed, holds each until the
// test lets it go: what a record waits for is then in the test's hands.
type gatedFS struct {
	wal.FS
	armed   atomic.Bool
	syncs   atomic.Int64
	blocked chan struct{} // a held fsync has begun
	release chan struct{} // lets held fsyncs go
}

func newGatedFS() *gatedFS {
	return &gatedFS{FS: noSyncOS(), blocked: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gatedFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return gatedFile{File: f, g: g}, nil
}

type gatedFile struct {
	wal.File
	g *gatedFS
}

func (f gatedFile) Sync() error {
	if f.g.armed.Load() {
		f.g.blocked <- struct{}{}
		<-f.g.release
	}
	err := f.File.Sync()
	f.g.syncs.Add(1)
	return err
}

// waitLSN waits until the log has appended up to lsn (written or not).
func waitLSN(t *testing.T, q *Queue, lsn uint64, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.Stats().LastLSN < lsn {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the log stayed at LSN %d, short of %d", what, q.Stats().LastLSN, lsn)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWorkQueuesAckSharesNextLeaseFsync: under WorkQueues, as under Work,
// a handler's ack and its worker's next lease are made durable by one
// fsync. WorkQueues once waited for the ack's fsync before the worker was
// free, then for the lease's: two fsyncs in a row per item, which made a
// pool over 1,000 queues a seventh as fast as Work on a syncing disk.
func TestWorkQueuesAckSharesNextLeaseFsync(t *testing.T) {
	g := newGatedFS()
	d, _, _ := testQueue(t, Options{DisableAutoCompact: true, fs: g})
	a := mustOpenQueue(t, d, "a", QueueOptions{})
	b := mustOpenQueue(t, d, "b", QueueOptions{})
	other := mustOpenQueue(t, d, "other", QueueOptions{})
	mustPut(t, a, "x")

	running, finish, second := make(chan struct{}), make(chan struct{}), make(chan int64, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WorkQueues(ctx, []WorkQueue{{Queue: a}, {Queue: b}}, 1, func(_ context.Context, m Message) error {
			switch string(m.Body) {
			case "x":
				close(running)
				<-finish
			case "y":
				second <- g.syncs.Load()
			}
			return nil
		}, WorkOptions{DrainTimeout: -1})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WorkQueues: %v", err)
		}
	}()
	var once sync.Once
	let := func() { once.Do(func() { close(g.release) }) }
	defer let() // before the pool stops (a failure must not leave an fsync held)
	<-running
	mustPut(t, b, "y") // durable: the only worker is busy with "x"

	// Hold the committer in an fsync of another queue's put, so that what
	// is appended next waits together.
	g.armed.Store(true)
	putDone := make(chan error, 1)
	go func() { _, err := other.Put(context.Background(), []byte("z")); putDone <- err }()
	<-g.blocked
	g.armed.Store(false)
	before := d.Stats().LastLSN
	held := g.syncs.Load()

	close(finish) // "x" returns: its ack, then the lease of "y"
	waitLSN(t, d, before+2, "the ack of x and the lease of y, appended while an fsync is held")
	let()
	if err := <-putDone; err != nil {
		t.Fatalf("put: %v", err)
	}
	// The held fsync (the put's), then one for the ack and the lease: "y"
	// starts once its lease is durable.
	if got := <-second - held; got != 2 {
		t.Errorf("fsyncs from the held one to the start of y = %d, want 2 (the held one, then the ack and the lease together)", got)
	}
}
