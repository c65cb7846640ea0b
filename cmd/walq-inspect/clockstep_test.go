package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
)

// TestInspectReadyAgreesWithQueueAfterClockStep: the machine's clock ran
// an hour fast while the service put an item, and has since been set
// right. The queue's time never falls behind the log's newest time, so a
// queue opened on the directory counts the item ready and delivers it;
// walq-inspect judged due times against the bare clock and reported it
// delayed for an hour (found by a hostile review). It now counts from the
// queue's time as the queue does.
func TestInspectReadyAgreesWithQueueAfterClockStep(t *testing.T) {
	dir := t.TempDir()
	fast := walq.NewManualClock(time.Now().Add(time.Hour)) // the clock an hour fast
	q, err := walq.Open(dir, walq.Options{Clock: fast})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(context.Background(), []byte("job")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	// NTP corrected the clock: inspect and the queue now read the same,
	// true, time.
	var out, errb bytes.Buffer
	if code := run([]string{"summary", dir}, &out, &errb); code != exitOK {
		t.Fatalf("summary: exit %d: %s", code, errb.String())
	}
	inspectSays := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, " ready, ") {
			inspectSays = l
		}
	}

	q2, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	st := q2.Stats()
	m, ok, err := q2.TryGet()
	if err != nil || !ok {
		t.Fatalf("the queue delivers nothing: %v %v", ok, err)
	}
	t.Logf("queue: Stats ready %d delayed %d; TryGet delivered item %d at once", st.Ready, st.Delayed, m.ID)
	if !strings.Contains(inspectSays, "1 ready, 0 delayed") {
		t.Fatalf("walq-inspect summary disagrees with the queue: %q (the queue counted ready %d, delayed %d, and delivered the item)",
			strings.TrimSpace(inspectSays), st.Ready, st.Delayed)
	}
}
