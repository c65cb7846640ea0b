package state

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Freeze is a snapshot of the state being written while the state goes on:
// the state as it was when Freeze was called, encoded a piece at a time by
// Next (a version-4 body), with no second copy of the index. It costs what
// changes while it is written, not what the state holds: a record that
// changes an item of a chunk Next has not reached yet first copies that
// chunk's items (at most 4096 of them) as they were, and Next encodes the
// copy instead. Everything else it needs (queues, open leases, released
// keys) it copies when it starts; those are small next to the items (the
// released keys are pointers, 8 bytes each).
//
// Every call (Freeze, Next, Close and every change of the state) must be
// made under the one lock that guards the state; Next returns after one
// piece, so the caller can write it out with the lock released.
type Freeze struct {
	s      *State
	lsn    uint64
	time   int64
	nextID uint64 // items from here on were put since: not in it
	epoch  uint64 // keys that left their queue after this epoch were there
	n      int    // items in it
	queues []snapQueue
	leases map[uint64]lease // open leases, by item ID
	keys   []*keyEntry      // keys released, by queue in ID order, each queue's in release order

	chunks  []uint64 // chunk numbers of the index, ascending
	pos     int      // chunks[:pos] are encoded
	frozen  map[uint64]*frozenChunk
	kept    map[uint64][]keptItem // items removed from a chunk not copied, by chunk
	keyPos  int                   // keys[:keyPos] are encoded
	nkeys   int                   // keys in it, counted once the items are out
	written int                   // items encoded
	step    int                   // 0: header next; 1: items; 2: keys; 3: done
	err     error
	fp      bool // a fingerprint: no LSN, time or body place
}

// frozenChunk is the items of one chunk as they were when the Freeze
// started, copied because a record was about to change one of them.
type frozenChunk struct {
	ids    []uint64
	vals   []entry
	extras []*itemExtra // copies, by vals index; nil where none
}

// keptItem is an item as it was when the Freeze started, kept because a
// record removed it from a chunk that was not copied.
type keptItem struct {
	id    uint64
	val   entry
	extra *itemExtra
}

// ErrFreezeAborted is returned by Next after a change that a Freeze cannot
// follow: the caller starts again later. No record causes it today (a
// queue's deletion is followed by keeping what it removes); it stays for
// a caller that checks for it.
var ErrFreezeAborted = errors.New("snapshot abandoned: the state changed in a way it cannot follow")

// Freeze starts a snapshot of the state as it is now. Only one can run at
// a time. A state that holds bodies itself (see Inline) cannot be frozen.
func (s *State) Freeze() (*Freeze, error) {
	if s.frz != nil {
		return nil, errors.New("snapshot: another is being written")
	}
	if len(s.inline) > 0 {
		return nil, fmt.Errorf("snapshot: %d bodies are not in the log yet (loaded from a snapshot of version 1 or 2)", len(s.inline))
	}
	f := s.freeze()
	s.frz = f
	return f, nil
}

func (s *State) freeze() *Freeze {
	f := &Freeze{
		s: s, lsn: s.lastLSN, time: s.lastTime, nextID: s.nextID, epoch: s.epoch,
		n:      s.items.len(),
		leases: make(map[uint64]lease, len(s.leaseOf)),
		keys:   make([]*keyEntry, 0, s.releasedN),
		frozen: make(map[uint64]*frozenChunk),
		kept:   make(map[uint64][]keptItem),
	}
	for _, q := range s.Queues() {
		f.queues = append(f.queues, snapQueue{
			ID: q.id, Name: q.name, Created: q.created, Settings: q.settings,
			PausedUntil: q.pausedUntil, Counters: q.counters,
		})
		f.keys = append(f.keys, q.relKeys...) // by queue, each in release order
	}
	for id, l := range s.leaseOf {
		f.leases[id] = *l
	}
	x := &s.items
	f.chunks = slices.Sorted(func(yield func(uint64) bool) {
		for c := range x.far {
			if !yield(c) {
				return
			}
		}
	})
	for i, ch := range x.chunks {
		if ch != nil {
			f.chunks = append(f.chunks, x.base+uint64(i))
		}
	}
	return f
}

// LSN is the LSN of the last record the snapshot holds.
func (f *Freeze) LSN() uint64 { return f.lsn }

// Close ends the Freeze: the state stops copying chunks for it.
func (f *Freeze) Close() {
	if f.s.frz == f {
		f.s.frz = nil
	}
	f.frozen = nil
	f.kept = nil
}

// encoded reports whether Next has encoded chunk c already.
func (f *Freeze) encoded(c uint64) bool {
	return f.pos >= len(f.chunks) || c < f.chunks[f.pos]
}

// touch is called before a record changes item id (or may): the item's
// chunk is copied if Next has not encoded it yet.
func (f *Freeze) touch(id uint64) {
	if id >= f.nextID {
		return
	}
	c := id / chunkIDs
	if f.encoded(c) || f.frozen[c] != nil {
		return
	}
	if fc := f.copyChunk(c); fc != nil {
		f.frozen[c] = fc
	}
}

// keep is called before a record removes item id, whose entry is e, from
// the index and changes no other item of its chunk (a queue's deletion
// removes each of its items so): the item is kept as it was, unless its
// chunk is copied or encoded already. It costs what is removed, never a
// copy of the chunk, so a deletion while a snapshot is written, of a queue
// of any size, neither aborts it nor copies the index.
func (f *Freeze) keep(id uint64, e *entry) {
	if id >= f.nextID {
		return
	}
	c := id / chunkIDs
	if f.encoded(c) || f.frozen[c] != nil {
		return
	}
	f.kept[c] = append(f.kept[c], keptItem{id: id, val: *e, extra: cloneExtra(f.s.xOf(e))})
}

// copyChunk returns chunk c as it was when the Freeze started: its items
// now (a chunk no record changed since, but for removals) with the items
// kept for it put back in their places, and forgets those. Nil when it
// holds nothing.
func (f *Freeze) copyChunk(c uint64) *frozenChunk {
	fc := &frozenChunk{}
	if ch := f.s.items.chunk(c); ch != nil {
		f.s.items.eachChunk(c, ch, 0, func(id uint64, e *entry) bool {
			if id < f.nextID {
				fc.ids = append(fc.ids, id)
				fc.vals = append(fc.vals, *e)
				fc.extras = append(fc.extras, cloneExtra(f.s.xOf(e)))
			}
			return true
		})
	}
	if kept := f.kept[c]; len(kept) > 0 {
		// One merge of two ID-ordered lists (a deletion keeps its items in
		// ID order; two deletions may interleave), not an insert each.
		delete(f.kept, c)
		slices.SortFunc(kept, func(a, b keptItem) int { return cmp.Compare(a.id, b.id) })
		live := fc
		fc = &frozenChunk{
			ids:    make([]uint64, 0, len(live.ids)+len(kept)),
			vals:   make([]entry, 0, len(live.ids)+len(kept)),
			extras: make([]*itemExtra, 0, len(live.ids)+len(kept)),
		}
		i := 0
		for _, k := range kept {
			for ; i < len(live.ids) && live.ids[i] < k.id; i++ {
				fc.ids, fc.vals, fc.extras = append(fc.ids, live.ids[i]), append(fc.vals, live.vals[i]), append(fc.extras, live.extras[i])
			}
			fc.ids, fc.vals, fc.extras = append(fc.ids, k.id), append(fc.vals, k.val), append(fc.extras, k.extra)
		}
		fc.ids, fc.vals, fc.extras = append(fc.ids, live.ids[i:]...), append(fc.vals, live.vals[i:]...), append(fc.extras, live.extras[i:]...)
	}
	if len(fc.ids) == 0 {
		return nil
	}
	return fc
}

// place records, for an item in a copied chunk, where its body went.
func (f *Freeze) place(id, lsn uint64, off int64) {
	if id >= f.nextID {
		return
	}
	set := func(b *BodyRef) {
		if b.LSN == lsn && b.Off == 0 && b.Len > 0 {
			b.Off = off
		}
	}
	c := id / chunkIDs
	for k := range f.kept[c] {
		if f.kept[c][k].id == id {
			set(&f.kept[c][k].val.body)
		}
	}
	fc := f.frozen[c]
	if fc == nil {
		return
	}
	if k, ok := slices.BinarySearch(fc.ids, id); ok {
		set(&fc.vals[k].body)
	}
}

func cloneExtra(x *itemExtra) *itemExtra {
	if x == nil {
		return nil
	}
	c := *x
	c.history = slices.Clone(x.history)
	return &c
}

// keyPiece is how many released keys one Next looks at.
const keyPiece = 1 << 16

// Next appends the next piece of the snapshot to b: the header and the
// queues first, then the items of one chunk, then released keys in pieces.
// done is true once the whole snapshot is in b's earlier and this piece.
// Every body must have its place on disk by the time its chunk is encoded
// (the records the snapshot holds must be written: PlaceBody).
func (f *Freeze) Next(b []byte) (out []byte, done bool, err error) {
	if f.err != nil {
		return b, false, f.err
	}
	switch f.step {
	case 0:
		b = appendArrayLen(b, 7)
		if f.fp {
			b = appendInt(b, fingerprint)
			b = appendUint(b, 0)
			b = appendInt(b, 0)
		} else {
			b = appendUint(b, snapshotVersion4)
			b = appendUint(b, f.lsn)
			b = appendInt(b, f.time)
		}
		b = appendUint(b, f.nextID)
		b = appendArrayLen(b, len(f.queues))
		for _, q := range f.queues {
			b = appendQueue(b, q)
		}
		b = appendArrayLen(b, f.n)
		f.step = 1
		return b, false, nil
	case 1:
		for f.pos < len(f.chunks) {
			c := f.chunks[f.pos]
			f.pos++
			var err error
			fc := f.frozen[c]
			if fc == nil && len(f.kept[c]) > 0 {
				fc = f.copyChunk(c) // for this piece only
			}
			if fc != nil {
				delete(f.frozen, c)
				for k, id := range fc.ids {
					if b, err = f.appendItem(b, id, &fc.vals[k], fc.extras[k]); err != nil {
						break
					}
				}
			} else if ch := f.s.items.chunk(c); ch != nil {
				f.s.items.eachChunk(c, ch, 0, func(id uint64, e *entry) bool {
					if id < f.nextID {
						b, err = f.appendItem(b, id, e, f.s.xOf(e))
					}
					return err == nil
				})
			}
			if err != nil {
				f.err = err
				return b, false, err
			}
			if f.pos < len(f.chunks) {
				return b, false, nil
			}
		}
		if f.written != f.n {
			f.err = fmt.Errorf("snapshot: %d items encoded, %d were stored", f.written, f.n)
			return b, false, f.err
		}
		for _, k := range f.keys {
			if f.heldKey(k) {
				f.nkeys++
			}
		}
		b = appendArrayLen(b, f.nkeys)
		f.step = 2
		return b, f.nkeys == 0 && f.finish(), nil
	case 2:
		end := min(f.keyPos+keyPiece, len(f.keys))
		for _, k := range f.keys[f.keyPos:end] {
			if f.heldKey(k) {
				b = appendArrayLen(b, 4)
				b = appendUint(b, k.q.id)
				b = appendStr(b, k.Key)
				b = appendUint(b, k.ID)
				b = appendInt(b, k.Released)
				f.nkeys--
			}
		}
		f.keyPos = end
		if f.keyPos < len(f.keys) {
			return b, false, nil
		}
		if f.nkeys != 0 {
			f.err = fmt.Errorf("snapshot: the released keys changed while written")
			return b, false, f.err
		}
		return b, f.finish(), nil
	}
	return b, true, nil
}

// finish marks the Freeze done; it returns true.
func (f *Freeze) finish() bool {
	f.step = 3
	f.Close()
	return true
}

// heldKey reports whether the released key k was its queue's entry for
// its key when the Freeze started.
func (f *Freeze) heldKey(k *keyEntry) bool {
	return k.Released != 0 && (k.gone == 0 || k.gone > f.epoch)
}

// appendItem encodes item id as it was when the Freeze started: e and x
// as they are now when its chunk was not copied (no record changed it
// since), its lease from the copy.
func (f *Freeze) appendItem(b []byte, id uint64, e *entry, x *itemExtra) ([]byte, error) {
	var l *lease
	if e.status == Leased {
		c, ok := f.leases[id]
		if !ok {
			return b, fmt.Errorf("snapshot: leased item %d has no lease", id)
		}
		l = &c
	}
	it := itemOf(id, e, x, l)
	if it.Body.InLog() && it.Body.Off == 0 && !f.fp {
		return b, fmt.Errorf("snapshot: the body of item %d has no place on disk yet", id)
	}
	f.written++
	mode := snapshotVersion4
	if f.fp {
		mode = fingerprint
	}
	return appendItem(b, mode, &it, nil), nil
}
