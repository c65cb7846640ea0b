package walq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReviewScaleKeyWindowGrowsAnswerDependsOnPruning: a queue's key window
// grows (SetSettings, 1s -> 1h) after a key's 1s window has ended. Whether
// a Put of that key is then a duplicate depends on whether the engine
// happened to forget the key in between, which turns on records of other
// queues: KeyHolder applies the window in force to the key's release when
// the key is still remembered ("held" again, for an hour), while a key the
// timer pruned (by the old window, once any record's time passed its end)
// is free. Two histories that differ only by a put into another queue
// answer the same Put differently, and Stats().Keys differs with them.
func TestReviewScaleKeyWindowGrowsAnswerDependsOnPruning(t *testing.T) {
	run := func(otherPut bool) (keys int, err error) {
		d, clock, _ := testQueue(t, Options{})
		a := mustOpenQueue(t, d, "a", QueueOptions{KeyWindow: time.Second})
		other := mustOpenQueue(t, d, "other", QueueOptions{})
		mustPut(t, a, "first", WithKey("k"))
		must(t, a.Ack(mustTryGet(t, a).Receipt))
		clock.Advance(2 * time.Second) // the key's 1s window has ended
		if _, held := func() (uint64, bool) {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.st.Queue(a.rt.id).KeyHolder("k", d.qt.now(), int64(time.Second))
		}(); held {
			t.Fatal("the key is held 2s into its 1s window")
		}
		if otherPut {
			mustPut(t, other, "unrelated") // a record of another queue
		}
		d.settle() // what the timer loop does on its own
		s := a.Settings()
		s.KeyWindow = time.Hour
		must(t, a.SetSettings(s))
		keys = a.Stats().Keys
		_, err = a.Put(context.Background(), []byte("second"), WithKey("k"))
		return keys, err
	}
	keysA, errA := run(false)
	keysB, errB := run(true)
	if errors.Is(errA, ErrDuplicate) != errors.Is(errB, ErrDuplicate) || keysA != keysB {
		t.Fatalf("the same Put after the window grew: without a put into another queue before it: Keys %d, Put %v; "+
			"with one: Keys %d, Put %v", keysA, errA, keysB, errB)
	}
}
