package state

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// itemChunk is how many items a snapshot load allocates at once.
const itemChunk = 1024

// snapshotVersion is the version of the snapshot body written by
// MarshalSnapshot. Frozen: a new layout gets a new number and old bodies
// keep decoding.
const snapshotVersion = 1

type snapshotBody struct {
	Version  int
	LastLSN  uint64
	LastTime int64
	NextID   uint64
	Counters Counters
	Items    []*Item // decoded straight into items, placed by UnmarshalSnapshot
	Keys     []snapKey
}

type snapKey struct {
	Key      string
	ID       uint64
	Released int64
}

// MarshalSnapshot encodes the whole state. Items are written in ID order and
// keys in key order, so equal states give equal bytes.
//
// Layout (msgpack): [version, lastLSN, lastTime, nextID, [9 counters],
// [items...], [keys...]], each item [ID, Body, Key, Priority, EnqueuedAt,
// Due, Deadline, Seq, Attempts, Deliveries, Status, Receipt, LeaseEnd,
// LastError, EndedAt, DeadSeq] and each key [Key, ID, Released].
func (s *State) MarshalSnapshot() ([]byte, error) {
	items := make([]*Item, 0, s.items.len())
	size := 64
	s.items.each(func(it *Item) { // in ID order
		items = append(items, it)
		size += len(it.Body) + len(it.Key) + len(it.LastError) + 48
	})
	keys := make([]*keyEntry, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, k)
		size += len(k.Key) + 16
	}
	slices.SortFunc(keys, func(a, b *keyEntry) int { return strings.Compare(a.Key, b.Key) })

	b := make([]byte, 0, size)
	b = appendArrayLen(b, 7)
	b = appendUint(b, snapshotVersion)
	b = appendUint(b, s.lastLSN)
	b = appendInt(b, s.lastTime)
	b = appendUint(b, s.nextID)
	c := s.counters
	b = appendArrayLen(b, 9)
	for _, v := range []uint64{c.Put, c.Delivered, c.Acked, c.Nacked, c.Expired, c.DeadLettered, c.Discarded, c.Redriven, c.Purged} {
		b = appendUint(b, v)
	}
	b = appendArrayLen(b, len(items))
	for _, it := range items {
		b = appendArrayLen(b, 16)
		b = appendUint(b, it.ID)
		b = appendBin(b, it.Body)
		b = appendStr(b, it.Key)
		b = appendInt(b, it.Priority)
		b = appendInt(b, it.EnqueuedAt)
		b = appendInt(b, it.Due)
		b = appendInt(b, it.Deadline)
		b = appendUint(b, it.Seq)
		b = appendInt(b, int64(it.Attempts))
		b = appendInt(b, int64(it.Deliveries))
		b = appendUint(b, uint64(it.Status))
		b = appendUint(b, it.Receipt)
		b = appendInt(b, it.LeaseEnd)
		b = appendStr(b, it.LastError)
		b = appendInt(b, it.EndedAt)
		b = appendUint(b, it.deadSeq)
	}
	b = appendArrayLen(b, len(keys))
	for _, k := range keys {
		b = appendArrayLen(b, 3)
		b = appendStr(b, k.Key)
		b = appendUint(b, k.ID)
		b = appendInt(b, k.Released)
	}
	return b, nil
}

// decodeSnapshot parses MarshalSnapshot's layout.
func decodeSnapshot(data []byte) (*snapshotBody, error) {
	d := &decoder{b: data}
	d.arrayLen(7)
	body := &snapshotBody{Version: int(d.uint())}
	if d.err == nil && body.Version != snapshotVersion {
		return nil, fmt.Errorf("unknown version %d", body.Version)
	}
	body.LastLSN, body.LastTime, body.NextID = d.uint(), d.int(), d.uint()
	d.arrayLen(9)
	c := &body.Counters
	for _, p := range []*uint64{&c.Put, &c.Delivered, &c.Acked, &c.Nacked, &c.Expired, &c.DeadLettered, &c.Discarded, &c.Redriven, &c.Purged} {
		*p = d.uint()
	}
	n := d.arrayLen(-1)
	if n > 0 {
		body.Items = make([]*Item, n)
	}
	// Items and bodies are allocated in chunks rather than one by one: a
	// million-item snapshot loads with a few thousand allocations. A chunk
	// lives as long as any item in it.
	var slab []Item
	var bodies []byte
	for i := 0; i < n && d.err == nil; i++ {
		if len(slab) == 0 {
			slab = make([]Item, min(itemChunk, n-i))
		}
		it := &slab[0]
		slab = slab[1:]
		body.Items[i] = it
		d.arrayLen(16)
		it.ID, it.Body, it.Key, it.Priority = d.uint(), d.binInto(&bodies), d.str(), d.int()
		it.EnqueuedAt, it.Due, it.Deadline, it.Seq = d.int(), d.int(), d.int(), d.uint()
		it.Attempts, it.Deliveries = d.int32(), d.int32()
		status := d.uint()
		if status > 255 {
			d.fail("status %d", status)
		}
		it.Status = Status(status)
		it.Receipt, it.LeaseEnd, it.LastError, it.EndedAt, it.deadSeq = d.uint(), d.int(), d.str(), d.int(), d.uint()
		it.heapPos, it.deadlinePos = -1, -1
	}
	n = d.arrayLen(-1)
	if n > 0 {
		body.Keys = make([]snapKey, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		k := &body.Keys[i]
		d.arrayLen(3)
		k.Key, k.ID, k.Released = d.str(), d.uint(), d.int()
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return body, nil
}

// UnmarshalSnapshot rebuilds a state from MarshalSnapshot's bytes. It checks
// that the body is self-consistent (unique IDs and receipts, known statuses,
// keys that name stored items) and never panics on bad input.
func UnmarshalSnapshot(data []byte) (*State, error) {
	body, err := decodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	if body.NextID == 0 {
		// IDs start at 1: from 0, the next put would make an item whose
		// snapshot no longer decodes.
		return nil, fmt.Errorf("decode snapshot: next id 0")
	}
	s := New()
	s.lastLSN = body.LastLSN
	s.lastTime = body.LastTime
	s.nextID = body.NextID
	s.counters = body.Counters
	for _, it := range body.Items {
		if it.ID == 0 || it.ID >= s.nextID {
			return nil, fmt.Errorf("decode snapshot: item id %d outside 1..%d", it.ID, s.nextID-1)
		}
		if s.items.get(it.ID) != nil {
			return nil, fmt.Errorf("decode snapshot: item %d twice", it.ID)
		}
		switch it.Status {
		case Waiting:
			it.Receipt, it.LeaseEnd, it.deadSeq = 0, 0, 0
			s.delayed.items = append(s.delayed.items, it)
			s.maxDelayedDue = max(s.maxDelayedDue, it.Due)
			if it.Deadline != 0 {
				s.deadlines.items = append(s.deadlines.items, it)
			}
		case Leased:
			if it.Receipt == 0 || it.Receipt > s.lastLSN || s.leases[it.Receipt] != nil {
				return nil, fmt.Errorf("decode snapshot: item %d has bad receipt %d", it.ID, it.Receipt)
			}
			it.deadSeq = 0
			s.leases[it.Receipt] = it
			s.leaseHeap.items = append(s.leaseHeap.items, it)
		case Dead:
			it.Receipt, it.LeaseEnd = 0, 0
			s.deadOrder = append(s.deadOrder, deadEntry{it, it.deadSeq})
			s.ndead++
		default:
			return nil, fmt.Errorf("decode snapshot: item %d has unknown status %d", it.ID, it.Status)
		}
		s.items.set(it)
		s.bytes += int64(len(it.Body))
	}
	s.delayed.init()
	s.deadlines.init()
	s.leaseHeap.init()
	slices.SortFunc(s.deadOrder, func(a, b deadEntry) int { return cmp.Compare(a.seq, b.seq) })
	for _, sk := range body.Keys {
		if sk.Key == "" || s.keys[sk.Key] != nil {
			return nil, fmt.Errorf("decode snapshot: key %q empty or twice", sk.Key)
		}
		k := &keyEntry{Key: sk.Key, ID: sk.ID, Released: sk.Released}
		if k.Released == 0 {
			if it := s.items.get(k.ID); it == nil || it.Key != k.Key {
				return nil, fmt.Errorf("decode snapshot: key %q held by item %d that is not stored", k.Key, k.ID)
			}
		} else {
			s.released = append(s.released, k)
		}
		s.keys[k.Key] = k
	}
	for _, it := range body.Items {
		if it.Key != "" {
			if k := s.keys[it.Key]; k == nil || k.ID != it.ID || k.Released != 0 {
				return nil, fmt.Errorf("decode snapshot: item %d key %q not held", it.ID, it.Key)
			}
		}
	}
	slices.SortFunc(s.released, func(a, b *keyEntry) int { return cmp.Compare(a.Released, b.Released) })
	return s, nil
}
