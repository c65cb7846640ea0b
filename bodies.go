package walq

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Bodies on disk.
//
// The state keeps, per item, where its body is (state.BodyRef: the record
// that holds it, its offset in that record's segment file, its length and
// CRC-32C); the bytes stay in the log. A delivery reads the body with one
// positioned read, outside the queue's lock, and checks it against the
// CRC. Two things keep that read off the usual path:
//
//   - Bodies whose record is appended but whose frame is not yet written
//     are held in memory (unplaced): nobody knows their offset yet. The
//     log's committer reports each frame it writes (wal.Options.OnWritten);
//     the next call under the lock places them (drainLocked), and their
//     bodies move to the cache.
//   - The cache holds bodies put (or relocated) recently, up to
//     Options.BodyCacheBytes, until they are delivered: the common
//     put-then-consume path never reads the disk. The oldest are dropped
//     first when it is full.
//
// A body that cannot be read (its segment is gone and the item has no
// newer place, a short file) or that fails its CRC is never delivered: the
// lease that would have delivered it ends in the dead letters with a
// cause naming the record, file and offset, the event is counted and
// logged, and the call goes on with the next item.
type bodies struct {
	// Under q.mu.
	unplaced map[uint64][]byte // by item ID: bodies whose frames are not yet placed
	// delivered marks the unplaced bodies a delivery took: placed, they
	// are not cached again (the cache keeps a body for its delivery).
	delivered  map[uint64]struct{}
	pending    []pendingBodies   // their records, in LSN order
	cache      map[uint64][]byte // by item ID
	order      []uint64          // cache IDs, oldest first (with IDs since dropped)
	cacheBytes int64
	cacheMax   int64

	// Filled by the log's committer.
	placeMu sync.Mutex
	placed  []wal.Written // copies, in LSN order
	waiting atomic.Bool   // placed is not empty
}

// pendingBodies is a record holding bodies whose frame is not yet placed.
type pendingBodies struct {
	lsn  uint64
	ids  []uint64
	offs []int // where each body lies in the record
}

func newBodies(cacheMax int64) *bodies {
	return &bodies{unplaced: make(map[uint64][]byte), delivered: make(map[uint64]struct{}),
		cache: make(map[uint64][]byte), cacheMax: cacheMax}
}

// onWritten is the log's OnWritten hook. It runs in the committer, so it
// takes no queue lock: the placement waits for the next drainLocked.
func (b *bodies) onWritten(w wal.Written) {
	w.Bodies = append([]int64(nil), w.Bodies...)
	b.placeMu.Lock()
	b.placed = append(b.placed, w)
	b.placeMu.Unlock()
	b.waiting.Store(true)
}

// addLocked registers the bodies of record lsn, just appended: ids[i]'s
// body is bodies[i], at offs[i] in the record's encoding.
func (b *bodies) addLocked(lsn uint64, ids []uint64, offs []int, bodies [][]byte) {
	p := pendingBodies{lsn: lsn}
	for i, id := range ids {
		if len(bodies[i]) == 0 {
			continue // an empty body is stored nowhere
		}
		p.ids = append(p.ids, id)
		p.offs = append(p.offs, offs[i])
		b.unplaced[id] = bodies[i]
	}
	if len(p.ids) > 0 {
		b.pending = append(b.pending, p)
	}
}

// drainLocked places the bodies whose frames the committer wrote.
func (b *bodies) drainLocked(st *state.State) {
	if !b.waiting.Load() {
		return
	}
	b.placeMu.Lock()
	placed := b.placed
	b.placed = nil
	b.waiting.Store(false)
	b.placeMu.Unlock()
	for _, w := range placed {
		last := w.First + uint64(len(w.Bodies)) - 1
		for len(b.pending) > 0 && b.pending[0].lsn <= last {
			p := b.pending[0]
			b.pending[0] = pendingBodies{}
			b.pending = b.pending[1:]
			if p.lsn < w.First {
				// Its frame came before this one and was reported before:
				// this cannot happen, but if it did, its bodies would stay
				// in unplaced and be read from there.
				continue
			}
			at := w.Bodies[p.lsn-w.First]
			for i, id := range p.ids {
				body := b.unplaced[id]
				delete(b.unplaced, id)
				_, gone := b.delivered[id]
				delete(b.delivered, id)
				if st.PlaceBody(id, p.lsn, at+int64(p.offs[i])) && !gone {
					if len(p.ids) > 1 {
						// The bodies of a batch share one buffer: cached
						// alone, one would keep all of it alive, beyond
						// what the cache counts.
						body = bytes.Clone(body)
					}
					b.cacheLocked(id, body)
				}
			}
		}
	}
	if len(b.pending) == 0 {
		b.pending = nil // let the backing array go
	}
}

// cacheEntryCost is what the cache counts for an entry beside its body's
// capacity: its map slot (with the map's room to grow), its slice header
// and its place in the order, so that the bound holds for small bodies
// too. Measured: a cache of 175,000 bodies of 32 bytes took 151 bytes of
// heap per body, 119 beside the body.
const cacheEntryCost = 120

// cacheCost is what the cache counts for body.
func cacheCost(body []byte) int64 { return int64(cap(body)) + cacheEntryCost }

// cacheLocked keeps body in the cache, dropping the oldest bodies while
// it holds more than its bound.
func (b *bodies) cacheLocked(id uint64, body []byte) {
	cost := cacheCost(body)
	if b.cacheMax <= 0 || cost > b.cacheMax {
		return
	}
	if _, ok := b.cache[id]; ok {
		return
	}
	b.cache[id] = body
	b.order = append(b.order, id)
	b.cacheBytes += cost
	for b.cacheBytes > b.cacheMax && len(b.order) > 0 {
		old := b.order[0]
		b.order = b.order[1:]
		if v, ok := b.cache[old]; ok {
			delete(b.cache, old)
			b.cacheBytes -= cacheCost(v)
		}
	}
	// The order keeps the IDs of bodies delivered since; copy it down
	// once they are most of it, so it stays within twice the cache's count.
	if len(b.order) > 2*len(b.cache)+1024 {
		live := make([]uint64, 0, 2*len(b.cache)+16)
		for _, id := range b.order {
			if _, ok := b.cache[id]; ok {
				live = append(live, id)
			}
		}
		b.order = live
	}
}

// takeLocked returns the body of item id if memory holds it. A delivery
// takes it out of the cache: it was kept for this.
func (b *bodies) takeLocked(id uint64) ([]byte, bool) {
	if v, ok := b.unplaced[id]; ok {
		b.delivered[id] = struct{}{}
		return v, true
	}
	if v, ok := b.cache[id]; ok {
		delete(b.cache, id)
		b.cacheBytes -= cacheCost(v)
		return v, true
	}
	return nil, false
}

// peekLocked is takeLocked for a read that is not a delivery (dead-letter
// listings, relocation): the cache keeps the body.
func (b *bodies) peekLocked(id uint64) ([]byte, bool) {
	if v, ok := b.unplaced[id]; ok {
		return v, true
	}
	v, ok := b.cache[id]
	return v, ok
}

// bodySource is what a call took under the lock to give an item its body
// after releasing it: the bytes when memory held them, else where they are.
type bodySource struct {
	id  uint64
	ref state.BodyRef
	mem []byte
	hit bool
}

// sourceLocked returns where item it's body comes from; take says the
// caller delivers it.
func (q *Queue) sourceLocked(id uint64, ref state.BodyRef, take bool) bodySource {
	src := bodySource{id: id, ref: ref}
	if ref.Len == 0 {
		src.hit = true
		return src
	}
	if ref.LSN == 0 {
		src.mem, src.hit = q.st.Inline(id)
		return src
	}
	if take {
		src.mem, src.hit = q.bodies.takeLocked(id)
	} else {
		src.mem, src.hit = q.bodies.peekLocked(id)
	}
	return src
}

// errBodyBad marks a body that was read and failed its check, or could
// not be read at all: it is never delivered.
var errBodyBad = errors.New("walq: stored body unreadable")

// maxBodyRetries bounds how often a read whose segment was removed looks
// up the item's place again: each retry means a compaction moved the body
// between the lookup and the read.
const maxBodyRetries = 8

// loadBody returns a copy of the body src names, reading it from the log
// when memory did not hold it. It is called without q.mu.
func (q *Queue) loadBody(src bodySource) ([]byte, error) {
	if src.hit {
		q.metrics.bodyHits.Add(1)
		if src.ref.Len == 0 {
			return nil, nil
		}
		return append([]byte(nil), src.mem...), nil
	}
	q.metrics.bodyMisses.Add(1)
	for try := 0; ; try++ {
		buf := make([]byte, src.ref.Len)
		err := q.log.ReadAt(src.ref.LSN, src.ref.Off, buf)
		if err == nil {
			q.metrics.bodyReadBytes.Add(int64(len(buf)))
			if state.BodySum(buf) != src.ref.Sum {
				return nil, fmt.Errorf("%w: item %d: body of record %d at offset %d (%d bytes) fails its crc",
					errBodyBad, src.id, src.ref.LSN, src.ref.Off, src.ref.Len)
			}
			return buf, nil
		}
		if !errors.Is(err, wal.ErrBodyGone) || try >= maxBodyRetries {
			return nil, fmt.Errorf("%w: item %d: %w", errBodyBad, src.id, err)
		}
		// Its segment was removed: a compaction moved the body since the
		// lookup. Look again.
		q.mu.Lock()
		it := q.st.Item(src.id)
		var next bodySource
		if it != nil {
			next = q.sourceLocked(it.ID, it.Body, false)
		}
		q.mu.Unlock()
		if it == nil {
			return nil, fmt.Errorf("%w: item %d is gone", errBodyBad, src.id)
		}
		if next.ref == src.ref && !next.hit {
			return nil, fmt.Errorf("%w: item %d: %w", errBodyBad, src.id, err)
		}
		if next.hit {
			return append([]byte(nil), next.mem...), nil
		}
		src = next
	}
}

// deliverBody gives m, just leased, its body. When the body is bad the
// lease ends in the dead letters at once and ok is false: the caller
// leases the next item. err is a failure of the queue.
func (q *Queue) deliverBody(m *Message, src bodySource) (ok bool, err error) {
	body, berr := q.loadBody(src)
	if berr == nil {
		m.Body = body
		return true, nil
	}
	q.metrics.bodyFailures.Add(1)
	q.opts.Logger.Error("walq: a stored body failed its check; its item goes to the dead letters", "id", m.ID, "err", berr)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.callLocked(); err != nil {
		return false, err
	}
	it := q.st.Leased(m.Receipt.lease)
	if it == nil || it.ID != m.ID {
		return false, nil // the lease ended meanwhile
	}
	rt := q.rts[it.Queue]
	if rt == nil {
		return false, nil
	}
	_, _, err = q.appendEndLocked(rt, state.TypeDeadLetter, it, q.qt.now(), berr.Error())
	return false, err
}

// addPutBodiesLocked registers the bodies of a put just appended at lsn,
// whose items got the IDs from first on.
func (q *Queue) addPutBodiesLocked(lsn, first uint64, items []state.NewItem) {
	ids := make([]uint64, len(items))
	offs := make([]int, len(items))
	bodies := make([][]byte, len(items))
	for i := range items {
		ids[i], offs[i], bodies[i] = first+uint64(i), items[i].BodyOffset, items[i].Body
	}
	q.bodies.addLocked(lsn, ids, offs, bodies)
}

// appendRelocateLocked appends rec and holds its bodies until their frame
// is placed (addLocked), as a put's are. It returns the bytes of bodies it
// carries; the caller syncs.
func (q *Queue) appendRelocateLocked(rec *state.Relocate) (int64, error) {
	lsn, _, err := q.appendToLocked(state.DefaultQueue, rec)
	if err != nil {
		return 0, err
	}
	ids := make([]uint64, len(rec.Items))
	offs := make([]int, len(rec.Items))
	bodies := make([][]byte, len(rec.Items))
	var n int64
	for i, r := range rec.Items {
		ids[i], offs[i], bodies[i] = r.ID, r.BodyOffset, r.Body
		n += int64(len(r.Body))
	}
	q.bodies.addLocked(lsn, ids, offs, bodies)
	q.copiedLocked(n)
	return n, nil
}

// relocateInline copies into the log the bodies that the state holds
// itself (those of a snapshot of an earlier version), in Relocate records
// of up to relocateChunk bytes, and syncs them. Open calls it before the
// queue takes calls; the compaction that follows writes a snapshot of the
// current version and lets the old one go.
func (q *Queue) relocateInline() error {
	q.mu.Lock()
	ids := q.st.InlineIDs()
	for len(ids) > 0 {
		rec := &state.Relocate{Time: q.qt.now()}
		for n := 0; len(ids) > 0 && n < relocateChunk; ids = ids[1:] {
			b, _ := q.st.Inline(ids[0])
			rec.Items = append(rec.Items, state.Relocated{ID: ids[0], Body: b})
			n += len(b)
		}
		if _, err := q.appendRelocateLocked(rec); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	q.mu.Unlock()
	// Fsynced, and seen to be on disk (see compactBodies).
	_, err := q.log.SyncRoll()
	return err
}

// closeLog closes the log and, when replaying what it holds after the last
// snapshot would cost more than writing the index again, writes a
// snapshot of the state at its last record: the next Open then loads the
// index and replays nothing. What it costs Close is encoding and writing
// the index (about 50 bytes an item, written and fsynced in chunks), and
// it is skipped when fewer than closeSnapshotMin records, or fewer than an
// eighth of the items, came after the last snapshot, and the log holds
// less than closeSnapshotLog bytes.
//
// Before such a snapshot, or when the last one covers every record
// already (a compaction just ran), the log moves to a new segment (one
// more file, one fsync) if its tail holds records: that segment is then
// sealed and wholly covered, so the next Open reads an empty tail where it
// would read the last segment whole from the disk, bodies and all (tens
// of megabytes when large batches made it long), and it verifies only the
// sealed segment's headers.
func (q *Queue) closeLog() error {
	q.mu.Lock()
	last, snap := q.st.LastLSN(), q.snapLSN.Load()
	replayCost := last-snap >= max(closeSnapshotMin, uint64(q.st.TotalLen())/8) || q.logBytes >= closeSnapshotLog
	healthy := q.failure() == nil && !q.opts.noCloseSnapshot
	write := healthy && last > snap && replayCost
	covered := healthy && last == snap && snap > 0
	q.mu.Unlock()
	if write || covered {
		// A roll that cannot start the new segment (a full disk) leaves
		// the log as it was: the next Open reads the last segment.
		if _, err := q.log.SyncRoll(); err != nil {
			q.opts.Logger.Warn("walq: could not start a new segment at close; the next open reads the last one", "err", err)
		}
	}
	err := q.log.Close()
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bodies.drainLocked(q.st) // the log is closed: every frame was written and placed
	if !write || q.failure() != nil || q.st.LastLSN() != last {
		return nil
	}
	f, ferr := q.st.Freeze()
	var n int64
	if ferr == nil {
		n, ferr = q.writeFrozen(f, false) // under q.mu, which nothing else takes now
	}
	if ferr != nil {
		q.opts.Logger.Warn("walq: no snapshot at close; the next open replays the log", "err", ferr)
		return nil
	}
	q.snapLSN.Store(last)
	q.metrics.writtenBytes.Add(n)
	if rerr := q.removeSnapshotsBefore(last); rerr != nil {
		q.opts.Logger.Warn("walq: could not remove older snapshots at close", "err", rerr)
	}
	return nil
}

// closeSnapshotMin is the fewest records after the last snapshot, and
// closeSnapshotLog the log size, for which Close writes a new one.
const (
	closeSnapshotMin = 1000
	closeSnapshotLog = 64 << 20
)
