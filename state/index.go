package state

// idIndex finds stored items by ID. IDs are handed out consecutively, so
// instead of a hash map it keeps fixed-size chunks of pointers in ID order:
// a lookup is two array indexes, iteration comes in ID order for free, and
// an item costs 8 bytes of index instead of a map entry's 30 or so. A chunk
// is freed when its last item leaves, so a backlog drained in order gives
// its memory back; an old straggler keeps only its own chunk.
type idIndex struct {
	base   uint64     // chunk number of chunks[0]
	chunks []*idChunk // chunks[i] holds IDs [(base+i)*chunkIDs, (base+i+1)*chunkIDs); nil when empty
	n      int        // items indexed
}

const chunkIDs = 4096

type idChunk struct {
	items [chunkIDs]*Item
	live  int
}

func (x *idIndex) get(id uint64) *Item {
	c := id / chunkIDs
	if c < x.base || c-x.base >= uint64(len(x.chunks)) {
		return nil
	}
	ch := x.chunks[c-x.base]
	if ch == nil {
		return nil
	}
	return ch.items[id%chunkIDs]
}

// set indexes it under its ID; the ID must not be indexed already.
func (x *idIndex) set(it *Item) {
	c := it.ID / chunkIDs
	if len(x.chunks) == 0 {
		x.base = c
	}
	if c < x.base {
		// IDs only grow, but a snapshot may list them in any order.
		grow := make([]*idChunk, x.base-c, int(x.base-c)+len(x.chunks))
		x.chunks = append(grow, x.chunks...)
		x.base = c
	}
	for c-x.base >= uint64(len(x.chunks)) {
		x.chunks = append(x.chunks, nil)
	}
	ch := x.chunks[c-x.base]
	if ch == nil {
		ch = new(idChunk)
		x.chunks[c-x.base] = ch
	}
	ch.items[it.ID%chunkIDs] = it
	ch.live++
	x.n++
}

func (x *idIndex) del(id uint64) {
	c := id / chunkIDs
	if c < x.base || c-x.base >= uint64(len(x.chunks)) {
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

// each calls fn for every item in ID order.
func (x *idIndex) each(fn func(*Item)) {
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
