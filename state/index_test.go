package state

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIDIndexSparse: IDs far apart (a straggler among far newer items, a
// snapshot listing IDs in any order and spread over the whole range) are
// found, listed in order and removed, and the dense slice never spans more
// than maxDense chunks. A snapshot holding IDs 1 and 2^60 once made the
// index allocate a slice of 2^48 entries (found by FuzzUnmarshalSnapshot).
func TestIDIndexSparse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var x idIndex
		live := map[uint64]*Item{}
		for step := range 300 {
			var id uint64
			switch r.IntN(4) {
			case 0:
				id = r.Uint64() >> r.IntN(64) // anywhere
			case 1:
				id = uint64(r.IntN(1 << 20)) // low and dense
			default:
				id = 1<<40 + uint64(r.IntN(3*maxDense*chunkIDs)) // around the slice's reach
			}
			if it := live[id]; it != nil {
				if x.get(id) != it {
					t.Fatalf("round %d step %d: get(%d) lost its item", round, step, id)
				}
				x.del(id)
				delete(live, id)
				continue
			}
			it := &Item{ID: id}
			x.set(it)
			live[id] = it
			if len(x.chunks) > maxDense {
				t.Fatalf("round %d step %d: the slice spans %d chunks", round, step, len(x.chunks))
			}
			for k := range x.far {
				if k >= x.base {
					t.Fatalf("round %d step %d: far chunk %d not below base %d", round, step, k, x.base)
				}
			}
		}
		want := slices.Sorted(func(yield func(uint64) bool) {
			for id := range live {
				if !yield(id) {
					return
				}
			}
		})
		var got []uint64
		x.each(func(it *Item) { got = append(got, it.ID) })
		if !slices.Equal(got, want) || x.len() != len(want) {
			t.Fatalf("round %d: each gave %d items, want %d in ID order", round, len(got), len(want))
		}
		for id, it := range live {
			if x.get(id) != it {
				t.Fatalf("round %d: get(%d) does not find its item", round, id)
			}
		}
	}
}
