package state

import (
	"fmt"
	"sort"
)

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
	Items    []snapItem
	Keys     []snapKey
}

type snapItem struct {
	ID         uint64
	Body       []byte
	Key        string
	Priority   int64
	EnqueuedAt int64
	Due        int64
	Deadline   int64
	Seq        uint64
	Attempts   int32
	Deliveries int32
	Status     Status
	Receipt    uint64
	LeaseEnd   int64
	LastError  string
	EndedAt    int64
	DeadSeq    uint64
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
	items := make([]*Item, 0, len(s.items))
	size := 64
	for _, it := range s.items {
		items = append(items, it)
		size += len(it.Body) + len(it.Key) + len(it.LastError) + 48
	}
	sort.Slice(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	keys := make([]*keyEntry, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, k)
		size += len(k.Key) + 16
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })

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
		body.Items = make([]snapItem, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		si := &body.Items[i]
		d.arrayLen(16)
		si.ID, si.Body, si.Key, si.Priority = d.uint(), d.bin(), d.str(), d.int()
		si.EnqueuedAt, si.Due, si.Deadline, si.Seq = d.int(), d.int(), d.int(), d.uint()
		si.Attempts, si.Deliveries = d.int32(), d.int32()
		status := d.uint()
		if status > 255 {
			d.fail("status %d", status)
		}
		si.Status = Status(status)
		si.Receipt, si.LeaseEnd, si.LastError, si.EndedAt, si.DeadSeq = d.uint(), d.int(), d.str(), d.int(), d.uint()
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
	for i := range body.Items {
		si := &body.Items[i]
		if si.ID == 0 || si.ID >= s.nextID {
			return nil, fmt.Errorf("decode snapshot: item id %d outside 1..%d", si.ID, s.nextID-1)
		}
		if s.items[si.ID] != nil {
			return nil, fmt.Errorf("decode snapshot: item %d twice", si.ID)
		}
		it := &Item{
			ID: si.ID, Body: si.Body, Key: si.Key, Priority: si.Priority, EnqueuedAt: si.EnqueuedAt,
			Due: si.Due, Deadline: si.Deadline, Seq: si.Seq, Attempts: si.Attempts,
			Deliveries: si.Deliveries, Status: si.Status, EndedAt: si.EndedAt, LastError: si.LastError,
			heapPos: -1, deadlinePos: -1,
		}
		switch si.Status {
		case Waiting:
			s.pushWaiting(it)
		case Leased:
			if si.Receipt == 0 || si.Receipt > s.lastLSN || s.leases[si.Receipt] != nil {
				return nil, fmt.Errorf("decode snapshot: item %d has bad receipt %d", si.ID, si.Receipt)
			}
			it.Receipt, it.LeaseEnd = si.Receipt, si.LeaseEnd
			s.leases[it.Receipt] = it
			s.leaseHeap.Push(it)
		case Dead:
			it.deadSeq = si.DeadSeq
			s.deadOrder = append(s.deadOrder, deadEntry{it, si.DeadSeq})
			s.ndead++
		default:
			return nil, fmt.Errorf("decode snapshot: item %d has unknown status %d", si.ID, si.Status)
		}
		s.items[it.ID] = it
		s.bytes += int64(len(it.Body))
	}
	sort.Slice(s.deadOrder, func(i, j int) bool { return s.deadOrder[i].seq < s.deadOrder[j].seq })
	for _, sk := range body.Keys {
		if sk.Key == "" || s.keys[sk.Key] != nil {
			return nil, fmt.Errorf("decode snapshot: key %q empty or twice", sk.Key)
		}
		k := &keyEntry{Key: sk.Key, ID: sk.ID, Released: sk.Released}
		if k.Released == 0 {
			if it := s.items[k.ID]; it == nil || it.Key != k.Key {
				return nil, fmt.Errorf("decode snapshot: key %q held by item %d that is not stored", k.Key, k.ID)
			}
		} else {
			s.released = append(s.released, k)
		}
		s.keys[k.Key] = k
	}
	for _, it := range s.items {
		if it.Key != "" {
			if k := s.keys[it.Key]; k == nil || k.ID != it.ID || k.Released != 0 {
				return nil, fmt.Errorf("decode snapshot: item %d key %q not held", it.ID, it.Key)
			}
		}
	}
	sort.Slice(s.released, func(i, j int) bool { return s.released[i].Released < s.released[j].Released })
	return s, nil
}
