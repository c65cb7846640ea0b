package jetstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestOpenQueueCreatedAtOnce: handles that create a queue at the same
// moment agree on one set of settings: those with the winner's open, the
// others are refused, and none rewrites the consumers.
func TestOpenQueueCreatedAtOnce(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	for round, vis := range [][]time.Duration{{time.Second, time.Second, time.Second, time.Second}, {time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}} {
		name := []string{"same", "differ"}[round]
		var wg sync.WaitGroup
		errs := make([]error, len(vis))
		got := make([]time.Duration, len(vis))
		for i, v := range vis {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := q.dir.OpenQueue(ctx, name, walqjs.QueueOptions{Visibility: v, Priorities: []int{0, 1}})
				errs[i] = err
				if err == nil {
					got[i] = h.Settings().Visibility
					h.Close()
				}
			}()
		}
		wg.Wait()
		h, err := q.dir.OpenQueue(ctx, name, walqjs.QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec := h.Settings().Visibility
		h.Close()
		opened := 0
		for i, err := range errs {
			switch {
			case err == nil:
				opened++
				if got[i] != rec || vis[i] != rec {
					t.Errorf("%s: handle %d opened with %v, has %v; the queue's is %v", name, i, vis[i], got[i], rec)
				}
			case !errors.Is(err, walq.ErrInvalid) || vis[i] == rec:
				t.Errorf("%s: handle %d (%v): %v", name, i, vis[i], err)
			}
		}
		if opened == 0 || round == 0 && opened != len(vis) {
			t.Errorf("%s: %d of %d opened", name, opened, len(vis))
		}
	}
}
