package browse

import (
	"testing"

	"github.com/walq/walq/state"
)

// putAt applies a put of n items at time t and returns the state's next ID.
func putAt(t *testing.T, st *state.State, lsn uint64, at int64, n int) {
	t.Helper()
	items := make([]state.NewItem, n)
	for i := range items {
		items[i] = state.NewItem{Due: at}
	}
	if err := st.Apply(lsn, &state.Put{Time: at, Items: items}); err != nil {
		t.Fatal(err)
	}
}

func TestFirstAt(t *testing.T) {
	st := state.New()
	putAt(t, st, 1, 100, 3) // IDs 1-3 at 100
	putAt(t, st, 2, 200, 3) // 4-6 at 200
	putAt(t, st, 3, 300, 3) // 7-9 at 300
	// Take items 4 and 5 out (leased and acked), leaving a gap.
	for i, id := range []uint64{4, 5} {
		lsn := uint64(4 + 2*i)
		if err := st.Apply(lsn, &state.Lease{Time: 300, ID: id, LeaseEnd: 400}); err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(lsn+1, &state.Ack{Time: 300, Receipt: lsn}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		t    int64
		want uint64
	}{{0, 1}, {100, 1}, {101, 4}, {200, 4}, {250, 7}, {300, 7}, {301, 10}} {
		if got := FirstAt(st, tc.t); got != tc.want {
			t.Errorf("FirstAt(%d) = %d, want %d", tc.t, got, tc.want)
		}
	}
}

func TestEachStopsAtBudgetAndSaysWhere(t *testing.T) {
	st := state.New()
	putAt(t, st, 1, 100, 10)
	var seen []uint64
	w := Each(st, state.DefaultQueue, Filter{}, 2, 4, 100, func(it *state.Item) bool {
		seen = append(seen, it.ID)
		return true
	})
	if len(seen) != 4 || seen[0] != 3 || w.Next != 6 || w.Scanned != 4 {
		t.Fatalf("seen %v, next %d, scanned %d; want [3 4 5 6], 6, 4", seen, w.Next, w.Scanned)
	}
	w = Each(st, state.DefaultQueue, Filter{}, 6, 100, 100, func(*state.Item) bool { return true })
	if w.Next != 0 || w.Scanned != 4 {
		t.Fatalf("to the end: next %d scanned %d, want 0 and 4", w.Next, w.Scanned)
	}
	w = Each(st, state.DefaultQueue, Filter{From: 100, To: 100}, 0, 100, 100, func(*state.Item) bool {
		t.Fatal("an empty time range matched")
		return true
	})
	if w.Scanned != 0 {
		t.Fatalf("empty range scanned %d", w.Scanned)
	}
}
