package state

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestItemHeap checks itemHeap against a sorted slice under pushes, pops,
// removals from anywhere and key changes. The state's own tests keep heaps
// small; this one grows them to hundreds of items, where a removal from the
// middle must sift the moved item up as well as down.
func TestItemHeap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := itemHeap{less: dueLess, pos: heapPos}
		var in []*Item // what the heap holds, in no order
		nextID := uint64(1)
		dues := rapid.Int64Range(0, 50) // few values, so that ties are common
		push := func(t *rapid.T) {
			it := &Item{ID: nextID, Due: dues.Draw(t, "due"), Seq: uint64(rapid.IntRange(0, 3).Draw(t, "seq")), heapPos: -1}
			nextID++
			h.Push(it)
			in = append(in, it)
		}
		pick := func(t *rapid.T) int {
			if len(in) == 0 {
				t.Skip("empty heap")
			}
			return rapid.IntRange(0, len(in)-1).Draw(t, "index")
		}
		t.Repeat(map[string]func(*rapid.T){
			"push": push,
			"push many": func(t *rapid.T) {
				for range rapid.IntRange(1, 100).Draw(t, "n") {
					push(t)
				}
			},
			"pop": func(t *rapid.T) {
				pick(t)
				want := slices.MinFunc(in, cmpItems)
				if got := h.Pop(); got != want {
					t.Fatalf("Pop() = item %d, want %d", got.ID, want.ID)
				}
				in = slices.DeleteFunc(in, func(it *Item) bool { return it == want })
				if want.heapPos != -1 {
					t.Fatalf("popped item keeps position %d", want.heapPos)
				}
			},
			"remove": func(t *rapid.T) {
				i := pick(t)
				h.Remove(in[i])
				if in[i].heapPos != -1 {
					t.Fatalf("removed item keeps position %d", in[i].heapPos)
				}
				in = slices.Delete(in, i, i+1)
			},
			"fix": func(t *rapid.T) {
				it := in[pick(t)]
				it.Due = dues.Draw(t, "new due")
				h.Fix(it)
			},
			"": func(t *rapid.T) {
				if h.Len() != len(in) {
					t.Fatalf("Len() = %d, want %d", h.Len(), len(in))
				}
				for i, it := range h.items {
					if int(it.heapPos) != i {
						t.Fatalf("item %d at %d records position %d", it.ID, i, it.heapPos)
					}
					if i > 0 && dueLess(it, h.items[(i-1)/2]) {
						t.Fatalf("item %d at %d is less than its parent", it.ID, i)
					}
				}
				if len(in) == 0 {
					if h.Min() != nil {
						t.Fatalf("Min() of an empty heap is not nil")
					}
					return
				}
				if got, want := h.Min(), slices.MinFunc(in, cmpItems); got != want {
					t.Fatalf("Min() = item %d, want %d", got.ID, want.ID)
				}
			},
		})
	})
}

// cmpItems is dueLess as a three-way comparison; it is a total order, so the
// minimum is one item.
func cmpItems(a, b *Item) int {
	switch {
	case dueLess(a, b):
		return -1
	case dueLess(b, a):
		return 1
	}
	return 0
}
