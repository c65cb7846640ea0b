package jetstream_test

import (
	"testing"
	"time"

	walqjs "github.com/walq/walq/jetstream"
)

// A Watch that is armed holds a waiting pull on every level. A Put on the
// same handle, then a TryGet: README says TryGet sees its own Put (it
// waits a moment at a level its handle just stored at). The watch's
// waiting request, queued before the TryGet's, is sent the message; the
// TryGet took the stash before it was filled, so it finds nothing.
func TestHostile3TryGetOwnPutWithWatch(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: 5 * time.Second})
	_, stop := q.Watch()
	defer stop()
	time.Sleep(200 * time.Millisecond) // the watch's pull is at the server
	for i := 0; i < 8; i++ {
		id := put(t, q, "mine")
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("round %d: TryGet right after own Put (item %d) found nothing while a Watch is open", i, id)
		}
		if m.ID != id {
			t.Fatalf("got %d, want %d", m.ID, id)
		}
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
		// a miss rearms the watch; make one
		if _, ok, _ := q.TryGet(); ok {
			t.Fatal("extra item")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A delivery the watch kept is handed to the next TryGet however old it
// is: the stash's age is checked only when the watch is armed again
// (stashed), never in tryLevels. A pool whose workers were all busy when
// the signal came gets, at its next TryGet, a lease nearly run out.
func TestHostile3StashStaleLease(t *testing.T) {
	const vis = 2 * time.Second
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{Visibility: vis})
	ch, stop := q.Watch()
	defer stop()
	time.Sleep(200 * time.Millisecond)
	// Put from another handle's point of view: wait past the fresh-put
	// window so TryGet does not wait for it itself.
	put(t, q, "stashed")
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
		t.Fatal("no signal")
	}
	time.Sleep(1500 * time.Millisecond) // workers busy
	m, ok, err := q.TryGet()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("nothing")
	}
	left := time.Until(m.LeaseEnd)
	o := q.Settings()
	t.Logf("lease left %v of visibility %v (fence %v)", left, vis, o.Fence)
	if left < vis/2 {
		t.Fatalf("TryGet handed a lease with %v left of a %v visibility: a stale stash (kept %v)", left, vis, 1500*time.Millisecond)
	}
}

// A delivery the watch kept must go back at once when the watch stops and
// when the queue closes, not after the AckWait.
func TestHostile3StashReleasedAtStopAndClose(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	qo := walqjs.QueueOptions{Visibility: 10 * time.Second}
	q, err := openQueue(s.ClientURL(), "diff", "jobs", walqjs.Options{}, qo)
	if err != nil {
		t.Fatal(err)
	}
	other, err := openQueue(s.ClientURL(), "diff", "jobs", walqjs.Options{}, qo)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, how := range []string{"stop", "close"} {
		ch, stop := q.Watch()
		time.Sleep(200 * time.Millisecond)
		id := put(t, other, how)
		select {
		case <-ch:
		case <-time.After(3 * time.Second):
			t.Fatal("no signal")
		}
		if how == "stop" {
			stop()
		} else {
			q.Close()
		}
		m := get(t, other, 1500*time.Millisecond)
		if m.ID != id {
			t.Fatalf("%s: got %d want %d", how, m.ID, id)
		}
		other.Ack(m.Receipt)
	}
}
