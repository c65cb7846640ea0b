package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestHalfCreatedQueueKeepsItsLevels: a creator of a queue with the
// levels -1 and 0 that stopped after its first consumer leaves that
// consumer alone, its metadata naming both levels. The next opener takes
// the recorded levels (not only the consumers it finds by name) and
// creates the missing one; before, level 0 was lost for good.
func TestHalfCreatedQueueKeepsItsLevels(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	// What the creator of "half" with Priorities {-1, 0} wrote before it
	// died: the consumer of level -1, as levelConfig makes it.
	_, err := q.js.CreateConsumer(ctx, "WALQ_diff", njs.ConsumerConfig{
		Durable:       walqjs.ConsumerName("half", -1),
		Description:   `walq queue "half", priority -1`,
		FilterSubject: "walq.diff.q.half.m1",
		AckPolicy:     njs.AckExplicitPolicy,
		AckWait:       2 * time.Second,
		MaxDeliver:    -1,
		DeliverPolicy: njs.DeliverAllPolicy,
		MaxAckPending: -1,
		MaxWaiting:    4096,
		Metadata:      map[string]string{"walq.queue": "half", "walq.max_attempts": "3", "walq.priorities": "-1,0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := q.dir.OpenQueue(ctx, "half", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if s := h.Settings(); !slices.Equal(s.Priorities, []int{-1, 0}) || s.Visibility != 2*time.Second || s.MaxAttempts != 3 {
		t.Errorf("opened with %v levels, visibility %v, max attempts %d; the queue records levels [-1 0], 2s, 3",
			s.Priorities, s.Visibility, s.MaxAttempts)
	}
	if _, err := h.Put(ctx, []byte("x"), walq.WithPriority(0)); err != nil {
		t.Errorf("put at priority 0, a recorded level: %v", err)
	}
	if _, err := q.js.Consumer(ctx, "WALQ_diff", walqjs.ConsumerName("half", 0)); err != nil {
		t.Errorf("the missing consumer of level 0 was not created: %v", err)
	}
	h2, err := q.dir.OpenQueue(ctx, "half", walqjs.QueueOptions{Priorities: []int{0}})
	if err != nil {
		t.Errorf("open with Priorities {0}, a recorded level: %v", err)
	} else {
		h2.Close()
	}
}

// TestCreatorsWithDisjointLevels: two processes that create a queue at
// the same moment with different levels ({0} and {1}) agree on one set:
// the settings record is published only if none is there, so one of them
// is refused. Before, each created its own consumer (their names differ)
// and both opened.
func TestCreatorsWithDisjointLevels(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	for round := range 6 {
		name := fmt.Sprintf("split%d", round)
		var wg sync.WaitGroup
		var hs [2]*walqjs.Queue
		var errs [2]error
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				hs[i], errs[i] = q.dir.OpenQueue(ctx, name, walqjs.QueueOptions{Priorities: []int{i}})
			})
		}
		close(start)
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			a, b := hs[0].Settings().Priorities, hs[1].Settings().Priorities
			hs[0].Close()
			hs[1].Close()
			if !slices.Equal(a, b) {
				t.Fatalf("round %d: both creators opened %q, one with the levels %v, the other with %v: one queue, two records", round, name, a, b)
			}
			continue
		}
		for i := range 2 {
			if errs[i] == nil {
				hs[i].Close()
			} else if !errors.Is(errs[i], walq.ErrInvalid) {
				t.Fatalf("round %d: creator %d: %v", round, i, errs[i])
			}
		}
	}
}

// TestConcurrentSetSettingsNeverShortens: two handles that lengthen the
// Visibility at once (one to 2s more, one to 3s more) never leave the
// queue shorter than what a SetSettings that returned nil set, nor its
// levels at different AckWaits: each change is recorded only over the
// record its writer read, and the consumers only ever follow the record
// up. Before, both could return nil with the queue left at the shorter.
func TestConcurrentSetSettingsNeverShortens(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	base := time.Second
	h0, err := q.dir.OpenQueue(ctx, "vis", walqjs.QueueOptions{Visibility: base, Priorities: []int{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer h0.Close()
	h1, err := q.dir.OpenQueue(ctx, "vis", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	ackWaits := func() []time.Duration {
		var out []time.Duration
		for _, p := range []int{0, 1, 2} {
			c, err := q.js.Consumer(ctx, "WALQ_diff", walqjs.ConsumerName("vis", p))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c.CachedInfo().Config.AckWait)
		}
		return out
	}
	for round := range 4 {
		lo, hi := base+time.Duration(2*round+1)*time.Second, base+time.Duration(2*round+2)*time.Second
		var wg sync.WaitGroup
		var errLo, errHi error
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			s := h0.Settings()
			s.Visibility = lo
			errLo = h0.SetSettings(ctx, s)
		})
		wg.Go(func() {
			<-start
			s := h1.Settings()
			s.Visibility = hi
			errHi = h1.SetSettings(ctx, s)
		})
		close(start)
		wg.Wait()
		got := ackWaits()
		if errHi == nil && slices.Min(got) < hi {
			t.Fatalf("round %d: SetSettings(%v) returned nil (and SetSettings(%v): %v), but the consumers' AckWaits are %v: the Visibility was shortened under the handle that set %v",
				round, hi, lo, errLo, got, hi)
		}
		if slices.Min(got) != slices.Max(got) {
			t.Fatalf("round %d: the levels' AckWaits disagree: %v", round, got)
		}
		base = slices.Max(got)
		// Both handles take the queue's settings as they are now.
		for _, h := range []*walqjs.Queue{h0, h1} {
			s := h.Settings()
			s.Visibility = base
			err := h.SetSettings(ctx, s)
			if err != nil && strings.Contains(err.Error(), "changed since") {
				// The handle now holds the record as it is: again.
				s = h.Settings()
				s.Visibility = base
				err = h.SetSettings(ctx, s)
			}
			if err != nil && !strings.Contains(err.Error(), "shorter") {
				t.Fatal(err)
			}
		}
	}
}

// TestSetSettingsIdiomKeepsOtherHandlesChanges: "to change one field,
// change it in what Settings returns" on a handle whose settings another
// handle changed since is refused (the record is not the one it read),
// and the handle then holds the queue's settings: the second try keeps
// the other handle's MaxAttempts. Before, it wrote back its stale copy.
func TestSetSettingsIdiomKeepsOtherHandlesChanges(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	h0, err := q.dir.OpenQueue(ctx, "idiom", walqjs.QueueOptions{Visibility: time.Second, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer h0.Close()
	h1, err := q.dir.OpenQueue(ctx, "idiom", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	s := h1.Settings()
	s.MaxAttempts = 9
	if err := h1.SetSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	s = h0.Settings()
	s.Visibility = 2 * time.Second
	if err := h0.SetSettings(ctx, s); !errors.Is(err, walq.ErrInvalid) || !strings.Contains(err.Error(), "changed since") {
		t.Fatalf("SetSettings from settings read before another handle changed them: %v, want ErrInvalid (changed since)", err)
	}
	s = h0.Settings() // now the queue's, MaxAttempts 9
	s.Visibility = 2 * time.Second
	if err := h0.SetSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	h2, err := q.dir.OpenQueue(ctx, "idiom", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if got := h2.Settings(); got.MaxAttempts != 9 || got.Visibility != 2*time.Second {
		t.Fatalf("the queue records MaxAttempts %d, Visibility %v; want 9 (set by h1) and 2s (set by h0 changing one field of what Settings returned)",
			got.MaxAttempts, got.Visibility)
	}
}
