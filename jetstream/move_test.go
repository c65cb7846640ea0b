package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestMoveRefuses: a directory a queue holds, a move keeping the IDs into
// a Dir whose stream starts below them, and a directory changed since a
// move began are refused, and nothing is changed.
func TestMoveRefuses(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		q.Put(context.Background(), []byte(fmt.Sprint(i)))
	}
	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()
	c, err := openQueue(s.ClientURL(), "used", "x", walqjs.Options{}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{}); err == nil || !strings.Contains(err.Error(), "held by a running queue") {
		t.Fatalf("move of a held directory: %v", err)
	}
	q.Close()
	if _, err := c.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{KeepIDs: true}); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "FirstSeq") {
		t.Fatalf("move into a Dir that starts at 1, keeping the IDs: %v", err)
	}
	d, err := walqjs.OpenDir(ctx, c.js, "fresh", walqjs.Options{FirstSeq: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := d.MoveFrom(ctx, dir, walqjs.MoveOptions{Batch: 3})
	if err != nil || !rep.Done || rep.Ready != 10 {
		t.Fatalf("move: %+v %v", rep, err)
	}
	// Changed since: a put after the move.
	q, err = walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Put(ctx, []byte("late"))
	q.Close()
	if _, err := d.MoveFrom(ctx, dir, walqjs.MoveOptions{}); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "changed since") {
		t.Fatalf("move of a changed directory: %v", err)
	}
	if err := d.RemoveMoved(ctx, dir); err == nil {
		t.Fatal("RemoveMoved of a directory changed since its move")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// TestMoveLeavesSettingsAndPauses: what a move does not carry: a queue's
// settings (its visibility here) and its pause. Times are read as walq's
// Open reads them: a directory written under a clock an hour ahead keeps
// its items' order and delays, counted from its last record.
func TestMoveLeavesSettingsAndPauses(t *testing.T) {
	dir := t.TempDir()
	clock := walq.NewManualClock(time.Now().Add(time.Hour))
	q, err := walq.Open(dir, walq.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	slow, err := q.OpenQueue("slow", walq.QueueOptions{Visibility: time.Hour, MaxAttempts: 50})
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := slow.Put(ctx, []byte("paused"))
	if err := slow.Pause(clock.Now().Add(24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	delayed, _ := q.Put(ctx, []byte("a second, an hour ahead"), walq.WithDelay(time.Second))
	q.Close()

	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()
	c, err := openQueue(s.ClientURL(), "probe", "x", walqjs.Options{}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := walqjs.OpenDir(ctx, c.js, "settings", walqjs.Options{FirstSeq: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.MoveFrom(ctx, dir, walqjs.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	sq, err := d.OpenQueue(ctx, "slow", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	if sq.Visibility() != 30*time.Second {
		t.Fatalf("visibility %v: the walq queue's hour came along", sq.Visibility())
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	m, err := sq.Get(gctx)
	cancel()
	if err != nil || m.ID != ready {
		t.Fatalf("the paused queue's item: %v %v (want it ready at once: the pause is not moved)", m.ID, err)
	}
	st, err := c.js.Stream(ctx, "WALQ_settings")
	if err != nil {
		t.Fatal(err)
	}
	sm, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("walq.settings.s._.%d", delayed))
	if err != nil {
		t.Fatalf("the delayed item's schedule: %v", err)
	}
	due, _ := strconv.ParseInt(sm.Header.Get(walqjs.HeaderDue), 10, 64)
	if in := time.Until(time.Unix(0, due)); in < 0 || in > time.Second {
		t.Fatalf("the delayed item is due in %v, want within its second of delay", in)
	}
}

// TestMoveTwoDirectoriesIntoOne: two walq directories, numbered from 1
// alike, move into one Dir and every item of both lands: ready, delayed
// and dead (before, the second directory's delayed items and dead letters
// replaced the first's, which had the same IDs). The first keeps its IDs;
// the second's move reports the offset its IDs took.
func TestMoveTwoDirectoriesIntoOne(t *testing.T) {
	ctx := context.Background()
	fill := func(tag string) (dir string, ready, delayed, dead uint64) {
		dir = t.TempDir()
		q, err := walq.Open(dir, walq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		dead, _ = q.Put(ctx, []byte(tag+" dead"))
		m, ok, err := q.TryGet()
		if err != nil || !ok || m.ID != dead {
			t.Fatalf("TryGet: %v %v %v", m.ID, ok, err)
		}
		if err := q.DeadLetter(m.Receipt, errors.New("fails")); err != nil {
			t.Fatal(err)
		}
		ready, _ = q.Put(ctx, []byte(tag+" ready"))
		delayed, _ = q.Put(ctx, []byte(tag+" delayed"), walq.WithDelay(time.Hour))
		return dir, ready, delayed, dead
	}
	dirA, readyA, delayedA, deadA := fill("a")
	dirB, readyB, delayedB, deadB := fill("b")
	if readyA != readyB || delayedA != delayedB || deadA != deadB {
		t.Fatalf("the two directories number their items apart: %d %d %d, %d %d %d", readyA, delayedA, deadA, readyB, delayedB, deadB)
	}
	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()
	c, err := openQueue(s.ClientURL(), "merged", "", walqjs.Options{FirstSeq: 1000}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// An empty directory moved first takes no IDs from the next.
	empty := t.TempDir()
	if eq, err := walq.Open(empty, walq.Options{}); err != nil {
		t.Fatal(err)
	} else {
		eq.Close()
	}
	if rep, err := c.dir.MoveFrom(ctx, empty, walqjs.MoveOptions{}); err != nil || !rep.Done || rep.Items != 0 {
		t.Fatalf("move of an empty directory: %+v %v", rep, err)
	}
	repA, err := c.dir.MoveFrom(ctx, dirA, walqjs.MoveOptions{})
	if err != nil || !repA.Done || repA.IDOffset != 0 {
		t.Fatalf("move a: %+v %v", repA, err)
	}
	repB, err := c.dir.MoveFrom(ctx, dirB, walqjs.MoveOptions{})
	if err != nil || !repB.Done || repB.IDOffset == 0 {
		t.Fatalf("move b: %+v %v (want its IDs offset)", repB, err)
	}
	if _, err := c.dir.MoveFrom(ctx, dirB, walqjs.MoveOptions{KeepIDs: true}); err == nil {
		t.Fatal("a move of b keeping its IDs, where a's are")
	}
	// A rerun of each moves nothing again.
	for _, dir := range []string{dirA, dirB} {
		if rep, err := c.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{}); err != nil || rep.Ready+rep.Delayed+rep.Dead != 0 {
			t.Fatalf("rerun of %s: %+v %v", dir, rep, err)
		}
	}
	dead, err := c.DeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]string{}
	for _, d := range dead {
		got[d.ID] = string(d.Body)
	}
	if want := map[uint64]string{deadA: "a dead", deadB + repB.IDOffset: "b dead"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead letters %v, want %v", got, want)
	}
	st, err := c.js.Stream(ctx, "WALQ_merged")
	if err != nil {
		t.Fatal(err)
	}
	for id, body := range map[uint64]string{delayedA: "a delayed", delayedB + repB.IDOffset: "b delayed"} {
		m, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("walq.merged.s._.%d", id))
		if err != nil || string(m.Data) != body {
			t.Fatalf("the schedule of delayed item %d: %v (want %q)", id, err, body)
		}
	}
	got = map[uint64]string{}
	for range 2 {
		m := get(t, c, 2*time.Second)
		got[m.ID] = string(m.Body)
		if err := c.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if want := map[uint64]string{readyA: "a ready", readyB + repB.IDOffset: "b ready"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ready items %v, want %v", got, want)
	}
}

// TestMoveLeavesQueueSettingsToTheService: MoveFrom with MoveOptions{}
// (walq-to-jetstream has no flags for queue settings) records no settings
// for a queue the Dir does not have: the service's first OpenQueue records
// its own QueueOptions, here the README's example levels -1, 0 and 1 with
// its visibility and attempts; one whose Priorities leave out a level the
// moved items have is ErrInvalid naming it, so no item is stranded. A move
// into a queue that exists keeps its settings. (Before, the move recorded
// OpenQueue's defaults and the items' levels, and the service's own
// settings were refused, two of them for good: a shorter Visibility and
// other levels.)
func TestMoveLeavesQueueSettingsToTheService(t *testing.T) {
	dir := t.TempDir()
	wq, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := wq.Put(ctx, []byte("backlog")); err != nil {
		t.Fatal(err)
	}
	if _, err := wq.Put(ctx, []byte("urgent"), walq.WithPriority(1)); err != nil {
		t.Fatal(err)
	}
	jobs, err := wq.OpenQueue("jobs", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Put(ctx, []byte("into a queue that exists")); err != nil {
		t.Fatal(err)
	}
	wq.Close()
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 3 * time.Second, MaxAttempts: 7, Priorities: []int{0, 1}})
	if _, err := q.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := q.Settings(); s.Visibility != 3*time.Second || s.MaxAttempts != 7 {
		t.Fatalf("the queue that existed holds %+v after the move", s)
	}
	if _, err := q.dir.OpenQueue(ctx, "", walqjs.QueueOptions{Priorities: []int{-1, 0}}); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "[1]") {
		t.Fatalf("OpenQueue with levels that leave out the moved items' level 1 = %v; want ErrInvalid naming it", err)
	}
	// The service starts on JetStream with its settings in code.
	want := walqjs.QueueOptions{Visibility: 10 * time.Second, MaxAttempts: 10, Priorities: []int{-1, 0, 1}}
	mq, err := q.dir.OpenQueue(ctx, "", want)
	if err != nil {
		t.Fatalf("after a move with MoveOptions{}, the service's OpenQueue(%+v) = %v", want, err)
	}
	defer mq.Close()
	if s := mq.Settings(); s.Visibility != want.Visibility || s.MaxAttempts != want.MaxAttempts || !slices.Equal(s.Priorities, want.Priorities) {
		t.Fatalf("the service's queue holds %+v, want %+v", s, want)
	}
	var got []string
	for range 2 {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := mq.Get(gctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Body))
		mq.Ack(m.Receipt)
	}
	if !slices.Equal(got, []string{"backlog", "urgent"}) {
		t.Fatalf("the moved items: %q", got)
	}
	if m := get(t, q, 2*time.Second); string(m.Body) != "into a queue that exists" {
		t.Fatalf("the queue that existed: %q", m.Body)
	}
}

// copyTree copies the directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMoveRefusesDirectoryWithoutID: a walq directory of format 1 (which
// an older walq wrote) has no directory ID, which is what a move tells
// directories apart by: MoveFrom refuses it with ErrInvalid saying to open
// it once with walq, moving nothing, and RemoveMoved refuses to remove it.
// Once walq has opened them (carrying them to format 2, each with an ID
// of its own), two copies of it move into one Dir, each under IDs of its
// own. (Before, every format-1 directory shared one progress and one
// namespace of IDs: the second moved nothing, reported Done, and
// RemoveMoved deleted it.)
func TestMoveRefusesDirectoryWithoutID(t *testing.T) {
	fixture := filepath.Join("..", "testdata", "format1")
	if _, err := os.Stat(fixture); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(t.TempDir(), "host-a"), filepath.Join(t.TempDir(), "host-b")
	for _, d := range []string{a, b} {
		copyTree(t, fixture, d)
		// A directory an older walq ran in has its LOCK file.
		if err := os.WriteFile(filepath.Join(d, "LOCK"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var items int
	info, err := walq.ReadDir(b, func(it walq.StoredItem) error { items++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != [16]byte{} || items == 0 {
		t.Fatalf("precondition: a format-1 directory with items: ID %x, %d items", info.ID, items)
	}
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	for _, d := range []string{a, b} {
		rep, err := q.dir.MoveFrom(ctx, d, walqjs.MoveOptions{})
		if !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "walq.Open") || rep.Ready+rep.Delayed+rep.Dead != 0 {
			t.Fatalf("MoveFrom(a format-1 directory) = %+v, %v; want ErrInvalid saying to open it with walq, nothing moved", rep, err)
		}
		if err := q.dir.RemoveMoved(ctx, d); err == nil {
			t.Fatal("RemoveMoved of a directory that did not move: nil")
		}
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the directory that did not move: %v", err)
		}
	}
	var reps []walqjs.MoveReport
	for _, d := range []string{a, b} {
		wq, err := walq.Open(d, walq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wq.Close()
		rep, err := q.dir.MoveFrom(ctx, d, walqjs.MoveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
	}
	moved := func(r walqjs.MoveReport) int { return r.Ready + r.Delayed + r.Dead + r.Discarded }
	if reps[0].Items == 0 || moved(reps[0]) != reps[0].Items || moved(reps[1]) != reps[1].Items || reps[0].Items != reps[1].Items ||
		reps[0].IDOffset == reps[1].IDOffset {
		t.Fatalf("two copies of a format-1 directory, opened by walq, moved: %+v and %+v; want each moved whole under IDs of its own", reps[0], reps[1])
	}
}

// TestMovedDelayedItemAtUndeclaredLevelRefused: MoveFrom with
// MoveOptions{} records no settings for the default queue, and the
// directory's one item is delayed, at priority 5: the service's OpenQueue
// with the default levels [0] is ErrInvalid naming 5, as for a ready item.
// (Before, only the ready subjects were counted: the open succeeded, and
// the schedule would fire onto walq.D.q._.p5, which no consumer reads.)
func TestMovedDelayedItemAtUndeclaredLevelRefused(t *testing.T) {
	dir := t.TempDir()
	wq, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := wq.Put(ctx, []byte("later"), walq.WithPriority(5), walq.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wq.Close()
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	rep, err := q.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{})
	if err != nil || rep.Delayed != 1 {
		t.Fatalf("move: %+v %v", rep, err)
	}
	mq, err := q.dir.OpenQueue(ctx, "", walqjs.QueueOptions{})
	if err == nil {
		defer mq.Close()
		t.Fatalf("OpenQueue(\"\", default levels [0]) after moving a delayed item of priority 5 = nil; want ErrInvalid naming [5]")
	}
	if !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "[5]") {
		t.Fatalf("OpenQueue: %v", err)
	}
	mq, err = q.dir.OpenQueue(ctx, "", walqjs.QueueOptions{Priorities: []int{0, 5}})
	if err != nil {
		t.Fatalf("OpenQueue with the level 5 declared: %v", err)
	}
	mq.Close()
}

// moveDirOf makes a walq directory holding n ready items.
func moveDirOf(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	wq, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]walq.Item, n)
	for i := range items {
		items[i] = walq.Item{Body: []byte(fmt.Sprint(i))}
	}
	if _, err := wq.PutBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	wq.Close()
	return dir
}

// TestMoveBatchOverServerLimitClamped: MoveOptions.Batch (walq-to-jetstream
// -batch) of 1000 moves 1000 ready items: a batch is its items and the
// progress, so Batch is clamped to the server's limit less one (999).
// (Before, a Batch of 1000 made batches of 1001 messages, over the
// server's atomic batch limit of 1000: the move was refused at its first
// batch, every run.)
func TestMoveBatchOverServerLimitClamped(t *testing.T) {
	dir := moveDirOf(t, 1000)
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	rep, err := q.dir.MoveFrom(context.Background(), dir, walqjs.MoveOptions{Batch: 1000})
	if err != nil || !rep.Done || rep.Ready != 1000 {
		t.Fatalf("MoveFrom(Batch: 1000) of 1000 ready items = %+v, %v; want them moved", rep, err)
	}
}

// TestMoveUnderServerMaxBatchSize: on a server whose max_batch_size is 50,
// a move with batches of 100 items moves all 120 items, in batches the
// server takes, each with its progress. (Before, every batch was refused:
// err_code 10199.)
func TestMoveUnderServerMaxBatchSize(t *testing.T) {
	s := startServerWith(t, t.TempDir(), 0, func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 50 })
	t.Cleanup(s.Shutdown)
	q, err := openQueue(s.ClientURL(), "mbs", "", walqjs.Options{}, walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var reports []walqjs.MoveReport
	rep, err := q.dir.MoveFrom(context.Background(), moveDirOf(t, 120), walqjs.MoveOptions{Batch: 100,
		Progress: func(r walqjs.MoveReport) { reports = append(reports, r) }})
	if err != nil || !rep.Done || rep.Ready != 120 {
		t.Fatalf("MoveFrom(Batch: 100) of 120 items on a server with max_batch_size 50 = %+v, %v; want them moved", rep, err)
	}
	n := 0
	for {
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		n++
		q.Ack(m.Receipt)
	}
	if n != 120 {
		t.Fatalf("%d items delivered after the move; want 120", n)
	}
}
