package state

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/walq/walq/internal/testrule"
)

// TestEntrySize: what the state keeps of an item without key, deadline or
// failed attempt is 80 bytes with no pointer in it (so that chunks of them
// are never scanned by the collector); with the 8 bytes of its place in a
// heap that is 88 per item, under the 96 of the design.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 80 {
		t.Fatalf("entry is %d bytes, over 80", n)
	}
	typ := reflect.TypeFor[entry]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		for ft := f.Type; ; ft = ft.Elem() {
			switch ft.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
				t.Fatalf("entry field %s is a %s: chunks of entries would be scanned", f.Name, ft.Kind())
			}
			if ft.Kind() != reflect.Array {
				break
			}
		}
		if f.Type.Kind() == reflect.Struct {
			for j := range f.Type.NumField() {
				if k := f.Type.Field(j).Type.Kind(); k == reflect.Pointer || k == reflect.Slice || k == reflect.String {
					t.Fatalf("entry field %s.%s holds a pointer", f.Name, f.Type.Field(j).Name)
				}
			}
		}
	}
}

// checkIndex compares x with live (entries by ID, told apart by seq): each
// in ID order, len and get.
func checkIndex(t *testing.T, x *idIndex, live map[uint64]uint64, where string) {
	t.Helper()
	want := slices.Sorted(func(yield func(uint64) bool) {
		for id := range live {
			if !yield(id) {
				return
			}
		}
	})
	var got []uint64
	x.each(func(id uint64, e *entry) {
		if e.seq != live[id] {
			t.Fatalf("%s: each gave item %d with seq %d, want %d", where, id, e.seq, live[id])
		}
		got = append(got, id)
	})
	if !slices.Equal(got, want) || x.len() != len(want) {
		t.Fatalf("%s: each gave %d items, want %d in ID order", where, len(got), len(want))
	}
	for id, seq := range live {
		if e := x.get(id); e == nil || e.seq != seq {
			t.Fatalf("%s: get(%d) does not find its entry", where, id)
		}
	}
}

// TestIDIndexSparse: IDs far apart (a straggler among far newer items, a
// snapshot listing IDs in any order and spread over the whole range) are
// found, listed in order and removed, and the dense slice never spans more
// than maxDense chunks. A snapshot holding IDs 1 and 2^60 once made the
// index allocate a slice of 2^48 entries (found by FuzzUnmarshalSnapshot).
func TestIDIndexSparse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rounds := 4 // 1,200 random steps; the long tests take 60,000
	if testrule.Long {
		rounds = 200
	}
	for round := range rounds {
		var x idIndex
		live := map[uint64]uint64{}
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
			if _, ok := live[id]; ok {
				x.del(id)
				delete(live, id)
				x.maintain()
				continue
			}
			x.set(id, entry{seq: uint64(step + 1), status: Waiting})
			live[id] = uint64(step + 1)
			if len(x.chunks) > maxDense {
				t.Fatalf("round %d step %d: the slice spans %d chunks", round, step, len(x.chunks))
			}
			for k := range x.far {
				if k >= x.base {
					t.Fatalf("round %d step %d: far chunk %d not below base %d", round, step, k, x.base)
				}
			}
		}
		checkIndex(t, &x, live, "round")
	}
}

// TestIDIndexChunks: a chunk goes sparse when most of its items leave and
// dense again when it fills, keeping every entry; a drained chunk is
// freed; a sparse chunk costs its items, not its span; and entries found
// before a removal stay valid until maintain.
func TestIDIndexChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var x idIndex
	live := map[uint64]uint64{}
	seq := uint64(0)
	put := func(id uint64) {
		seq++
		x.set(id, entry{seq: seq, status: Waiting})
		live[id] = seq
	}
	for id := uint64(1); id <= 3*chunkIDs; id++ {
		put(id)
	}
	// Keep one in 64 of the middle chunk: it goes sparse.
	mid := x.chunk(1)
	keep := uint64(chunkIDs + 128)
	kept := x.get(keep) // found before the removals
	for id := uint64(chunkIDs); id < 2*chunkIDs; id++ {
		if id%64 != 0 {
			x.del(id)
			delete(live, id)
		}
	}
	if mid.dense == nil {
		t.Fatalf("the chunk went sparse before maintain")
	}
	if kept.status != Waiting || kept.seq != live[keep] {
		t.Fatalf("the entry of item %d, found before the removals, changed under them", keep)
	}
	x.maintain()
	if mid.dense != nil || len(mid.ids) != chunkIDs/64 {
		t.Fatalf("chunk with %d of %d items: dense %v, %d sparse entries", mid.live, chunkIDs, mid.dense != nil, len(mid.ids))
	}
	checkIndex(t, &x, live, "after going sparse")
	// Fill it again in a random order: it goes dense.
	for _, id := range r.Perm(chunkIDs) {
		if id := uint64(chunkIDs + id); live[id] == 0 {
			put(id)
		}
	}
	if mid.dense == nil {
		t.Fatalf("a full chunk stayed sparse")
	}
	checkIndex(t, &x, live, "after filling again")
	// Drain the first chunk in order: it is freed and the slice starts later.
	for id := uint64(1); id < chunkIDs; id++ {
		x.del(id)
		delete(live, id)
	}
	x.maintain()
	if x.base != 1 {
		t.Fatalf("after draining chunk 0 the slice starts at chunk %d", x.base)
	}
	checkIndex(t, &x, live, "after draining")
	// Random removals and puts with maintain between, as records do.
	for step := range 20000 {
		id := uint64(chunkIDs + r.IntN(2*chunkIDs))
		if live[id] != 0 {
			x.del(id)
			delete(live, id)
		} else {
			put(id)
		}
		if step%7 == 0 {
			x.maintain()
		}
	}
	x.maintain()
	checkIndex(t, &x, live, "after random steps")
}

// TestIndexMemoryGivenBack: dense chunks taken outside the heap are given
// back when their chunk goes sparse or empty, and when a whole state is
// dropped (the collector's cleanup).
func TestIndexMemoryGivenBack(t *testing.T) {
	settled := func() int64 { // once the cleanups of states dropped earlier ran
		n := processMapped()
		for range 50 {
			runtime.GC()
			time.Sleep(5 * time.Millisecond) // cleanups run on their own goroutine
			m := processMapped()
			if m == n {
				break
			}
			n = m
		}
		return n
	}
	before := settled()
	var x idIndex
	for id := uint64(1); id <= 3*chunkIDs; id++ {
		x.set(id, entry{status: Waiting})
	}
	if denseMapped() && x.mappedBytes() != 4*int64(denseSize) {
		t.Fatalf("four dense chunks map %d bytes", x.mappedBytes())
	}
	for id := uint64(1); id <= 3*chunkIDs; id++ {
		x.del(id)
	}
	x.maintain()
	if x.mappedBytes() != 0 {
		t.Fatalf("%d bytes still mapped after every item left", x.mappedBytes())
	}
	func() {
		s := New()
		for id := uint64(chunkIDs); id < 3*chunkIDs; id++ {
			s.items.set(id, entry{status: Waiting})
		}
		if denseMapped() && s.MappedBytes() != 2*int64(denseSize) {
			t.Fatalf("a state of two dense chunks maps %d bytes", s.MappedBytes())
		}
	}()
	if got := settled(); got != before {
		t.Fatalf("mapped bytes %d after the state was dropped, %d before", got, before)
	}
}

// TestIndexHotChunks: the two newest chunks stay dense however few items
// they hold (a queue consumed as fast as it is fed does its lookups
// there), and a chunk left with a few stragglers goes sparse once newer
// chunks take its place, without another removal from it.
func TestIndexHotChunks(t *testing.T) {
	var x idIndex
	id := uint64(1)
	put := func(n int) {
		for range n {
			x.set(id, entry{status: Waiting})
			id++
		}
		x.maintain()
	}
	drain := func(from, to uint64, keepEvery uint64) {
		for i := from; i < to; i++ {
			if keepEvery == 0 || i%keepEvery != 0 {
				x.del(i)
			}
		}
		x.maintain()
	}
	put(chunkIDs / 2)
	drain(1, id, 0)
	put(10) // a few items in flight, in the newest chunk
	if ch := x.chunk((id - 1) / chunkIDs); ch.dense == nil {
		t.Fatalf("the newest chunk, with %d items, went sparse", ch.live)
	}
	first := id
	put(chunkIDs)                // into the next chunk
	drain(first, id, chunkIDs/8) // stragglers: 8 of its 4096
	straggling := (first + chunkIDs/8) / chunkIDs
	put(3 * chunkIDs) // newer chunks take its place
	if ch := x.chunk(straggling); ch == nil || ch.dense != nil || ch.live > 16 {
		t.Fatalf("a chunk of stragglers, no longer hot, is still dense")
	}
}
