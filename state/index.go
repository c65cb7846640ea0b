package state

import (
	"maps"
	"slices"
)

// idIndex finds stored items by ID. IDs are handed out consecutively, so
// instead of a hash map it keeps fixed-size chunks of pointers in ID order:
// a lookup is two array indexes, iteration comes in ID order for free, and
// an item costs 8 bytes of index instead of a map entry's 30 or so. A chunk
// is freed when its last item leaves, so a backlog drained in order gives
// its memory back; an old straggler keeps only its own chunk.
//
// The chunk slice spans at most maxDense chunks. Chunks further below its
// start (a straggler among far newer items, or a snapshot whose IDs lie
// far apart) move to the far map, so a wide span of IDs costs a map entry
// per live chunk instead of a slice entry per chunk of the span: a
// snapshot holding IDs 1 and 2^60 once made the slice 2^48 entries long.
type idIndex struct {
	base   uint64              // chunk number of chunks[0]
	chunks []*idChunk          // chunks[i] holds IDs [(base+i)*chunkIDs, (base+i+1)*chunkIDs); nil when empty
	far    map[uint64]*idChunk // chunks below base, by chunk number; every key < base
	n      int                 // items indexed
}

const (
	chunkIDs = 4096
	maxDense = 1 << 16 // chunks the slice may span: 512 KiB of pointers, 268 M IDs
)

type idChunk struct {
	items [chunkIDs]*Item
	live  int
}

func (x *idIndex) get(id uint64) *Item {
	ch := x.chunk(id / chunkIDs)
	if ch == nil {
		return nil
	}
	return ch.items[id%chunkIDs]
}

// chunk returns chunk number c, nil when it holds no item.
func (x *idIndex) chunk(c uint64) *idChunk {
	if c < x.base {
		return x.far[c]
	}
	if c-x.base >= uint64(len(x.chunks)) {
		return nil
	}
	return x.chunks[c-x.base]
}

// set indexes it under its ID; the ID must not be indexed already.
func (x *idIndex) set(it *Item) {
	c := it.ID / chunkIDs
	if len(x.chunks) == 0 && len(x.far) == 0 {
		x.base = c
	}
	var ch *idChunk
	switch {
	case c < x.base && int(x.base-c)+len(x.chunks) > maxDense:
		// Far below the slice: IDs only grow, but a snapshot may list
		// them in any order, and far apart.
		if ch = x.far[c]; ch == nil {
			ch = new(idChunk)
			if x.far == nil {
				x.far = make(map[uint64]*idChunk)
			}
			x.far[c] = ch
		}
	case c < x.base:
		grow := make([]*idChunk, x.base-c, int(x.base-c)+len(x.chunks))
		x.chunks = append(grow, x.chunks...)
		x.base = c
		for k, fc := range x.far { // keep every far key below base
			if k >= c {
				x.chunks[k-c] = fc
				delete(x.far, k)
			}
		}
	case c-x.base >= maxDense:
		// Slide by half the reach, so that a straggler under steady puts
		// costs one copy of the slice per maxDense/2 chunks, not per chunk.
		x.slide(c - maxDense/2)
	}
	if ch == nil {
		for c-x.base >= uint64(len(x.chunks)) {
			x.chunks = append(x.chunks, nil)
		}
		if ch = x.chunks[c-x.base]; ch == nil {
			ch = new(idChunk)
			x.chunks[c-x.base] = ch
		}
	}
	ch.items[it.ID%chunkIDs] = it
	ch.live++
	x.n++
}

// slide moves the slice's start up to chunk number base (> x.base), moving
// the live chunks below it to the far map.
func (x *idIndex) slide(base uint64) {
	n := min(base-x.base, uint64(len(x.chunks)))
	for i, ch := range x.chunks[:n] {
		if ch != nil {
			if x.far == nil {
				x.far = make(map[uint64]*idChunk)
			}
			x.far[x.base+uint64(i)] = ch
		}
	}
	x.chunks = append(x.chunks[:0:0], x.chunks[n:]...)
	x.base = base
}

func (x *idIndex) del(id uint64) {
	c := id / chunkIDs
	if c < x.base {
		if ch := x.far[c]; ch != nil && ch.items[id%chunkIDs] != nil {
			ch.items[id%chunkIDs] = nil
			ch.live--
			x.n--
			if ch.live == 0 {
				delete(x.far, c)
			}
		}
		return
	}
	if c-x.base >= uint64(len(x.chunks)) {
		return
	}
	i := c - x.base
	ch := x.chunks[i]
	if ch == nil || ch.items[id%chunkIDs] == nil {
		return
	}
	ch.items[id%chunkIDs] = nil
	ch.live--
	x.n--
	if ch.live > 0 {
		return
	}
	x.chunks[i] = nil
	// Drop empty chunks at the front, so the slice spans only live IDs.
	drop := 0
	for drop < len(x.chunks) && x.chunks[drop] == nil {
		drop++
	}
	if drop > 0 {
		x.chunks = append(x.chunks[:0:0], x.chunks[drop:]...)
		x.base += uint64(drop)
	}
}

func (x *idIndex) len() int { return x.n }

// eachFrom calls fn for every item with an ID at or above start in ID
// order, until fn returns false.
func (x *idIndex) eachFrom(start uint64, fn func(*Item) bool) {
	visit := func(ch *idChunk) bool {
		for _, it := range ch.items {
			if it != nil && it.ID >= start && !fn(it) {
				return false
			}
		}
		return true
	}
	for _, c := range slices.Sorted(maps.Keys(x.far)) {
		if (c+1)*chunkIDs > start && !visit(x.far[c]) {
			return
		}
	}
	first := 0
	if c := start / chunkIDs; c > x.base {
		first = int(min(c-x.base, uint64(len(x.chunks))))
	}
	for _, ch := range x.chunks[first:] {
		if ch != nil && !visit(ch) {
			return
		}
	}
}

// each calls fn for every item in ID order.
func (x *idIndex) each(fn func(*Item)) {
	for _, c := range slices.Sorted(maps.Keys(x.far)) {
		for _, it := range x.far[c].items {
			if it != nil {
				fn(it)
			}
		}
	}
	for _, ch := range x.chunks {
		if ch == nil {
			continue
		}
		for _, it := range ch.items {
			if it != nil {
				fn(it)
			}
		}
	}
}
