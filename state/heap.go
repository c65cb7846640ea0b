package state

// itemHeap is a binary min-heap of items that keeps each item's position in
// the field chosen by pos, so an item can be removed from the middle (a lease
// taken from a delayed item, a redrive, an ack) in O(log n).
type itemHeap struct {
	items []*Item
	less  func(a, b *Item) bool
	pos   func(it *Item) *int32
}

func (h *itemHeap) Len() int { return len(h.items) }

// init makes a heap of whatever h.items holds, in O(n).
func (h *itemHeap) init() {
	for i, it := range h.items {
		*h.pos(it) = int32(i)
	}
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *itemHeap) Min() *Item {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *itemHeap) Push(it *Item) {
	*h.pos(it) = int32(len(h.items))
	h.items = append(h.items, it)
	h.up(len(h.items) - 1)
}

func (h *itemHeap) Pop() *Item {
	if len(h.items) == 0 {
		return nil
	}
	it := h.items[0]
	h.Remove(it)
	return it
}

// Remove takes it out of the heap; it must be in this heap.
func (h *itemHeap) Remove(it *Item) {
	i := int(*h.pos(it))
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	*h.pos(it) = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	if cap(h.items) > 1024 && len(h.items) < cap(h.items)/4 {
		h.items = append([]*Item(nil), h.items...)
	}
}

// Fix restores the order after it's key changed.
func (h *itemHeap) Fix(it *Item) {
	i := int(*h.pos(it))
	if !h.down(i) {
		h.up(i)
	}
}

func (h *itemHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.pos(h.items[i]) = int32(i)
	*h.pos(h.items[j]) = int32(j)
}

func (h *itemHeap) up(j int) {
	for j > 0 {
		parent := (j - 1) / 2
		if !h.less(h.items[j], h.items[parent]) {
			break
		}
		h.swap(j, parent)
		j = parent
	}
}

func (h *itemHeap) down(i0 int) bool {
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
