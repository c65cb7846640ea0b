package state

import (
	"fmt"
	"sort"

	"github.com/vmihailenco/msgpack/v5"
)

// snapshotVersion is the version of the snapshot body written by
// MarshalSnapshot. Frozen: a new layout gets a new number and old bodies
// keep decoding.
const snapshotVersion = 1

type snapshotBody struct {
	_msgpack struct{} `msgpack:",as_array"`
	Version  int
	LastLSN  uint64
	LastTime int64
	NextID   uint64
	Counters snapCounters
	Items    []snapItem
	Keys     []snapKey
}

type snapCounters struct {
	_msgpack                                                                          struct{} `msgpack:",as_array"`
	Put, Delivered, Acked, Nacked, Expired, DeadLettered, Discarded, Redriven, Purged uint64
}

type snapItem struct {
	_msgpack   struct{} `msgpack:",as_array"`
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
	_msgpack struct{} `msgpack:",as_array"`
	Key      string
	ID       uint64
	Released int64
}

// MarshalSnapshot encodes the whole state. Items are written in ID order and
// keys in key order, so equal states give equal bytes.
func (s *State) MarshalSnapshot() ([]byte, error) {
	c := s.counters
	body := snapshotBody{
		Version:  snapshotVersion,
		LastLSN:  s.lastLSN,
		LastTime: s.lastTime,
		NextID:   s.nextID,
		Counters: snapCounters{Put: c.Put, Delivered: c.Delivered, Acked: c.Acked, Nacked: c.Nacked,
			Expired: c.Expired, DeadLettered: c.DeadLettered, Discarded: c.Discarded,
			Redriven: c.Redriven, Purged: c.Purged},
		Items: make([]snapItem, 0, len(s.items)),
		Keys:  make([]snapKey, 0, len(s.keys)),
	}
	for _, it := range s.items {
		body.Items = append(body.Items, snapItem{
			ID: it.ID, Body: it.Body, Key: it.Key, Priority: it.Priority, EnqueuedAt: it.EnqueuedAt,
			Due: it.Due, Deadline: it.Deadline, Seq: it.Seq, Attempts: it.Attempts,
			Deliveries: it.Deliveries, Status: it.Status, Receipt: it.Receipt, LeaseEnd: it.LeaseEnd,
			LastError: it.LastError, EndedAt: it.EndedAt, DeadSeq: it.deadSeq,
		})
	}
	sort.Slice(body.Items, func(i, j int) bool { return body.Items[i].ID < body.Items[j].ID })
	for _, k := range s.keys {
		body.Keys = append(body.Keys, snapKey{Key: k.Key, ID: k.ID, Released: k.Released})
	}
	sort.Slice(body.Keys, func(i, j int) bool { return body.Keys[i].Key < body.Keys[j].Key })
	return msgpack.Marshal(&body)
}

// UnmarshalSnapshot rebuilds a state from MarshalSnapshot's bytes. It checks
// that the body is self-consistent (unique IDs and receipts, known statuses,
// keys that name stored items) and never panics on bad input.
func UnmarshalSnapshot(data []byte) (*State, error) {
	var body snapshotBody
	if err := msgpack.Unmarshal(data, &body); err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	if body.Version != snapshotVersion {
		return nil, fmt.Errorf("decode snapshot: unknown version %d", body.Version)
	}
	s := New()
	s.lastLSN = body.LastLSN
	s.lastTime = body.LastTime
	s.nextID = body.NextID
	c := body.Counters
	s.counters = Counters{Put: c.Put, Delivered: c.Delivered, Acked: c.Acked, Nacked: c.Nacked,
		Expired: c.Expired, DeadLettered: c.DeadLettered, Discarded: c.Discarded,
		Redriven: c.Redriven, Purged: c.Purged}
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
