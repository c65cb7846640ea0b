package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestMoveRefuses: a directory a queue holds, a Dir whose stream starts
// below the directory's IDs, and a directory changed since a move began
// are refused, and nothing is changed.
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
	if _, err := c.dir.MoveFrom(ctx, dir, walqjs.MoveOptions{}); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "FirstSeq") {
		t.Fatalf("move into a Dir that starts at 1: %v", err)
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
