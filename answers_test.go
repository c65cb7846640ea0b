package walq

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// gateFS blocks the log's next write, once armed, until opened: a record
// appended then is in memory and not durable for as long as the test
// wants.
type gateFS struct {
	wal.FS
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateFS) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.entered, g.release = true, make(chan struct{}), make(chan struct{})
}

// open lets the blocked write go on; it may be called more than once.
func (g *gateFS) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

// gatedQueue is testQueue over a gateFS over a fault FS. The gate opens
// when the test ends, before the queue closes (a failing test must not
// leave Close waiting on a blocked write).
func gatedQueue(t *testing.T, opts Options) (*Queue, *gateFS, *wal.FaultFS) {
	ffs := wal.NewFaultFS(wal.OSFS(), 0)
	g := &gateFS{FS: ffs, release: make(chan struct{})}
	q, _, _ := testQueue(t, withFS(opts, g))
	t.Cleanup(g.open)
	return q, g, ffs
}

func (g *gateFS) Check(op string) error {
	if op == "write" {
		g.mu.Lock()
		armed, entered, release := g.armed, g.entered, g.release
		g.armed = false
		g.mu.Unlock()
		if armed {
			close(entered)
			<-release
		}
	}
	return g.FS.Check(op)
}

// answerOf runs call in a goroutine and returns its result once it came
// back or once it waits on the log's barrier (then it comes back later:
// the second value is false).
func answerOf(t *testing.T, q *Queue, call func() error) (chan error, bool) {
	t.Helper()
	res := make(chan error, 1)
	before := q.log.BarrierWaits()
	go func() { res <- call() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-res:
			res <- err
			return res, true
		default:
		}
		if q.log.BarrierWaits() > before {
			return res, false
		}
		runtime.Gosched()
	}
	t.Fatal("the call neither returned nor waited on the log")
	return nil, false
}

// TestNoAnswerBeforeDurable: a call that appends nothing gives no answer
// resting on a record that is not durable yet. Each case holds a record in
// the log's write, asks, then fails the write: the answer must be the
// failure, not what the lost record said (on 997a6e0 a second producer got
// ErrDuplicate at once and dropped its order, whose holder then never
// existed).
func TestNoAnswerBeforeDurable(t *testing.T) {
	ctx := context.Background()
	var exports *Queue
	runHeldCases(t, []heldCase{
		{"a key held by a put not durable",
			nil,
			func(q *Queue) error { _, err := q.Put(ctx, []byte("a"), WithKey("order-7")); return err },
			func(q *Queue) error { _, err := q.Put(ctx, []byte("b"), WithKey("order-7")); return err }},
		{"a resume not durable",
			func(t *testing.T, q *Queue) {
				if err := q.Pause(time.Time{}); err != nil {
					t.Fatal(err)
				}
			},
			func(q *Queue) error { return q.Resume() },
			func(q *Queue) error { return q.Resume() }},
		{"a purge not durable",
			func(t *testing.T, q *Queue) { deadLetter(t, q) },
			func(q *Queue) error { return q.PurgeDeadLetters() },
			func(q *Queue) error { return q.PurgeDeadLetters() }},
		{"a dead letter gone by a purge not durable",
			func(t *testing.T, q *Queue) { deadLetter(t, q) },
			func(q *Queue) error { return q.PurgeDeadLetters() },
			func(q *Queue) error { return q.Redrive(1) }},
		{"a queue whose creation is not durable",
			nil,
			func(q *Queue) error { _, err := q.OpenQueue("exports", QueueOptions{}); return err },
			func(q *Queue) error { _, err := q.OpenQueue("exports", QueueOptions{}); return err }},
		{"a queue busy with a lease not durable",
			exportsWithItem(&exports),
			func(q *Queue) error { _, err := exports.Get(ctx); return err },
			func(q *Queue) error { return exports.Delete(false) }},
		{"an item gone by a delete not durable",
			func(t *testing.T, q *Queue) {
				if _, err := q.Put(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
			},
			func(q *Queue) error { return q.DeleteItems(1) },
			func(q *Queue) error { return q.DeleteItems(1) }},
	})
}

// TestDuplicateAnswerWaitsForItsHolder: the same race with the write
// succeeding: the second Put waits for the holder, then is told
// ErrDuplicate with the holder's ID; a duplicate of a durable holder
// answers at once.
func TestDuplicateAnswerWaitsForItsHolder(t *testing.T) {
	ctx := context.Background()
	q, gate, _ := gatedQueue(t, Options{Sync: SyncAlways})
	gate.arm()
	first := make(chan uint64, 1)
	go func() {
		id, err := q.Put(ctx, []byte("a"), WithKey("k"))
		if err != nil {
			t.Error(err)
		}
		first <- id
	}()
	<-gate.entered
	var id2 uint64
	res, returned := answerOf(t, q, func() error {
		var err error
		id2, err = q.Put(ctx, []byte("b"), WithKey("k"))
		return err
	})
	if returned {
		t.Fatalf("answered %v before the holder was durable", <-res)
	}
	gate.open()
	id1 := <-first
	if err := recv(t, "the duplicate", res); !errors.Is(err, ErrDuplicate) || id2 != id1 {
		t.Fatalf("duplicate Put: %d, %v; want %d, ErrDuplicate", id2, err, id1)
	}
	waits := q.log.BarrierWaits()
	if id, err := q.Put(ctx, []byte("c"), WithKey("k")); !errors.Is(err, ErrDuplicate) || id != id1 {
		t.Fatalf("duplicate of a durable holder: %d, %v", id, err)
	}
	if q.log.BarrierWaits() != waits {
		t.Fatal("a duplicate of a durable holder waited on the log")
	}
}

// deadLetter puts an item and makes it a dead letter (MaxAttempts 1).
func deadLetter(t *testing.T, q *Queue) {
	t.Helper()
	ctx := context.Background()
	if _, err := q.Put(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	m, err := q.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Nack(m.Receipt, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if q.Stats().Dead != 1 {
		t.Fatalf("no dead letter: %+v", q.Stats())
	}
}

// heldCase is a call whose answer rests on a record another call appends.
type heldCase struct {
	name  string
	setup func(t *testing.T, q *Queue) // before the record held
	held  func(q *Queue) error         // appends the record held in the write
	ask   func(q *Queue) error         // appends nothing; its answer rests on held's record
}

// runHeldCases runs each case on a gated queue: it holds held's record in
// the log's write, asks, then fails the write. The answer must wait for
// the record and be the failure.
func runHeldCases(t *testing.T, cases []heldCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, gate, ffs := gatedQueue(t, Options{Sync: SyncAlways, MaxAttempts: 1})
			if tc.setup != nil {
				tc.setup(t, q)
			}
			gate.arm()
			heldRes := make(chan error, 1)
			go func() { heldRes <- tc.held(q) }()
			<-gate.entered
			res, returned := answerOf(t, q, func() error { return tc.ask(q) })
			if returned {
				t.Fatalf("answered %v while the record it rests on was not durable", <-res)
			}
			ffs.FailNext("write")
			gate.open()
			if err := recv(t, "the held call", heldRes); !errors.Is(err, ErrFailed) {
				t.Fatalf("the held call: %v, want ErrFailed", err)
			}
			if err := recv(t, "the answer", res); !errors.Is(err, ErrFailed) {
				t.Fatalf("the answer: %v, want ErrFailed: what it rested on was lost", err)
			}
		})
	}
}

// exportsWithItem is a heldCase setup: it opens the named queue "exports",
// puts one item into it and stores its handle in *dst.
func exportsWithItem(dst **Queue) func(t *testing.T, q *Queue) {
	return func(t *testing.T, q *Queue) {
		e, err := q.OpenQueue("exports", QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Put(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
		*dst = e
	}
}
