package state

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Snapshot body versions. Frozen: a new layout gets a new number, and old
// bodies keep decoding. Version 1 holds one queue (the only queue a
// directory had); version 2, written since named queues, holds every queue
// of the directory and each item's attempt history; version 3, written
// since bodies stay on disk, holds where each body is instead of the body.
const (
	snapshotVersion1 = 1
	snapshotVersion2 = 2
	snapshotVersion3 = 3
	snapshotVersion4 = 4

	// CurrentSnapshotVersion is the version MarshalSnapshot writes.
	CurrentSnapshotVersion = snapshotVersion4
)

// SnapshotVersion returns the version of a snapshot body (0 when its
// first field cannot be read), so that a reader can check it against the
// section that holds it.
func SnapshotVersion(data []byte) int {
	d := &decoder{b: data}
	d.arrayLen(-1)
	v := d.uint()
	if d.err != nil {
		return 0
	}
	return int(v)
}

type snapshotBody struct {
	Version  int
	LastLSN  uint64
	LastTime int64
	NextID   uint64
	Queues   []snapQueue
	Inline   map[uint64][]byte // the bodies of a version 1 or 2 body (only non-empty ones)
}

type snapQueue struct {
	ID          uint64
	Name        string
	Created     int64
	Settings    Settings
	PausedUntil int64
	Counters    Counters
}

type snapKey struct {
	Queue    uint64
	Key      string
	ID       uint64
	Released int64
}

// MarshalSnapshot encodes the whole state as a version-4 body, in one
// piece: what a Freeze writes in pieces. Queues are written in ID order,
// items in ID order and released keys by queue, in ID order, and each
// queue's in release order, so equal states give equal bytes (a reader
// takes them in any order). No body is in it: each item says where its body is in
// the log. A state that still holds bodies of an older snapshot itself
// (see Inline) cannot be written.
//
// Layout (msgpack): [4, lastLSN, lastTime, nextID, [queues...], [items...],
// [released keys...]]; each queue [ID, Name, Created, [Visibility,
// MaxAttempts, KeyWindow, MaxItems, MaxBytes, MaxInFlight], PausedUntil,
// [11 counters]]; each item [ID, Queue, [BodyLSN, BodyOff, BodyLen,
// BodySum], Key, Priority, EnqueuedAt, Due, Deadline, Seq, Attempts,
// Deliveries, Status, Receipt, LeaseEnd, LastError, EndedAt, DeadSeq,
// [attempts...]] with each attempt [Start, End, How, Error]; each released
// key [Queue, Key, ID, Released]. A stored item's key is held by it: it is
// not listed again. (Version 3 is the same with every key, held or
// released, in the last list, in (queue, key) order; version 2 is version
// 3 with the body's bytes, as bin, in the place of the body's reference.)
func (s *State) MarshalSnapshot() ([]byte, error) {
	if len(s.inline) > 0 {
		return nil, fmt.Errorf("snapshot: %d bodies are not in the log yet (loaded from a snapshot of version 1 or 2)", len(s.inline))
	}
	return s.freeze().all(nil)
}

// all encodes the whole of f at once.
func (f *Freeze) all(b []byte) ([]byte, error) {
	for {
		var done bool
		var err error
		if b, done, err = f.Next(b); err != nil || done {
			return b, err
		}
	}
}

// MarshalSnapshotInline encodes a state that holds every body itself (see
// KeepBodies) as a version-2 body, the last version that held bodies: for
// carrying a directory of format 1 forward, whose log says nothing of
// where its bodies lie. Open then copies the bodies into the log.
func (s *State) MarshalSnapshotInline() ([]byte, error) {
	var bad uint64
	s.EachBody(0, func(id uint64, b BodyRef) bool {
		if b.InLog() {
			bad = id
		}
		return bad == 0
	})
	if bad != 0 {
		return nil, fmt.Errorf("snapshot: the body of item %d is in the log, not in the state", bad)
	}
	return s.marshal()
}

// Fingerprint is the version-4 encoding with each body's place (its
// record and offset) left out: equal for states that hold the same items
// with the same bodies (by length and CRC), wherever their bodies lie, as
// before and after a compaction copied them forward (and with the LSN and
// time of the last record left out too: copying bodies forward takes
// records). It is for comparing states, not for reading back.
func (s *State) Fingerprint() []byte {
	f := s.freeze()
	f.fp = true
	b, _ := f.all(nil)
	return b
}

// fingerprint is the marshal "version" of Fingerprint.
const fingerprint = -1

// marshal encodes the state as a version-2 body (bodies inline, keys held
// and released together in (queue, key) order).
func (s *State) marshal() ([]byte, error) {
	queues := s.Queues()
	size := 64
	s.items.each(func(id uint64, e *entry) {
		size += 80 + len(s.inline[id])
		if x := s.xOf(e); x != nil {
			size += len(x.key) + len(x.lastError) + 24*len(x.history)
			for _, a := range x.history {
				size += len(a.Error)
			}
		}
	})
	var keys []*keyEntry
	for _, q := range queues {
		n := len(keys)
		for _, k := range q.keys {
			keys = append(keys, k)
			size += len(k.Key) + 24
		}
		slices.SortFunc(keys[n:], func(a, b *keyEntry) int { return strings.Compare(a.Key, b.Key) })
	}
	b := make([]byte, 0, size)
	b = appendArrayLen(b, 7)
	b = appendUint(b, snapshotVersion2)
	b = appendUint(b, s.lastLSN)
	b = appendInt(b, s.lastTime)
	b = appendUint(b, s.nextID)
	b = appendArrayLen(b, len(queues))
	for _, q := range queues {
		b = appendQueue(b, snapQueue{
			ID: q.id, Name: q.name, Created: q.created, Settings: q.settings,
			PausedUntil: q.pausedUntil, Counters: q.counters,
		})
	}
	b = appendArrayLen(b, s.items.len())
	s.items.each(func(id uint64, e *entry) {
		it := s.view(id, e)
		b = appendItem(b, snapshotVersion2, &it, s.inline[id])
	})
	b = appendArrayLen(b, len(keys))
	for _, k := range keys {
		b = appendArrayLen(b, 4)
		b = appendUint(b, k.q.id)
		b = appendStr(b, k.Key)
		b = appendUint(b, k.ID)
		b = appendInt(b, k.Released)
	}
	return b, nil
}

func appendQueue(b []byte, q snapQueue) []byte {
	b = appendArrayLen(b, 6)
	b = appendUint(b, q.ID)
	b = appendStr(b, q.Name)
	b = appendInt(b, q.Created)
	b = appendSettings(b, q.Settings)
	b = appendInt(b, q.PausedUntil)
	c := q.Counters
	b = appendArrayLen(b, 11)
	for _, v := range []uint64{c.Put, c.Delivered, c.Acked, c.Nacked, c.Expired, c.DeadLettered, c.Discarded, c.Redriven, c.Purged, c.MovedIn, c.MovedOut} {
		b = appendUint(b, v)
	}
	return b
}

// appendItem encodes it in the layout of version (2: with body, the bytes
// of the body; fingerprint: the body's length and CRC only).
func appendItem(b []byte, version int, it *Item, body []byte) []byte {
	b = appendArrayLen(b, 18)
	b = appendUint(b, it.ID)
	b = appendUint(b, it.Queue)
	switch version {
	case snapshotVersion2:
		b = appendBin(b, body)
	case fingerprint:
		b = appendArrayLen(b, 2)
		b = appendUint(b, uint64(it.Body.Len))
		b = appendUint(b, uint64(it.Body.Sum))
	default:
		b = appendArrayLen(b, 4)
		b = appendUint(b, it.Body.LSN)
		b = appendInt(b, it.Body.Off)
		b = appendUint(b, uint64(it.Body.Len))
		b = appendUint(b, uint64(it.Body.Sum))
	}
	b = appendStr(b, it.Key())
	b = appendInt(b, it.Priority)
	b = appendInt(b, it.EnqueuedAt)
	b = appendInt(b, it.Due)
	b = appendInt(b, it.Deadline())
	b = appendUint(b, it.Seq)
	b = appendInt(b, int64(it.Attempts))
	b = appendInt(b, int64(it.Deliveries))
	b = appendUint(b, uint64(it.Status))
	b = appendUint(b, it.Receipt)
	b = appendInt(b, it.LeaseEnd)
	b = appendStr(b, it.LastError())
	b = appendInt(b, it.EndedAt())
	b = appendUint(b, it.deadSeq())
	b = appendArrayLen(b, len(it.History()))
	for _, a := range it.History() {
		b = appendArrayLen(b, 4)
		b = appendInt(b, a.Start)
		b = appendInt(b, a.End)
		b = appendUint(b, uint64(a.How))
		b = appendStr(b, a.Error)
	}
	return b
}

// decodeHeader parses what comes before the items, in either version's
// layout (version 1: [1, lastLSN, lastTime, nextID, [9 counters], [items
// of 16 fields], [keys of 3]], all of the default queue).
func decodeHeader(d *decoder) (*snapshotBody, error) {
	d.arrayLen(7)
	body := &snapshotBody{Version: int(d.uint())}
	v := body.Version
	if d.err == nil && (v < snapshotVersion1 || v > snapshotVersion4) {
		return nil, fmt.Errorf("unknown version %d", v)
	}
	body.LastLSN, body.LastTime, body.NextID = d.uint(), d.int(), d.uint()
	if v == snapshotVersion1 {
		q := snapQueue{ID: DefaultQueue}
		d.arrayLen(9)
		c := &q.Counters
		for _, p := range []*uint64{&c.Put, &c.Delivered, &c.Acked, &c.Nacked, &c.Expired, &c.DeadLettered, &c.Discarded, &c.Redriven, &c.Purged} {
			*p = d.uint()
		}
		body.Queues = []snapQueue{q}
	} else {
		n := d.arrayLen(-1)
		for i := 0; i < n && d.err == nil; i++ {
			var q snapQueue
			d.arrayLen(6)
			q.ID, q.Name, q.Created, q.Settings, q.PausedUntil = d.uint(), d.str(), d.int(), d.settings(), d.int()
			d.arrayLen(11)
			c := &q.Counters
			for _, p := range []*uint64{&c.Put, &c.Delivered, &c.Acked, &c.Nacked, &c.Expired, &c.DeadLettered, &c.Discarded, &c.Redriven, &c.Purged, &c.MovedIn, &c.MovedOut} {
				*p = d.uint()
			}
			body.Queues = append(body.Queues, q)
		}
	}
	return body, d.err
}

// decodeItem parses one item into it and x (both reset first); the body
// of a version 1 or 2 item goes to body.Inline.
func decodeItem(d *decoder, body *snapshotBody, it *Item, x *itemExtra) {
	*it, *x = Item{}, itemExtra{}
	v := body.Version
	if v == snapshotVersion1 {
		d.arrayLen(16)
		it.ID = d.uint()
	} else {
		d.arrayLen(18)
		it.ID, it.Queue = d.uint(), d.uint()
	}
	if v >= snapshotVersion3 {
		d.arrayLen(4)
		it.Body.LSN, it.Body.Off = d.uint(), d.int()
		n, sum := d.uint(), d.uint()
		if n > math.MaxUint32 || sum > math.MaxUint32 {
			d.fail("item %d: body length %d or crc %d out of range", it.ID, n, sum)
		}
		it.Body.Len, it.Body.Sum = uint32(n), uint32(sum)
		switch {
		case d.err != nil:
		case it.Body.Len == 0:
			if it.Body != (BodyRef{}) {
				d.fail("item %d: an empty body with a place %+v", it.ID, it.Body)
			}
		case it.Body.LSN == 0 || it.Body.LSN > body.LastLSN:
			d.fail("item %d: body in record %d, outside 1..%d", it.ID, it.Body.LSN, body.LastLSN)
		case it.Body.Off <= 0:
			d.fail("item %d: body at offset %d", it.ID, it.Body.Off)
		}
	} else {
		// The body itself: kept by the state until it is relocated
		// into the log.
		if b := d.bin(); len(b) > 0 {
			it.Body = BodyRef{Len: uint32(len(b)), Sum: BodySum(b)}
			if body.Inline == nil {
				body.Inline = make(map[uint64][]byte)
			}
			body.Inline[it.ID] = b
		}
	}
	x.key, it.Priority = d.str(), d.int()
	it.EnqueuedAt, it.Due, x.deadline, it.Seq = d.int(), d.int(), d.int(), d.uint()
	it.Attempts, it.Deliveries = d.int32(), d.int32()
	status := d.uint()
	if status > 255 {
		d.fail("status %d", status)
	}
	it.Status = Status(status)
	it.Receipt, it.LeaseEnd, x.lastError, x.endedAt, x.deadSeq = d.uint(), d.int(), d.str(), d.int(), d.uint()
	if v >= snapshotVersion2 {
		h := d.arrayLen(-1)
		if h > HistoryLen {
			d.fail("item %d has %d attempts in its history, at most %d", it.ID, h, HistoryLen)
		}
		for j := 0; j < h && d.err == nil; j++ {
			var a Attempt
			d.arrayLen(4)
			a.Start, a.End = d.int(), d.int()
			how := d.uint()
			a.Error = d.str()
			switch {
			case how != uint64(TypeNack) && how != uint64(TypeExpire) && how != uint64(TypeDeadLetter):
				d.fail("item %d: attempt ended by record type %d", it.ID, how)
			case len(a.Error) > MaxAttemptError:
				d.fail("item %d: attempt error of %d bytes, at most %d", it.ID, len(a.Error), MaxAttemptError)
			}
			a.How = byte(how)
			if x.history == nil {
				x.history = make([]Attempt, 0, h)
			}
			x.history = append(x.history, a)
		}
	}
	x.deadlinePos = -1
}

// UnmarshalSnapshot rebuilds a state from the bytes of MarshalSnapshot, of
// this version or an earlier one. It checks that the body is
// self-consistent (unique queues with valid names, unique IDs and receipts,
// known statuses, items and keys of queues that exist, keys that name
// stored items) and never panics on bad input. Items go into the state as
// they are decoded: the load holds no second copy of them.
func UnmarshalSnapshot(data []byte) (*State, error) {
	s, err := unmarshalSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	return s, nil
}

// ReadSnapshot is UnmarshalSnapshot for a body of size bytes read from r
// a piece at a time: a large state is never in memory twice, once as
// bytes and once decoded. It returns the body's version too.
func ReadSnapshot(r io.Reader, size int64) (*State, int, error) {
	d := &decoder{r: r, size: size}
	s, err := unmarshalFrom(d)
	if err != nil {
		return nil, 0, fmt.Errorf("decode snapshot: %w", err)
	}
	return s, d.version, nil
}

func unmarshalSnapshot(data []byte) (*State, error) {
	return unmarshalFrom(&decoder{b: data})
}

func unmarshalFrom(d *decoder) (*State, error) {
	body, err := decodeHeader(d)
	if err != nil {
		return nil, err
	}
	d.version = body.Version
	if body.NextID == 0 {
		// IDs start at 1: from 0, the next put would make an item whose
		// snapshot no longer decodes.
		return nil, fmt.Errorf("next id 0")
	}
	s := New()
	s.lastLSN = body.LastLSN
	s.lastTime = body.LastTime
	s.nextID = body.NextID
	for i, sq := range body.Queues {
		switch {
		case i == 0 && sq.ID != DefaultQueue:
			return nil, fmt.Errorf("first queue is %d, not the default queue", sq.ID)
		case i == 0 && (sq.Name != "" || sq.Created != 0):
			return nil, fmt.Errorf("the default queue has a name %q or a creation time", sq.Name)
		case i > 0 && sq.ID <= body.Queues[i-1].ID:
			return nil, fmt.Errorf("queue %d after queue %d", sq.ID, body.Queues[i-1].ID)
		case sq.ID > s.lastLSN:
			return nil, fmt.Errorf("queue %d made after the snapshot's LSN %d", sq.ID, s.lastLSN)
		case sq.PausedUntil < 0:
			return nil, fmt.Errorf("queue %d paused until %d", sq.ID, sq.PausedUntil)
		}
		q := s.Default()
		if i > 0 {
			if err := CheckQueueName(sq.Name); err != nil {
				return nil, fmt.Errorf("queue %d: %v", sq.ID, err)
			}
			if s.names[sq.Name] != nil {
				return nil, fmt.Errorf("queue name %q twice", sq.Name)
			}
			if err := checkSettings(sq.Settings); err != nil {
				return nil, fmt.Errorf("queue %d: %v", sq.ID, err)
			}
			q = s.newQueueState(sq.ID, sq.Name, sq.Created, sq.Settings)
			s.queues[q.id] = q
			s.names[q.name] = q
		} else {
			q.settings = sq.Settings
		}
		q.pausedUntil = sq.PausedUntil
		q.counters = sq.Counters
	}
	if len(body.Queues) == 0 {
		return nil, fmt.Errorf("no default queue")
	}
	n := d.arrayLen(-1)
	if len(s.queues) == 1 && n < 1<<30 {
		// One queue (the usual case): its items are all in it.
		s.Default().delayed.items = make([]uint64, 0, n)
	}
	var it Item
	var x itemExtra
	var keyed []uint64 // items that hold a key, checked against the keys
	for i := 0; i < n && d.err == nil; i++ {
		decodeItem(d, body, &it, &x)
		if d.err != nil {
			break
		}
		if err := s.load(&it, &x); err != nil {
			return nil, err
		}
		switch {
		case x.key == "":
		case body.Version == snapshotVersion4:
			// Its key is held by it, not listed again.
			q := s.queues[it.Queue]
			if k := q.keys[x.key]; k != nil {
				return nil, fmt.Errorf("key %q of item %d held by item %d too", x.key, it.ID, k.ID)
			}
			q.keys[x.key] = &keyEntry{Key: x.key, ID: it.ID, q: q}
		default:
			keyed = append(keyed, it.ID)
		}
	}
	s.inline = body.Inline
	n = d.arrayLen(-1)
	for i := 0; i < n && d.err == nil; i++ {
		var sk snapKey
		if body.Version == snapshotVersion1 {
			d.arrayLen(3)
		} else {
			d.arrayLen(4)
			sk.Queue = d.uint()
		}
		sk.Key, sk.ID, sk.Released = d.str(), d.uint(), d.int()
		if d.err != nil {
			break
		}
		q := s.queues[sk.Queue]
		if q == nil {
			return nil, fmt.Errorf("key %q of queue %d, which is not in the snapshot", sk.Key, sk.Queue)
		}
		if sk.Key == "" || q.keys[sk.Key] != nil {
			return nil, fmt.Errorf("key %q empty or twice in queue %d", sk.Key, sk.Queue)
		}
		k := &keyEntry{Key: sk.Key, ID: sk.ID, Released: sk.Released, q: q}
		if k.Released == 0 && body.Version == snapshotVersion4 {
			return nil, fmt.Errorf("key %q of item %d listed as held: version 4 lists released keys only", k.Key, k.ID)
		}
		if k.Released == 0 {
			if e := s.items.get(k.ID); e == nil || s.key(e) != k.Key || e.queue != q.id {
				return nil, fmt.Errorf("key %q held by item %d that is not stored in queue %d", k.Key, k.ID, q.id)
			}
		} else {
			q.relKeys = append(q.relKeys, k)
			s.releasedN++
		}
		q.keys[k.Key] = k
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	for _, id := range keyed {
		e := s.items.get(id)
		if k := s.queues[e.queue].keys[s.key(e)]; k == nil || k.ID != id || k.Released != 0 {
			return nil, fmt.Errorf("item %d key %q not held", id, s.key(e))
		}
	}
	s.items.settle()
	s.deadlines.init()
	s.leaseHeap.init()
	for _, q := range s.queues {
		q.unordered = true // ordered when first needed: often never (all are due)
		slices.SortFunc(q.deadOrder, func(a, b deadEntry) int { return comparePlaces(a.place(), b.place()) })
	}
	for _, q := range s.queues {
		if len(q.relKeys) > 0 {
			slices.SortStableFunc(q.relKeys, func(a, b *keyEntry) int { return cmp.Compare(a.Released, b.Released) })
			s.keyHeap.Push(q)
		}
	}
	return s, nil
}

// load stores one item decoded from a snapshot, with its extra fields x
// (copied when it has any), in the heaps to be made by init.
func (s *State) load(it *Item, x *itemExtra) error {
	q := s.queues[it.Queue]
	switch {
	case it.ID == 0 || it.ID >= s.nextID:
		return fmt.Errorf("item id %d outside 1..%d", it.ID, s.nextID-1)
	case it.ID <= s.loaded && s.items.get(it.ID) != nil: // above every ID so far, it is new
		return fmt.Errorf("item %d twice", it.ID)
	case q == nil:
		return fmt.Errorf("item %d of queue %d, which is not in the snapshot", it.ID, it.Queue)
	case it.Attempts < 0 || it.Deliveries < it.Attempts:
		return fmt.Errorf("item %d: %d attempts of %d deliveries", it.ID, it.Attempts, it.Deliveries)
	}
	switch it.Status {
	case Waiting:
		x.deadSeq = 0
	case Leased:
		if it.Receipt == 0 || it.Receipt > s.lastLSN || s.leases[it.Receipt] != nil {
			return fmt.Errorf("item %d has bad receipt %d", it.ID, it.Receipt)
		}
		x.deadSeq = 0
	case Dead:
	default:
		return fmt.Errorf("item %d has unknown status %d", it.ID, it.Status)
	}
	s.loaded = max(s.loaded, it.ID)
	if it.Body.InLog() && (s.loadFloor == 0 || it.Body.LSN < s.loadFloor) {
		s.loadFloor = it.Body.LSN
	}
	x.before = it.Deliveries - it.Attempts
	pos := int32(-1)
	if it.Status == Waiting {
		// Its place in the unordered delayed heap, which it joins below.
		pos = int32(len(q.delayed.items))
	}
	e := s.store(q, it.ID, entry{
		queue: it.Queue, body: it.Body, priority: it.Priority, enqueued: it.EnqueuedAt,
		due: it.Due, seq: it.Seq, attempts: it.Attempts, heapPos: pos, status: it.Status,
	})
	if !x.empty() {
		// Only an item that has one of these takes the memory for them.
		*s.ext(e) = *x
	}
	switch it.Status {
	case Waiting:
		q.delayed.items = append(q.delayed.items, it.ID)
		q.maxDelayedDue = max(q.maxDelayedDue, it.Due)
		if x.deadline != 0 {
			s.deadlines.items = append(s.deadlines.items, it.ID)
		}
	case Leased:
		l := &lease{id: it.ID, receipt: it.Receipt, end: it.LeaseEnd}
		s.leases[l.receipt] = l
		s.leaseOf[l.id] = l
		s.leaseHeap.items = append(s.leaseHeap.items, l)
		q.leased++
	case Dead:
		q.deadOrder = append(q.deadOrder, deadEntry{it.ID, x.deadSeq})
		q.ndead++
	}
	return nil
}
