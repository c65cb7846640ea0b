package browse

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/walq/walq/state"

	"github.com/walq/walq/internal/testrule"
)

// randomState applies a random history of puts (priorities 0-2, some
// delayed), leases, nacks with backoff, dead letters and redrives, with
// time moving forward, and returns the state and the time it ends at.
func randomState(t *testing.T, rng *rand.Rand) (*state.State, int64) {
	st := state.New()
	lsn := uint64(0)
	now := int64(1_000_000)
	apply := func(r state.Record) {
		lsn++
		if err := st.Apply(lsn, r); err != nil {
			t.Fatalf("record %d %T: %v", lsn, r, err)
		}
	}
	var open []uint64 // receipts of open leases
	for range 300 {
		now += rng.Int64N(1000)
		switch op := rng.IntN(10); {
		case op < 4:
			items := make([]state.NewItem, 1+rng.IntN(5))
			for i := range items {
				items[i] = state.NewItem{Due: now, Priority: rng.Int64N(3)}
				if rng.IntN(4) == 0 {
					items[i].Due = now + rng.Int64N(5000)
				}
			}
			apply(&state.Put{Time: now, Items: items})
		case op < 7:
			qs := st.Default()
			qs.Promote(now)
			if it := qs.NextReady(); it != nil {
				apply(&state.Lease{Time: now, ID: it.ID, LeaseEnd: now + 1_000_000})
				open = append(open, lsn)
			}
		case op < 9 && len(open) > 0:
			i := rng.IntN(len(open))
			r := open[i]
			open = slices.Delete(open, i, i+1)
			dead := rng.IntN(3) == 0
			apply(&state.End{Kind: state.TypeNack, Time: now, Receipt: r, Cause: "x", Due: now + rng.Int64N(3000), Dead: dead})
		default:
			if dl := st.Default().DeadLetters(1); len(dl) > 0 {
				apply(&state.Redrive{Time: now, IDs: []uint64{dl[0].ID}})
			}
		}
	}
	return st, now + rng.Int64N(3000)
}

// The walk's early stop never changes the head: it equals the first n
// ready items of a sort of them all, walked at once or in small steps.
func TestHeadWalkMatchesASortOfEveryReadyItem(t *testing.T) {
	seeds := uint64(100) // the long tests take 1,000
	if testrule.Long {
		seeds = 1000
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 1))
		st, now := randomState(t, rng)
		qs := st.Default()
		qs.Promote(now)
		var ready []*state.Item
		Each(st, state.DefaultQueue, Filter{State: Ready}, 0, math.MaxInt, now, func(it *state.Item) bool {
			ready = append(ready, it)
			return true
		})
		slices.SortFunc(ready, func(a, b *state.Item) int {
			if Before(a, b) {
				return -1
			}
			return 1
		})
		first := qs.NextReady()
		if (first == nil) != (len(ready) == 0) || (first != nil && first.ID != ready[0].ID) {
			t.Fatalf("seed %d: NextReady %v, the sort's first %v", seed, first, ready)
		}
		if first == nil {
			continue
		}
		for _, n := range []int{1, 3, 10, 1000} {
			want := ready[:min(n, len(ready))]
			for _, step := range []int{math.MaxInt, 7} {
				h := NewHead(n)
				var after uint64
				for {
					w, done := h.Walk(st, state.DefaultQueue, after, step, now, first.Priority, qs.Gauges().Ready)
					if done {
						break
					}
					after = w.Next
				}
				got := h.Items()
				if len(got) != len(want) {
					t.Fatalf("seed %d n %d step %d: %d items, want %d", seed, n, step, len(got), len(want))
				}
				for i := range got {
					if got[i].ID != want[i].ID {
						t.Fatalf("seed %d n %d step %d: item %d is %d, want %d", seed, n, step, i, got[i].ID, want[i].ID)
					}
				}
			}
		}
	}
}
