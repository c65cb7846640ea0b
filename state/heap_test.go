package state

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// hItem is what TestHeap keeps in its heap: a key with a tie-breaker, and
// the position the heap records.
type hItem struct {
	id, seq uint64
	due     int64
	pos     int32
}

func hLess(a, b *hItem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.id < b.id
}

// TestHeap checks heap against a sorted slice under pushes, pops,
// removals from anywhere and key changes, and in its unordered mode (a
// snapshot's items just loaded: Append keeps positions, init orders
// them). The state's own tests keep heaps
// small; this one grows them to hundreds of items, where a removal from the
// middle must sift the moved item up as well as down.
func TestHeap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := heap[*hItem]{
			less:   hLess,
			pos:    func(v *hItem) int32 { return v.pos },
			setPos: func(v *hItem, i int32) { v.pos = i },
		}
		var in []*hItem // what the heap holds, in no order
		unordered := false
		nextID := uint64(1)
		dues := rapid.Int64Range(0, 50) // few values, so that ties are common
		push := func(t *rapid.T) {
			it := &hItem{id: nextID, due: dues.Draw(t, "due"), seq: uint64(rapid.IntRange(0, 3).Draw(t, "seq")), pos: -1}
			nextID++
			if unordered {
				h.Append(it)
			} else {
				h.Push(it)
			}
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
			"scramble": func(t *rapid.T) {
				rng := rapid.Permutation(h.items).Draw(t, "order")
				h.items = rng
				for i, it := range h.items {
					it.pos = int32(i)
				}
				unordered = true
			},
			"order": func(t *rapid.T) {
				h.init()
				unordered = false
			},
			"remove min": func(t *rapid.T) {
				pick(t)
				if unordered {
					t.Skip("no order yet")
				}
				want := slices.MinFunc(in, cmpHItems)
				got, _ := h.Min()
				if got != want {
					t.Fatalf("Min() = item %d, want %d", got.id, want.id)
				}
				h.Remove(got)
				in = slices.DeleteFunc(in, func(it *hItem) bool { return it == want })
				if want.pos != -1 {
					t.Fatalf("removed item keeps position %d", want.pos)
				}
			},
			"remove": func(t *rapid.T) {
				i := pick(t)
				if unordered {
					t.Skip("no order yet")
				}
				h.Remove(in[i])
				if in[i].pos != -1 {
					t.Fatalf("removed item keeps position %d", in[i].pos)
				}
				in = slices.Delete(in, i, i+1)
			},
			"fix": func(t *rapid.T) {
				it := in[pick(t)]
				it.due = dues.Draw(t, "new due")
				if !unordered {
					h.Fix(it)
				}
			},
			"": func(t *rapid.T) {
				if h.Len() != len(in) {
					t.Fatalf("Len() = %d, want %d", h.Len(), len(in))
				}
				for i, it := range h.items {
					if int(it.pos) != i {
						t.Fatalf("item %d at %d records position %d", it.id, i, it.pos)
					}
					if !unordered && i > 0 && hLess(it, h.items[(i-1)/2]) {
						t.Fatalf("item %d at %d is less than its parent", it.id, i)
					}
				}
				if unordered {
					return
				}
				got, ok := h.Min()
				if len(in) == 0 {
					if ok {
						t.Fatalf("Min() of an empty heap gave item %d", got.id)
					}
					return
				}
				if want := slices.MinFunc(in, cmpHItems); got != want {
					t.Fatalf("Min() = item %d, want %d", got.id, want.id)
				}
			},
		})
	})
}

// cmpHItems is hLess as a three-way comparison; it is a total order, so
// the minimum is one item.
func cmpHItems(a, b *hItem) int {
	switch {
	case hLess(a, b):
		return -1
	case hLess(b, a):
		return 1
	}
	return 0
}
