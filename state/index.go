package state

import (
	"maps"
	"slices"
	"sort"
)

// idIndex stores the entries of every stored item by ID. IDs are handed
// out consecutively, so instead of a hash map of pointers it keeps the
// entries themselves, by value, in chunks of consecutive IDs: a lookup is
// two array indexes, iteration comes in ID order for free, the ID costs
// nothing (it is the place), and a chunk holds no pointer, so the
// collector never scans it.
//
// A chunk is dense (an array of chunkIDs entries) while many of its IDs
// are stored, and sparse (the stored ones only, sorted) once few are left:
// a dead letter or an old straggler among drained items keeps 82 bytes,
// not its chunk's 320 KiB. A chunk is freed when its last item leaves, so
// a backlog drained in order gives its memory back.
//
// Entry pointers (get, set) stay valid until the next set, del or
// maintain: del only marks an entry free, and maintain, which the state
// calls once a record is applied, is what converts and compacts chunks.
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
	// pending lists the chunks that lost items since the last maintain:
	// those that may have become sparse, or hold many free places.
	pending []uint64
}

const (
	chunkIDs = 4096
	maxDense = 1 << 16 // chunks the slice may span: 512 KiB of pointers, 268 M IDs

	// A dense chunk becomes sparse when fewer than toSparse of its IDs
	// are stored, and a sparse one dense again above toDense (apart, so
	// that a chunk on the edge does not flip on every put and ack).
	toSparse = chunkIDs / 16
	toDense  = chunkIDs / 4
)

type idChunk struct {
	dense *[chunkIDs]entry // nil when sparse; mapped memory where the system has it (chunkmem_unix.go)
	chunkMem
	// Sparse: low IDs ascending and their entries; a removed one stays,
	// free (status 0), until maintain compacts the chunk.
	ids  []uint16
	vals []entry
	live int
}

// get returns the entry at low ID i, nil when none is stored there.
func (ch *idChunk) get(i uint16) *entry {
	if ch.dense != nil {
		if e := &ch.dense[i]; e.status != 0 {
			return e
		}
		return nil
	}
	k, ok := slices.BinarySearch(ch.ids, i)
	if !ok || ch.vals[k].status == 0 {
		return nil
	}
	return &ch.vals[k]
}

func (x *idIndex) get(id uint64) *entry {
	ch := x.chunk(id / chunkIDs)
	if ch == nil {
		return nil
	}
	return ch.get(uint16(id % chunkIDs))
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

// set stores e under id, which must not be stored already, and returns
// where it went.
func (x *idIndex) set(id uint64, e entry) *entry {
	c := id / chunkIDs
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
			// The chunk that stops being hot may hold few items: let
			// maintain make it sparse.
			if n := len(x.chunks); n >= 3 {
				if cc := x.chunks[n-3]; cc != nil && cc.dense != nil && cc.live < toSparse {
					x.pending = append(x.pending, x.base+uint64(n-3))
				}
			}
		}
		if ch = x.chunks[c-x.base]; ch == nil {
			ch = new(idChunk)
			x.chunks[c-x.base] = ch
		}
	}
	x.n++
	if ch.dense == nil && ch.live > 0 && x.hot(c) {
		ch.densify() // where puts go: lookups there are the hottest
	}
	return ch.put(uint16(id%chunkIDs), e)
}

// hot reports whether chunk number c is one of the two newest of the
// slice: where puts go, and where a queue consumed as fast as it is fed
// does all its lookups. Those stay dense however few items they hold.
func (x *idIndex) hot(c uint64) bool {
	return c >= x.base && c-x.base+2 >= uint64(len(x.chunks))
}

// put stores e at low ID i, which holds no item.
func (ch *idChunk) put(i uint16, e entry) *entry {
	ch.live++
	if ch.dense == nil && (len(ch.ids) == 0 && ch.live == 1 || ch.live > toDense) {
		// A new chunk starts dense: it is where puts go.
		ch.densify()
	}
	if ch.dense != nil {
		ch.dense[i] = e
		return &ch.dense[i]
	}
	k, ok := slices.BinarySearch(ch.ids, i)
	if !ok {
		ch.ids = slices.Insert(ch.ids, k, i)
		ch.vals = slices.Insert(ch.vals, k, e)
	} else {
		ch.vals[k] = e // a free place left by a removal
	}
	return &ch.vals[k]
}

// densify makes a sparse chunk dense.
func (ch *idChunk) densify() {
	ch.setDense()
	for k, i := range ch.ids {
		ch.dense[i] = ch.vals[k]
	}
	ch.ids, ch.vals = nil, nil
}

// sparsify makes a dense chunk sparse, or compacts a sparse one, keeping
// only its stored entries.
func (ch *idChunk) sparsify() {
	ids := make([]uint16, 0, ch.live)
	vals := make([]entry, 0, ch.live)
	if ch.dense != nil {
		for i := range ch.dense {
			if ch.dense[i].status != 0 {
				ids = append(ids, uint16(i))
				vals = append(vals, ch.dense[i])
			}
		}
	} else {
		for k, i := range ch.ids {
			if ch.vals[k].status != 0 {
				ids = append(ids, i)
				vals = append(vals, ch.vals[k])
			}
		}
	}
	ch.dropDense()
	ch.ids, ch.vals = ids, vals
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

// del removes the item id. Its entry only becomes free: the chunk is
// converted or compacted by the next maintain, or freed now when it was
// the chunk's last item.
func (x *idIndex) del(id uint64) {
	c := id / chunkIDs
	ch := x.chunk(c)
	if ch == nil {
		return
	}
	e := ch.get(uint16(id % chunkIDs))
	if e == nil {
		return
	}
	*e = entry{}
	ch.live--
	x.n--
	if ch.live > 0 {
		if x.shrinks(c, ch) {
			x.pending = append(x.pending, c)
		}
		return
	}
	ch.dropDense()
	if c < x.base {
		delete(x.far, c)
		return
	}
	i := c - x.base
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

// shrinks reports whether chunk number c, ch, should be made sparse (few
// items left, and not one of the hot chunks) or compacted (sparse, with
// more free places than items).
func (x *idIndex) shrinks(c uint64, ch *idChunk) bool {
	if ch.dense != nil {
		return ch.live < toSparse && !x.hot(c)
	}
	return ch.live < len(ch.ids)/2
}

// maintain makes the chunks that lost many items since the last call
// sparse, or compacts them: after it, entry pointers taken before are not
// valid.
func (x *idIndex) maintain() {
	for _, c := range x.pending {
		ch := x.chunk(c)
		if ch == nil {
			continue
		}
		if x.shrinks(c, ch) {
			ch.sparsify()
		}
	}
	x.pending = x.pending[:0]
	if cap(x.pending) > 1024 {
		x.pending = nil
	}
}

// release gives every chunk's memory back and empties x.
func (x *idIndex) release() {
	x.eachChunkOf(func(ch *idChunk) { ch.dropDense() })
	*x = idIndex{}
}

// eachChunkOf calls fn for every chunk, in no order.
func (x *idIndex) eachChunkOf(fn func(*idChunk)) {
	for _, ch := range x.far {
		fn(ch)
	}
	for _, ch := range x.chunks {
		if ch != nil {
			fn(ch)
		}
	}
}

// settle makes every chunk that holds few items sparse: for a state
// loaded from a snapshot, whose items can lie far apart.
func (x *idIndex) settle() {
	x.eachChunkOf(func(ch *idChunk) {
		if ch.dense != nil && ch.live < toSparse {
			ch.sparsify()
		}
	})
}

func (x *idIndex) len() int { return x.n }

// mappedBytes is how much of x is in mapped memory, outside the heap.
func (x *idIndex) mappedBytes() int64 {
	var n int64
	x.eachChunkOf(func(ch *idChunk) { n += ch.mappedBytes() })
	return n
}

// eachFrom calls fn for every item with an ID at or above start in ID
// order, until fn returns false.
func (x *idIndex) eachFrom(start uint64, fn func(id uint64, e *entry) bool) {
	for _, c := range slices.Sorted(maps.Keys(x.far)) {
		if (c+1)*chunkIDs > start && !x.eachChunk(c, x.far[c], start, fn) {
			return
		}
	}
	first := 0
	if c := start / chunkIDs; c > x.base {
		first = int(min(c-x.base, uint64(len(x.chunks))))
	}
	for i, ch := range x.chunks[first:] {
		if ch != nil && !x.eachChunk(x.base+uint64(first+i), ch, start, fn) {
			return
		}
	}
}

// eachChunk calls fn for the items of ch, chunk number c, with an ID at
// or above start, in ID order, until fn returns false (it returns false
// then).
func (x *idIndex) eachChunk(c uint64, ch *idChunk, start uint64, fn func(id uint64, e *entry) bool) bool {
	base := c * chunkIDs
	if ch.dense != nil {
		from := 0
		if start > base {
			from = int(start - base)
		}
		for i := from; i < chunkIDs; i++ {
			if e := &ch.dense[i]; e.status != 0 && !fn(base+uint64(i), e) {
				return false
			}
		}
		return true
	}
	k := 0
	if start > base {
		k = sort.Search(len(ch.ids), func(k int) bool { return base+uint64(ch.ids[k]) >= start })
	}
	for ; k < len(ch.ids); k++ {
		if e := &ch.vals[k]; e.status != 0 && !fn(base+uint64(ch.ids[k]), e) {
			return false
		}
	}
	return true
}

// each calls fn for every item in ID order.
func (x *idIndex) each(fn func(id uint64, e *entry)) {
	x.eachFrom(0, func(id uint64, e *entry) bool {
		fn(id, e)
		return true
	})
}
