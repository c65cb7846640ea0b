package state

// heap is a binary min-heap that keeps each element's position where pos
// and setPos say, so an element can be removed from the middle (a lease
// taken from a delayed item, a redrive, an ack) in O(log n). The item
// heaps hold IDs, whose entries give the order and keep the positions;
// the lease heap holds leases.
type heap[T any] struct {
	items  []T
	less   func(a, b T) bool
	pos    func(v T) int32
	setPos func(v T, i int32)
}

func (h *heap[T]) Len() int { return len(h.items) }

// init makes a heap of whatever h.items holds, in O(n).
func (h *heap[T]) init() {
	for i, v := range h.items {
		h.setPos(v, int32(i))
	}
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// Min returns the least element; ok is false when the heap is empty.
func (h *heap[T]) Min() (v T, ok bool) {
	if len(h.items) == 0 {
		return v, false
	}
	return h.items[0], true
}

func (h *heap[T]) Push(v T) {
	h.setPos(v, int32(len(h.items)))
	h.items = append(h.items, v)
	h.up(len(h.items) - 1)
}

// Remove takes v out of the heap; it must be in this heap.
func (h *heap[T]) Remove(v T) {
	i := int(h.pos(v))
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	h.setPos(v, -1)
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	h.shrink()
}

// Append adds v at the end without ordering it: for a heap whose items are
// in no order yet, which init orders later.
func (h *heap[T]) Append(v T) {
	h.setPos(v, int32(len(h.items)))
	h.items = append(h.items, v)
}

func (h *heap[T]) shrink() {
	if cap(h.items) > 1024 && len(h.items) < cap(h.items)/4 {
		h.items = append([]T(nil), h.items...)
	}
}

// Fix restores the order after v's key changed.
func (h *heap[T]) Fix(v T) {
	i := int(h.pos(v))
	if !h.down(i) {
		h.up(i)
	}
}

func (h *heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.setPos(h.items[i], int32(i))
	h.setPos(h.items[j], int32(j))
}

func (h *heap[T]) up(j int) {
	for j > 0 {
		parent := (j - 1) / 2
		if !h.less(h.items[j], h.items[parent]) {
			break
		}
		h.swap(j, parent)
		j = parent
	}
}

func (h *heap[T]) down(i0 int) bool {
	i := i0
	n := len(h.items)
	for {
		left := 2*i + 1
		if left >= n {
			break
		}
		j := left
		if right := left + 1; right < n && h.less(h.items[right], h.items[left]) {
			j = right
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
