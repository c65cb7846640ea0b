package state_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/walq/walq/state"
)

// This file checks *state.State against a plain model: a slice of items with
// one status field and one queue each, a slice of queues ever created, each
// with its dead-letter IDs and its keys, and a fake clock. The model knows
// nothing of heaps, levels, stale entries or the ID index; every query it
// answers is a linear scan over the items, written from the semantics in
// DESIGN.md and the doc comments of package state, not from its code.

const (
	clockStart = 1_000_000 // the fake clock never reads 0: a zero time means "none" in several fields
	keyWindow  = 50        // the key window the machine prunes with, in clock units
	// maxSettingsKeyWindow bounds the key windows of the queues' settings.
	maxSettingsKeyWindow = 100
)

// testKeys is small so that puts collide on keys often, within a queue and
// across queues (where they must not).
var testKeys = []string{"a", "b", "c"}

// queueNames is small so that creates often name a queue that exists, and
// recreate a deleted queue under its name.
var queueNames = []string{"jobs", "mail.v2", "x-1"}

// causes are the error texts of lease endings: short ones, and long ones of
// 1- to 4-byte runes placed so that MaxAttemptError falls on, or inside, a
// rune.
var causes = []string{
	"", "", "boom", "timeout",
	strings.Repeat("e", state.MaxAttemptError),
	strings.Repeat("e", state.MaxAttemptError+1),
	"x" + strings.Repeat("é", 300),
	strings.Repeat("€", 200),
	"ab" + strings.Repeat("😀", 150),
	"ü" + strings.Repeat("€", 171),
}

type mStatus int

const (
	mWaiting mStatus = iota + 1
	mLeased
	mDead
	mAcked
	mDiscarded
	mPurged
	mGone // its queue was deleted
)

func (st mStatus) String() string {
	return [...]string{"?", "waiting", "leased", "dead", "acked", "discarded", "purged", "gone"}[st]
}

// stored reports whether an item in this status is still held by the state.
func (st mStatus) stored() bool { return st == mWaiting || st == mLeased || st == mDead }

// mItem is the model of one item ever put. Its status is a single field, so
// it is in exactly one state by construction; the checks make sure the
// implementation's many views (item map, heaps, lease map, dead order) agree
// with it.
type mItem struct {
	id         uint64
	queue      uint64 // the queue it is in (or was in, when its queue was deleted)
	body       []byte
	key        string
	priority   int64
	enqueuedAt int64
	due        int64
	deadline   int64
	seq        uint64 // LSN of the record that last made it waiting
	attempts   int32
	deliveries int32
	status     mStatus
	promoted   bool // waiting and moved to ready by a Promote at or after its due time
	receipt    uint64
	leaseEnd   int64
	lastError  string
	endedAt    int64
	removedAt  int64 // acked, discarded or purged at
	history    []state.Attempt
}

// mKey is a key a queue remembers: held by item id while that item is
// stored in the queue (released 0), then for the key window from released.
type mKey struct {
	id       uint64
	released int64
}

// mQueue is the model of one incarnation of a queue.
type mQueue struct {
	id          uint64
	name        string
	created     int64
	settings    state.Settings
	pausedUntil int64
	counters    state.Counters
	dead        []uint64 // dead letters, oldest first
	keys        map[string]*mKey
	// unpruned is keys as a state that was never pruned has them (the
	// same entries, less only PruneKeys's forgetting with keyWindow).
	unpruned map[string]*mKey
	deleted  bool
}

func newMQueue(id uint64, name string, created int64, set state.Settings) *mQueue {
	return &mQueue{id: id, name: name, created: created, settings: set, keys: make(map[string]*mKey), unpruned: make(map[string]*mKey)}
}

func (q *mQueue) paused(now int64) bool { return q.pausedUntil != 0 && now < q.pausedUntil }

// receiptOf is a receipt handed out, with the queue of its lease.
type receiptOf struct {
	receipt, queue uint64
}

type model struct {
	now      int64
	lsn      uint64
	lastTime int64
	items    []*mItem  // items[id-1]
	queues   []*mQueue // every queue ever created, in order; queues[0] is the default queue
	receipts []receiptOf
}

func newModel() *model {
	return &model{now: clockStart, queues: []*mQueue{newMQueue(state.DefaultQueue, "", 0, state.Settings{})}}
}

func (m *model) item(id uint64) *mItem {
	if id == 0 || id > uint64(len(m.items)) {
		return nil
	}
	return m.items[id-1]
}

// live lists the queues that exist, in ID order.
func (m *model) live() []*mQueue {
	var out []*mQueue
	for _, q := range m.queues {
		if !q.deleted {
			out = append(out, q)
		}
	}
	return out
}

func (m *model) liveIDs() []uint64 {
	var out []uint64
	for _, q := range m.live() {
		out = append(out, q.id)
	}
	return out
}

// queue returns the queue with id if it exists.
func (m *model) queue(id uint64) *mQueue {
	for _, q := range m.queues {
		if q.id == id && !q.deleted {
			return q
		}
	}
	return nil
}

func (m *model) byName(name string) *mQueue {
	for _, q := range m.live() {
		if q.name == name {
			return q
		}
	}
	return nil
}

// notQueues lists IDs that name no existing queue: deleted incarnations,
// LSNs of records that created none, and IDs never used.
func (m *model) notQueues() []uint64 {
	cands := []uint64{m.lsn, m.lsn + 1, m.lsn + 5, math.MaxUint64}
	if m.lsn > 1 {
		cands = append(cands, 1, m.lsn-1)
	}
	for _, q := range m.queues {
		if q.deleted {
			cands = append(cands, q.id)
		}
	}
	return slices.DeleteFunc(cands, func(id uint64) bool { return m.queue(id) != nil })
}

// filter returns the items for which keep holds, in ID order.
func (m *model) filter(keep func(*mItem) bool) []*mItem {
	var out []*mItem
	for _, it := range m.items {
		if keep(it) {
			out = append(out, it)
		}
	}
	return out
}

// in returns the items stored in q for which keep holds, in ID order.
func (m *model) in(q *mQueue, keep func(*mItem) bool) []*mItem {
	return m.filter(func(it *mItem) bool { return it.status.stored() && it.queue == q.id && keep(it) })
}

func ids(items []*mItem) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.id
	}
	return out
}

func (m *model) leased(it *mItem) bool { return it.status == mLeased }

// running is a lease that may still be acked, extended or nacked.
func (m *model) running(it *mItem) bool { return it.status == mLeased && m.now < it.leaseEnd }

// leasable is a waiting item that a Lease at now may take, as far as the
// item goes (its queue may refuse: see mayLease).
func (m *model) leasable(it *mItem) bool {
	return it.status == mWaiting && it.due <= m.now && (it.deadline == 0 || m.now < it.deadline)
}

// atCap reports whether q has as many open leases as its MaxInFlight allows.
func (m *model) atCap(q *mQueue) bool {
	return q.settings.MaxInFlight > 0 && int64(len(m.in(q, m.leased))) >= q.settings.MaxInFlight
}

// mayLease reports whether q takes a Lease at now: not paused, below its cap.
func (m *model) mayLease(q *mQueue) bool { return !q.paused(m.now) && !m.atCap(q) }

func (m *model) passed(it *mItem) bool {
	return it.status == mWaiting && it.deadline != 0 && it.deadline <= m.now
}

func (m *model) byReceipt(receipt uint64) *mItem {
	for _, it := range m.items {
		if it.status == mLeased && it.receipt == receipt {
			return it
		}
	}
	return nil
}

// leasesByReceipt lists the leases for which keep holds, by receipt.
func (m *model) leasesByReceipt(keep func(*mItem) bool) []*mItem {
	out := m.filter(keep)
	slices.SortFunc(out, func(a, b *mItem) int { return cmp.Compare(a.receipt, b.receipt) })
	return out
}

// expired lists the leases whose end is at or before now, earliest end first.
func (m *model) expired() []*mItem {
	out := m.filter(func(it *mItem) bool { return it.status == mLeased && it.leaseEnd <= m.now })
	slices.SortFunc(out, func(a, b *mItem) int {
		return cmp.Or(cmp.Compare(a.leaseEnd, b.leaseEnd), cmp.Compare(a.receipt, b.receipt))
	})
	return out
}

// passedDeadlines lists waiting items past their deadline, earliest deadline first.
func (m *model) passedDeadlines() []*mItem {
	out := m.filter(m.passed)
	slices.SortFunc(out, func(a, b *mItem) int {
		return cmp.Or(cmp.Compare(a.deadline, b.deadline), cmp.Compare(a.id, b.id))
	})
	return out
}

// promote is Promote(now) of q: its waiting items that are due become ready.
func (m *model) promote(q *mQueue) {
	for _, it := range m.in(q, func(it *mItem) bool { return it.status == mWaiting && it.due <= m.now }) {
		it.promoted = true
	}
}

// nextReady is the promoted item of q a delivery takes: smallest priority,
// then earliest due time, then the record that made it waiting, then the ID
// (the order of items within one put or redrive).
func (m *model) nextReady(q *mQueue) *mItem {
	var best *mItem
	for _, it := range m.in(q, func(it *mItem) bool { return it.status == mWaiting && it.promoted }) {
		if best == nil || cmp.Or(
			cmp.Compare(it.priority, best.priority),
			cmp.Compare(it.due, best.due),
			cmp.Compare(it.seq, best.seq),
			cmp.Compare(it.id, best.id)) < 0 {
			best = it
		}
	}
	return best
}

// holder answers KeyHolder(key, now, window) of q for window <= keyWindow:
// the item that took the key in q holds it while stored there, and for
// window after it left, unless PruneKeys has forgotten it.
func (m *model) holder(q *mQueue, key string, window int64) (uint64, bool) {
	k := q.keys[key]
	switch {
	case k == nil:
		return 0, false
	case k.released == 0 || m.now < k.released+window:
		return k.id, true
	}
	return 0, false
}

// storedHolder is the stored item of q that holds key, or nil.
func (m *model) storedHolder(q *mQueue, key string) *mItem {
	if k := q.keys[key]; key != "" && k != nil && k.released == 0 {
		return m.item(k.id)
	}
	return nil
}

// prune is PruneKeys(now, keyWindow): every queue forgets the keys released
// at least keyWindow ago.
func (m *model) prune() {
	for _, q := range m.live() {
		for key, k := range q.keys {
			if k.released != 0 && k.released+keyWindow <= m.now {
				delete(q.keys, key)
			}
		}
	}
}

func (m *model) put(q *mQueue, lsn uint64, items []state.NewItem) {
	for _, n := range items {
		it := &mItem{
			id: uint64(len(m.items) + 1), queue: q.id, body: n.Body, key: n.Key, priority: n.Priority,
			enqueuedAt: m.now, due: n.Due, deadline: n.Deadline, seq: lsn, status: mWaiting,
		}
		m.items = append(m.items, it)
		if n.Key != "" {
			k := &mKey{id: it.id}
			q.keys[n.Key], q.unpruned[n.Key] = k, k
		}
		q.counters.Put++
	}
}

func (m *model) lease(it *mItem, lsn uint64, leaseEnd int64) {
	it.status, it.promoted = mLeased, false
	it.receipt, it.leaseEnd = lsn, leaseEnd
	it.attempts++
	it.deliveries++
	it.due = m.now // a leased item's Due is when its lease began
	m.receipts = append(m.receipts, receiptOf{lsn, it.queue})
	m.queue(it.queue).counters.Delivered++
}

// remove takes an acked, discarded or purged item out; its key, if it still
// holds it, is released now.
func (m *model) remove(it *mItem, st mStatus) {
	q := m.queue(it.queue)
	it.status, it.promoted = st, false
	it.receipt, it.leaseEnd = 0, 0
	it.removedAt = m.now
	if k := q.keys[it.key]; it.key != "" && k != nil && k.id == it.id {
		k.released = m.now
	}
}

// cutError is the attempt error text of cause: the longest prefix of at
// most MaxAttemptError bytes that ends on a rune boundary (cause is valid
// UTF-8).
func cutError(cause string) string {
	n := 0
	for i, r := range cause {
		if end := i + utf8.RuneLen(r); end <= state.MaxAttemptError {
			n = end
		} else {
			break
		}
	}
	return cause[:n]
}

func (m *model) end(kind byte, it *mItem, lsn uint64, cause string, due int64, dead bool) {
	q := m.queue(it.queue)
	it.receipt, it.leaseEnd = 0, 0
	it.endedAt = m.now
	if cause != "" {
		it.lastError = cause
	}
	// The history keeps the attempts that ended without an ack.
	it.history = append(it.history, state.Attempt{Start: it.due, End: m.now, How: kind, Error: cutError(cause)})
	if len(it.history) > state.HistoryLen {
		it.history = slices.Clone(it.history[len(it.history)-state.HistoryLen:])
	}
	switch kind {
	case state.TypeNack:
		q.counters.Nacked++
	case state.TypeExpire:
		q.counters.Expired++
	}
	switch {
	case dead:
		it.status = mDead
		q.dead = append(q.dead, it.id)
		q.counters.DeadLettered++
	case it.deadline != 0 && due >= it.deadline:
		m.remove(it, mDiscarded)
		q.counters.Discarded++
	default:
		it.status, it.promoted = mWaiting, false
		it.due, it.seq = due, lsn
	}
}

func (q *mQueue) undead(id uint64) {
	q.dead = slices.DeleteFunc(q.dead, func(d uint64) bool { return d == id })
}

// requeue makes a dead letter waiting again, ready now, attempts reset.
func (m *model) requeue(it *mItem, lsn uint64) {
	it.status, it.promoted = mWaiting, false
	it.attempts = 0
	it.due, it.seq = m.now, lsn
}

// move is a Move of the dead letters ids from q into to.
func (m *model) move(q, to *mQueue, lsn uint64, ids []uint64) {
	for _, id := range ids {
		it := m.item(id)
		q.undead(id)
		if it.key != "" {
			if k := q.keys[it.key]; k != nil && k.id == id {
				delete(q.keys, it.key)
			}
			if k := q.unpruned[it.key]; k != nil && k.id == id {
				delete(q.unpruned, it.key)
			}
			k := &mKey{id: id}
			to.keys[it.key], to.unpruned[it.key] = k, k
		}
		it.queue = to.id
		m.requeue(it, lsn)
		q.counters.Redriven++
		q.counters.MovedOut++
		to.counters.MovedIn++
	}
}

// deleteQueue is a DeleteQueue of q: it and all in it are gone.
func (m *model) deleteQueue(q *mQueue) {
	for _, it := range m.in(q, func(*mItem) bool { return true }) {
		it.status, it.promoted = mGone, false
		it.receipt, it.leaseEnd = 0, 0
	}
	q.deleted = true
}

// checkpoint is a snapshot taken mid-history, with the LSN it covers.
type checkpoint struct {
	lsn  uint64
	data []byte
}

// logged is one applied record as the log would hold it.
type logged struct {
	lsn   uint64
	queue uint64
	typ   byte
	body  []byte
}

// machine drives a *state.State and the model side by side.
type machine struct {
	s           *state.State
	m           *model
	log         []logged
	checkpoints []checkpoint
	frz         freezeRun // a snapshot written a piece per step, while records go on
}

func newMachine(t *rapid.T) *machine {
	s := state.New()
	return &machine{s: s, m: newModel(), checkpoints: []checkpoint{{0, marshal(t, s)}}}
}

func marshal(t rapid.TB, s *state.State) []byte {
	t.Helper()
	b, err := s.MarshalSnapshot()
	if err != nil {
		t.Fatalf("MarshalSnapshot: %v", err)
	}
	return b
}

// apply applies a record of queue that must be valid at the next LSN and
// logs it.
func (mc *machine) apply(t *rapid.T, queue uint64, rec state.Record) uint64 {
	t.Helper()
	lsn := mc.m.lsn + 1
	// Encoded first, as the queue does: Encode says where each body lies
	// in the record.
	body, err := state.Encode(nil, rec)
	if err != nil {
		t.Fatalf("Encode(%+v): %v", rec, err)
	}
	if err := mc.s.ApplyAt(lsn, queue, rec, recordAt(lsn)); err != nil {
		t.Fatalf("ApplyTo(%d, queue %d, %s %.300v): %v", lsn, queue, state.TypeName(rec.Type()), rec, err)
	}
	mc.log = append(mc.log, logged{lsn, queue, rec.Type(), body})
	mc.m.lsn = lsn
	mc.m.lastTime = max(mc.m.lastTime, rec.At())
	return lsn
}

// mustReject applies a record that must be refused with ErrInvalid and leave
// the state exactly as it was.
func (mc *machine) mustReject(t *rapid.T, lsn, queue uint64, rec state.Record, why string) {
	t.Helper()
	before := marshal(t, mc.s)
	type view struct {
		g    state.Gauges
		next uint64 // ID of the next ready item, 0 for none
	}
	views := func() []view {
		var out []view
		for _, q := range mc.s.Queues() {
			v := view{g: q.Gauges()}
			if it := q.NextReady(); it != nil {
				v.next = it.ID
			}
			out = append(out, v)
		}
		return out
	}
	was := views()
	err := mc.s.ApplyAt(lsn, queue, rec, 4096)
	if !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("%s: ApplyTo(%d, queue %d, %s %.300v) = %v, want ErrInvalid", why, lsn, queue, state.TypeName(rec.Type()), rec, err)
	}
	if after := marshal(t, mc.s); !bytes.Equal(before, after) {
		t.Fatalf("%s: refused record %.300v changed the snapshot", why, rec)
	}
	if now := views(); !slices.Equal(now, was) {
		t.Fatalf("%s: refused record %.300v changed the gauges or NextReady of a queue: %+v, was %+v", why, rec, now, was)
	}
}

// drawQueue draws a queue that exists.
func (mc *machine) drawQueue(t *rapid.T, label string) *mQueue {
	return mc.m.queue(rapid.SampledFrom(mc.m.liveIDs()).Draw(t, label))
}

// drawOther draws a queue that exists other than q, or nil.
func (mc *machine) drawOther(t *rapid.T, q *mQueue, label string) *mQueue {
	others := slices.DeleteFunc(mc.m.liveIDs(), func(id uint64) bool { return id == q.id })
	if len(others) == 0 {
		return nil
	}
	return mc.m.queue(rapid.SampledFrom(others).Draw(t, label))
}

// runningLease draws a lease that is still running, in any queue, as a
// worker holds one: when none is running, it gets one first. It returns nil
// when nothing is ready either.
func (mc *machine) runningLease(t *rapid.T) *mItem {
	m := mc.m
	if len(m.filter(m.running)) == 0 {
		mc.getOne(t, mc.drawQueue(t, "get from"))
	}
	leases := m.leasesByReceipt(m.running)
	if len(leases) == 0 {
		return nil
	}
	return m.byReceipt(rapid.SampledFrom(ids2receipts(leases)).Draw(t, "receipt"))
}

func ids2receipts(items []*mItem) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.receipt
	}
	return out
}

// drawSubset draws a non-empty subset of from, in a random order.
func drawSubset(t *rapid.T, from []uint64, label string) []uint64 {
	perm := rapid.Permutation(from).Draw(t, label)
	return perm[:rapid.IntRange(1, len(perm)).Draw(t, label+" count")]
}

func drawBackoff(t *rapid.T) int64 { return rapid.Int64Range(0, 60).Draw(t, "backoff") }

// drawDue draws when an item whose lease ends now is due again: after a
// backoff, or right at or just before its deadline, where the item is
// discarded or not.
func drawDue(t *rapid.T, m *model, it *mItem) int64 {
	dues := []int64{m.now + drawBackoff(t)}
	for _, due := range []int64{it.deadline - 1, it.deadline} {
		if it.deadline != 0 && due >= m.now {
			dues = append(dues, due)
		}
	}
	return rapid.SampledFrom(dues).Draw(t, "due")
}

func drawCause(t *rapid.T) string { return rapid.SampledFrom(causes).Draw(t, "cause") }

// drawSettings draws valid settings, with small MaxInFlight caps.
func drawSettings(t *rapid.T) state.Settings {
	return state.Settings{
		Visibility:  rapid.Int64Range(1, 100).Draw(t, "visibility setting"),
		MaxAttempts: rapid.Int64Range(1, 5).Draw(t, "max attempts"),
		KeyWindow:   rapid.Int64Range(0, maxSettingsKeyWindow).Draw(t, "key window"),
		MaxItems:    rapid.Int64Range(0, 10).Draw(t, "max items"),
		MaxBytes:    rapid.Int64Range(0, 100).Draw(t, "max bytes"),
		MaxInFlight: rapid.SampledFrom([]int64{0, 0, 1, 2, 3}).Draw(t, "max in flight"),
	}
}

// Put puts one to four items into a queue. A drawn key that the model says
// is held in that queue is first shown to be held (by KeyHolder, and by a
// refused put when a stored item holds it) and then dropped from the item.
func (mc *machine) Put(t *rapid.T) {
	m := mc.m
	q := mc.drawQueue(t, "queue")
	sq := mc.s.Queue(q.id)
	n := rapid.IntRange(1, 4).Draw(t, "items")
	items := make([]state.NewItem, n)
	inPut := map[string]bool{}
	for i := range items {
		due := m.now + rapid.SampledFrom([]int64{0, 0, 1, 7, 30, 200}).Draw(t, "delay")
		var deadline int64
		if rapid.IntRange(0, 2).Draw(t, "with deadline") == 0 {
			deadline = due + rapid.Int64Range(1, 120).Draw(t, "ttl")
		}
		key := rapid.SampledFrom([]string{"", "", "a", "b", "c"}).Draw(t, "key")
		if id, held := m.holder(q, key, keyWindow); key != "" && held {
			if got, ok := sq.KeyHolder(key, m.now, keyWindow); !ok || got != id {
				t.Fatalf("queue %d: KeyHolder(%q) = %d, %v; model: held by %d", q.id, key, got, ok, id)
			}
			if m.storedHolder(q, key) != nil {
				mc.mustReject(t, m.lsn+1, q.id, &state.Put{Time: m.now, Items: []state.NewItem{{Due: m.now, Key: key}}},
					"put with a key of a stored item")
			}
			key = ""
		}
		if inPut[key] {
			key = ""
		}
		inPut[key] = key != ""
		var body []byte
		if !rapid.Bool().Draw(t, "nil body") {
			body = rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(t, "body")
		}
		items[i] = state.NewItem{
			Body: body, Due: due, Deadline: deadline, Key: key,
			Priority: rapid.SampledFrom([]int64{-1, 0, 0, 2}).Draw(t, "priority"),
		}
	}
	lsn := mc.apply(t, q.id, &state.Put{Time: m.now, Items: items})
	m.put(q, lsn, items)
}

// Flood is a poison batch: many items put at once into a queue that
// delivers, each leased and dead-lettered, so that redrives, moves and
// purges work on a long dead-letter list.
func (mc *machine) Flood(t *rapid.T) {
	m := mc.m
	var open []uint64
	for _, q := range m.live() {
		if m.mayLease(q) {
			open = append(open, q.id)
		}
	}
	if len(open) == 0 {
		t.Skip("every queue is paused or at its cap")
	}
	q := m.queue(rapid.SampledFrom(open).Draw(t, "queue"))
	items := make([]state.NewItem, rapid.IntRange(10, 40).Draw(t, "items"))
	for i := range items {
		items[i] = state.NewItem{Body: []byte{byte(i)}, Due: m.now, Priority: int64(i % 2)}
		// Keyed dead letters, so that moves meet keys held in their target.
		if i < len(testKeys) && rapid.Bool().Draw(t, "keyed") {
			if _, held := m.holder(q, testKeys[i], keyWindow); !held {
				items[i].Key = testKeys[i]
			}
		}
	}
	lsn := mc.apply(t, q.id, &state.Put{Time: m.now, Items: items})
	m.put(q, lsn, items)
	for _, it := range m.items[len(m.items)-len(items):] {
		lsn := mc.apply(t, q.id, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 1})
		m.lease(it, lsn, m.now+1)
		end := &state.End{Kind: state.TypeDeadLetter, Time: m.now, Receipt: it.receipt, Cause: "poison", Due: m.now, Dead: true}
		lsn = mc.apply(t, q.id, end)
		m.end(end.Kind, it, lsn, end.Cause, end.Due, end.Dead)
	}
}

// Get is one to three workers calling Get on a queue.
func (mc *machine) Get(t *rapid.T) {
	q := mc.drawQueue(t, "queue")
	for range rapid.IntRange(1, 3).Draw(t, "workers") {
		mc.getOne(t, q)
	}
}

// getOne does what the queue's Get does: promote, take the next ready item,
// lease it, unless the queue is paused or at its cap (then the lease is
// refused).
func (mc *machine) getOne(t *rapid.T, q *mQueue) {
	m := mc.m
	sq := mc.s.Queue(q.id)
	sq.Promote(m.now)
	m.promote(q)
	want := m.nextReady(q)
	got := sq.NextReady()
	if (want == nil) != (got == nil) || (want != nil && want.id != got.ID) {
		t.Fatalf("queue %d: NextReady at %d = %s, model: %s", q.id, m.now, describe(got), describeModel(want))
	}
	early := m.in(q, func(it *mItem) bool { return it.status == mWaiting && it.due > m.now })
	if len(early) > 0 && rapid.Bool().Draw(t, "try a delayed item") {
		it := slices.MinFunc(early, func(a, b *mItem) int { return cmp.Compare(a.due, b.due) })
		mc.mustReject(t, m.lsn+1, q.id, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: it.due + 10}, "lease before due")
	}
	if want == nil {
		return
	}
	rec := &state.Lease{Time: m.now, ID: want.id, LeaseEnd: m.now + rapid.Int64Range(1, 60).Draw(t, "visibility")}
	switch {
	case !m.leasable(want):
		mc.mustReject(t, m.lsn+1, q.id, rec, "lease at or after the deadline")
		return
	case q.paused(m.now):
		mc.mustReject(t, m.lsn+1, q.id, rec, "lease in a paused queue")
		return
	case m.atCap(q):
		mc.mustReject(t, m.lsn+1, q.id, rec, "lease at the MaxInFlight cap")
		return
	}
	lsn := mc.apply(t, q.id, rec)
	m.lease(want, lsn, rec.LeaseEnd)
}

// Extend moves a lease's end, often past or before another lease's end.
func (mc *machine) Extend(t *rapid.T) {
	m := mc.m
	if rapid.Bool().Draw(t, "another worker") {
		mc.getOne(t, mc.drawQueue(t, "get from"))
	}
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	rec := &state.Extend{Time: m.now, Receipt: it.receipt, LeaseEnd: m.now + rapid.Int64Range(1, 60).Draw(t, "extension")}
	mc.apply(t, it.queue, rec)
	it.leaseEnd = rec.LeaseEnd
}

func (mc *machine) Ack(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	mc.apply(t, it.queue, &state.Ack{Time: m.now, Receipt: it.receipt})
	m.remove(it, mAcked)
	m.queue(it.queue).counters.Acked++
}

func (mc *machine) Nack(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	rec := &state.End{Kind: state.TypeNack, Time: m.now, Receipt: it.receipt, Cause: drawCause(t),
		Due: drawDue(t, m, it), Dead: rapid.IntRange(0, 3).Draw(t, "out of attempts") == 0}
	lsn := mc.apply(t, it.queue, rec)
	m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
}

// Retry is a worker that fails an item over and over, so that its history
// fills up and slides.
func (mc *machine) Retry(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	q := m.queue(it.queue)
	for range rapid.IntRange(1, 2*state.HistoryLen).Draw(t, "retries") {
		rec := &state.End{Kind: state.TypeNack, Time: m.now, Receipt: it.receipt, Cause: drawCause(t), Due: m.now}
		lsn := mc.apply(t, q.id, rec)
		m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
		if it.status != mWaiting || !m.leasable(it) || !m.mayLease(q) {
			return
		}
		lease := &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 1}
		m.lease(it, mc.apply(t, q.id, lease), lease.LeaseEnd)
	}
}

func (mc *machine) DeadLetter(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	rec := &state.End{Kind: state.TypeDeadLetter, Time: m.now, Receipt: it.receipt, Cause: drawCause(t), Due: m.now, Dead: true}
	lsn := mc.apply(t, it.queue, rec)
	m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
}

// ExpireByTime moves the clock and expires what ExpiredLeases reports, as
// the timer does, each in the log of its queue.
func (mc *machine) ExpireByTime(t *rapid.T) {
	m := mc.m
	m.now += rapid.Int64Range(0, 60).Draw(t, "advance")
	want := m.expired()
	got := mc.s.ExpiredLeases(m.now, len(m.items)+1)
	if !slices.Equal(itemIDs(got), ids(want)) {
		t.Fatalf("ExpiredLeases(%d) = %v, model: %v", m.now, itemIDs(got), ids(want))
	}
	if len(want) > 1 {
		limit := rapid.IntRange(1, len(want)-1).Draw(t, "limit")
		few := itemIDs(mc.s.ExpiredLeases(m.now, limit))
		if len(few) != limit || !isSubsequence(few, ids(want)) {
			t.Fatalf("ExpiredLeases(%d, %d) = %v, want %d of %v in their order", m.now, limit, few, limit, ids(want))
		}
	}
	for _, it := range want {
		rec := &state.End{Kind: state.TypeExpire, Time: m.now, Receipt: it.receipt, Cause: "lease expired",
			Due: drawDue(t, m, it), Dead: rapid.IntRange(0, 3).Draw(t, "out of attempts") == 0}
		lsn := mc.apply(t, it.queue, rec)
		m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
	}
}

// ExpireAll is recovery: every open lease ends as expired, whether or not its
// end has passed.
func (mc *machine) ExpireAll(t *rapid.T) {
	m := mc.m
	want := m.leasesByReceipt(m.leased)
	got := mc.s.OpenLeases()
	if !slices.Equal(itemIDs(got), ids(want)) {
		t.Fatalf("OpenLeases() = %v, model: %v", itemIDs(got), ids(want))
	}
	for _, it := range want {
		rec := &state.End{Kind: state.TypeExpire, Time: m.now, Receipt: it.receipt, Cause: drawCause(t),
			Due: drawDue(t, m, it), Dead: rapid.IntRange(0, 3).Draw(t, "out of attempts") == 0}
		lsn := mc.apply(t, it.queue, rec)
		m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
	}
}

// Discard drops items past their deadline, as the timer does: a subset of
// those of one queue, in that queue's log.
func (mc *machine) Discard(t *rapid.T) {
	m := mc.m
	want := m.passedDeadlines()
	got := mc.s.PassedDeadlines(m.now, len(m.items)+1)
	if !slices.Equal(itemIDs(got), ids(want)) {
		t.Fatalf("PassedDeadlines(%d) = %v, model: %v", m.now, itemIDs(got), ids(want))
	}
	if len(want) == 0 {
		return
	}
	q := m.queue(m.item(rapid.SampledFrom(ids(want)).Draw(t, "of the queue of")).queue)
	discard := drawSubset(t, ids(slices.DeleteFunc(want, func(it *mItem) bool { return it.queue != q.id })), "discard")
	mc.apply(t, q.id, &state.Discard{Time: m.now, IDs: discard})
	for _, id := range discard {
		m.remove(m.item(id), mDiscarded)
		q.counters.Discarded++
	}
}

// deadQueue draws a queue that has dead letters, or skips.
func (mc *machine) deadQueue(t *rapid.T) *mQueue {
	var with []uint64
	for _, q := range mc.m.live() {
		if len(q.dead) > 0 {
			with = append(with, q.id)
		}
	}
	if len(with) == 0 {
		t.Skip("no dead letters")
	}
	return mc.m.queue(rapid.SampledFrom(with).Draw(t, "queue"))
}

func (mc *machine) Redrive(t *rapid.T) {
	m := mc.m
	q := mc.deadQueue(t)
	redrive := drawSubset(t, q.dead, "redrive")
	lsn := mc.apply(t, q.id, &state.Redrive{Time: m.now, IDs: redrive})
	for _, id := range redrive {
		m.requeue(m.item(id), lsn)
		q.undead(id)
		q.counters.Redriven++
	}
}

func (mc *machine) Purge(t *rapid.T) {
	m := mc.m
	var purge []uint64
	var q *mQueue
	if rapid.Bool().Draw(t, "all") {
		q = mc.drawQueue(t, "queue")
		mc.apply(t, q.id, &state.Purge{Time: m.now, All: true})
		purge = slices.Clone(q.dead)
	} else {
		q = mc.deadQueue(t)
		purge = drawSubset(t, q.dead, "purge")
		mc.apply(t, q.id, &state.Purge{Time: m.now, IDs: purge})
	}
	for _, id := range purge {
		m.remove(m.item(id), mPurged)
		q.undead(id)
		q.counters.Purged++
	}
}

// CreateQueue creates a named queue, or shows that a create of a name that
// exists is refused. A name that was deleted makes a new incarnation.
func (mc *machine) CreateQueue(t *rapid.T) {
	m := mc.m
	name := rapid.SampledFrom(queueNames).Draw(t, "name")
	rec := &state.CreateQueue{Time: m.now, Name: name, Settings: drawSettings(t)}
	if q := m.byName(name); q != nil {
		mc.mustReject(t, m.lsn+1, state.DefaultQueue, rec, "create of a queue that exists")
		return
	}
	lsn := mc.apply(t, state.DefaultQueue, rec)
	m.queues = append(m.queues, newMQueue(lsn, name, m.now, rec.Settings))
}

// SetQueue replaces the settings of a queue (the default queue too).
func (mc *machine) SetQueue(t *rapid.T) {
	q := mc.drawQueue(t, "queue")
	rec := &state.SetQueue{Time: mc.m.now, Settings: drawSettings(t)}
	mc.apply(t, q.id, rec)
	if old := q.settings.KeyWindow; rec.Settings.KeyWindow > old {
		// A longer window holds only the keys whose recorded window has
		// not ended: the others are forgotten.
		for _, keys := range []map[string]*mKey{q.keys, q.unpruned} {
			for key, k := range keys {
				if k.released != 0 && k.released+old <= mc.m.now {
					delete(keys, key)
				}
			}
		}
	}
	q.settings = rec.Settings
}

// PauseQueue pauses a queue until resumed or until a time (past or
// future), or resumes it.
func (mc *machine) PauseQueue(t *rapid.T) {
	m := mc.m
	q := mc.drawQueue(t, "queue")
	untils := []int64{0, math.MaxInt64, m.now, m.now + 1, m.now + rapid.Int64Range(1, 100).Draw(t, "pause for"), m.now - 1}
	rec := &state.PauseQueue{Time: m.now, Until: rapid.SampledFrom(untils).Draw(t, "until")}
	mc.apply(t, q.id, rec)
	q.pausedUntil = rec.Until
}

// DeleteQueue deletes a named queue, forced or not; a delete not forced
// while a lease is open is refused.
func (mc *machine) DeleteQueue(t *rapid.T) {
	m := mc.m
	named := slices.DeleteFunc(m.liveIDs(), func(id uint64) bool { return id == state.DefaultQueue })
	if len(named) == 0 {
		t.Skip("no named queue")
	}
	q := m.queue(rapid.SampledFrom(named).Draw(t, "queue"))
	if rapid.Bool().Draw(t, "lease first") {
		mc.getOne(t, q)
	}
	rec := &state.DeleteQueue{Time: m.now, Force: rapid.Bool().Draw(t, "force")}
	if !rec.Force && len(m.in(q, m.leased)) > 0 {
		mc.mustReject(t, m.lsn+1, q.id, rec, "delete with leases open, not forced")
		return
	}
	mc.apply(t, q.id, rec)
	m.deleteQueue(q)
	if mc.s.Queue(q.id) != nil || mc.s.QueueByName(q.name) != nil {
		t.Fatalf("queue %d (%q) is still there after its delete", q.id, q.name)
	}
}

// moveConflict is the dead letter of ids whose key a stored item holds in
// to, or nil.
func (m *model) moveConflict(to *mQueue, ids []uint64) *mItem {
	for _, id := range ids {
		if it := m.item(id); m.storedHolder(to, it.key) != nil {
			return it
		}
	}
	return nil
}

// Move redrives dead letters of one queue into another. A drawn set with a
// key held by a stored item of the target is shown to be refused, then
// moved without the conflicting items.
func (mc *machine) Move(t *rapid.T) {
	m := mc.m
	q := mc.deadQueue(t)
	to := mc.drawOther(t, q, "target")
	if to == nil {
		t.Skip("no other queue")
	}
	move := drawSubset(t, q.dead, "move")
	if it := m.moveConflict(to, move); it != nil {
		mc.mustReject(t, m.lsn+1, q.id, &state.Move{Time: m.now, Target: to.id, IDs: move}, "move with a key held in the target")
		move = slices.DeleteFunc(move, func(id uint64) bool { return m.moveConflict(to, []uint64{id}) != nil })
		if len(move) == 0 {
			return
		}
	}
	lsn := mc.apply(t, q.id, &state.Move{Time: m.now, Target: to.id, IDs: move})
	m.move(q, to, lsn, move)
}

// Advance moves the clock, often to exactly the next time at which a rule
// changes its answer: the boundaries are where off-by-one mistakes live.
// Relocate copies stored bodies forward, as compaction does: nothing the
// model sees changes (the checks compare every item and query), the bodies
// are placed in the new record (replay and snapshots must agree on it), and
// a body that is not the item's own, or an item not stored, is refused.
func (mc *machine) Relocate(t *rapid.T) {
	m := mc.m
	var ids []uint64
	for _, it := range m.items {
		if it.status.stored() && len(it.body) > 0 {
			ids = append(ids, it.id)
		}
	}
	if len(ids) == 0 {
		t.Skip("no stored body")
	}
	pick := drawSubset(t, ids, "relocate")
	rec := &state.Relocate{Time: m.now}
	for _, id := range pick {
		rec.Items = append(rec.Items, state.Relocated{ID: id, Body: slices.Clone(m.item(id).body)})
	}
	switch rapid.IntRange(0, 3).Draw(t, "relocate case") {
	case 1:
		bad := *rec
		bad.Items = slices.Clone(rec.Items)
		bad.Items[0].Body = append(slices.Clone(bad.Items[0].Body), 'x')
		mc.mustReject(t, m.lsn+1, state.DefaultQueue, &bad, "relocate of a body that is not the item's")
	case 2:
		bad := *rec
		bad.Items = append(slices.Clone(rec.Items), rec.Items[0])
		mc.mustReject(t, m.lsn+1, state.DefaultQueue, &bad, "relocate of one item twice")
	case 3:
		mc.mustReject(t, m.lsn+1, pick[0]%7+1000, rec, "relocate in the log of a queue")
	}
	lsn := mc.apply(t, state.DefaultQueue, rec)
	for i, id := range pick {
		want := recordAt(lsn) + int64(rec.Items[i].BodyOffset)
		if b := mc.s.Item(id).Body; b.LSN != lsn || b.Off != want {
			t.Fatalf("item %d after relocate %d: body at record %d offset %d, want %d at %d", id, lsn, b.LSN, b.Off, lsn, want)
		}
	}
}

func (mc *machine) Advance(t *rapid.T) {
	m := mc.m
	var targets []int64
	for _, it := range m.items {
		switch {
		case it.status == mWaiting:
			targets = append(targets, it.due-1, it.due)
			if it.deadline != 0 {
				targets = append(targets, it.deadline-1, it.deadline)
			}
		case it.status == mLeased:
			targets = append(targets, it.leaseEnd-1, it.leaseEnd)
		}
	}
	for _, q := range m.live() {
		for _, k := range q.keys {
			if k.released != 0 {
				targets = append(targets, k.released+keyWindow-1, k.released+keyWindow)
			}
		}
		if q.pausedUntil != 0 && q.pausedUntil != math.MaxInt64 {
			targets = append(targets, q.pausedUntil-1, q.pausedUntil)
		}
	}
	targets = slices.DeleteFunc(targets, func(at int64) bool { return at <= m.now })
	if len(targets) > 0 && rapid.Bool().Draw(t, "to a boundary") {
		m.now = slices.Min(targets)
		return
	}
	m.now += rapid.Int64Range(1, 100).Draw(t, "advance")
}

func (mc *machine) PruneKeys(*rapid.T) {
	mc.s.PruneKeys(mc.m.now, keyWindow)
	mc.m.prune()
}

// PruneKeysBy prunes a copy of the state, rebuilt from the log (so that
// its released keys are in the live order, superseded ones included), with
// each queue's own key window, as the directory does. It may forget a key
// only once its queue's window has passed since the release, never a key
// that a stored item holds, and asks only for the windows of queues that
// exist.
func (mc *machine) PruneKeysBy(t *rapid.T) {
	m := mc.m
	c := replay(t, state.New(), mc.log)
	c.PruneKeysBy(m.now, func(id uint64) int64 {
		q := m.queue(id)
		if q == nil {
			t.Fatalf("PruneKeysBy asks for the key window of queue %d, which does not exist", id)
		}
		return q.settings.KeyWindow
	})
	for _, q := range m.live() {
		w := q.settings.KeyWindow
		held := 0
		// The copy was never pruned before: PruneKeys forgets keys with
		// keyWindow, which may be shorter than q's own.
		for key, k := range q.unpruned {
			if k.released != 0 && k.released+w <= m.now {
				// Forgotten, whatever the windows of other queues: asked
				// with a window that has not ended, it is not held.
				if id, held := c.Queue(q.id).KeyHolder(key, m.now, math.MaxInt64/4); held && id == k.id {
					t.Fatalf("queue %d: after PruneKeysBy(%d), key %q (released at %d, window %d) is still kept",
						q.id, m.now, key, k.released, w)
				}
				continue
			}
			held++
			if id, held := c.Queue(q.id).KeyHolder(key, m.now, w); !held || id != k.id {
				t.Fatalf("queue %d: after PruneKeysBy(%d), KeyHolder(%q, window %d) = %d, %v; model: held by %d (released at %d)",
					q.id, m.now, key, w, id, held, k.id, k.released)
			}
		}
		// What a reader sees at now counts the keys held at now.
		if got := c.Queue(q.id).KeysAt(m.now, w); got != held {
			t.Fatalf("queue %d: KeysAt(%d, %d) = %d; model: %d keys held", q.id, m.now, w, got, held)
		}
	}
	if at, queue, ok := c.NextKeyExpiry(); ok && (m.queue(queue) == nil || at <= m.now) {
		t.Fatalf("after PruneKeysBy(%d), NextKeyExpiry = %d of queue %d: a key past its window, or a queue that does not exist", m.now, at, queue)
	}
}

func (mc *machine) Checkpoint(t *rapid.T) {
	mc.checkpoints = append(mc.checkpoints, checkpoint{mc.m.lsn, marshal(t, mc.s)})
}

// Replay rebuilds the state from the log (every record encoded and decoded
// again) and from a checkpoint plus the records after it, checks both against
// the live state byte for byte, and may carry on with a rebuilt state in
// place of the live one, as the queue does after a restart.
func (mc *machine) Replay(t *rapid.T) {
	m := mc.m
	live := marshal(t, mc.s)
	restored, err := state.UnmarshalSnapshot(live)
	if err != nil {
		t.Fatalf("UnmarshalSnapshot of a live snapshot: %v", err)
	}
	if again := marshal(t, restored); !bytes.Equal(live, again) {
		t.Fatalf("snapshot round trip differs")
	}

	// Pruning forgets keys: prune the live state and the rebuilt ones at the
	// same time so that all remember the same keys.
	mc.s.PruneKeys(m.now, keyWindow)
	m.prune()
	live = marshal(t, mc.s)

	replayed := replay(t, state.New(), mc.log)
	replayed.PruneKeys(m.now, keyWindow)
	if got := marshal(t, replayed); !bytes.Equal(got, live) {
		t.Fatalf("replay of %d records differs from the live state", len(mc.log))
	}

	cp := rapid.SampledFrom(mc.checkpoints).Draw(t, "checkpoint")
	resumed, err := state.UnmarshalSnapshot(cp.data)
	if err != nil {
		t.Fatalf("UnmarshalSnapshot of checkpoint %d: %v", cp.lsn, err)
	}
	if resumed.LastLSN() != cp.lsn {
		t.Fatalf("checkpoint at %d restores LastLSN %d", cp.lsn, resumed.LastLSN())
	}
	resumed = replay(t, resumed, mc.log[cp.lsn:])
	resumed.PruneKeys(m.now, keyWindow)
	if got := marshal(t, resumed); !bytes.Equal(got, live) {
		t.Fatalf("checkpoint at %d plus %d records differs from the live state", cp.lsn, len(mc.log)-int(cp.lsn))
	}

	switch rapid.SampledFrom([]string{"keep", "snapshot", "replay", "checkpoint"}).Draw(t, "carry on with") {
	case "keep":
		return
	case "snapshot":
		mc.s = restored
		restored.PruneKeys(m.now, keyWindow)
	case "replay":
		mc.s = replayed
	case "checkpoint":
		mc.s = resumed
	}
	// A rebuilt state holds every waiting item as delayed until the next Promote.
	for _, it := range m.items {
		it.promoted = false
	}
}

// recordAt is where the model's log puts record lsn's body in its segment:
// a made-up place, but one per record, so that a body placed by the wrong
// record shows.
func recordAt(lsn uint64) int64 { return int64(lsn) * 1000 }

// replay applies logged records to s, each decoded from its encoding, in
// the log of its queue.
func replay(t *rapid.T, s *state.State, log []logged) *state.State {
	t.Helper()
	for _, l := range log {
		rec, err := state.Decode(l.typ, l.body)
		if err != nil {
			t.Fatalf("Decode record %d: %v", l.lsn, err)
		}
		if again, err := state.Encode(nil, rec); err != nil || !bytes.Equal(again, l.body) {
			t.Fatalf("record %d does not encode again to the same bytes (%v)", l.lsn, err)
		}
		if err := s.ApplyAt(l.lsn, l.queue, rec, recordAt(l.lsn)); err != nil {
			t.Fatalf("replay record %d of queue %d: %v", l.lsn, l.queue, err)
		}
	}
	return s
}

// bogus is a record type that Apply does not know.
type bogus struct{}

func (bogus) Type() byte { return 200 }
func (bogus) At() int64  { return clockStart }

// invalidCase makes one kind of record that must be refused, when the
// model's state allows it, with the queue whose log it is in. Cases about a
// running lease or one that ran out say so in needs.
type invalidCase struct {
	name  string
	needs string // "", "running" or "over"
	ok    func(m *model) bool
	make  func(t *rapid.T, m *model) (lsn, queue uint64, rec state.Record)
}

func always(*model) bool { return true }

func has(keep func(m *model, it *mItem) bool) func(*model) bool {
	return func(m *model) bool {
		return slices.ContainsFunc(m.items, func(it *mItem) bool { return keep(m, it) })
	}
}

func draw(t *rapid.T, m *model, keep func(m *model, it *mItem) bool, label string) *mItem {
	return m.item(rapid.SampledFrom(ids(m.filter(func(it *mItem) bool { return keep(m, it) }))).Draw(t, label))
}

// anyQueue draws a queue that exists.
func anyQueue(t *rapid.T, m *model) *mQueue {
	return m.queue(rapid.SampledFrom(m.liveIDs()).Draw(t, "queue"))
}

// otherQueue draws a queue that exists other than the one with id (there
// must be one).
func otherQueue(t *rapid.T, m *model, id uint64) *mQueue {
	return m.queue(rapid.SampledFrom(slices.DeleteFunc(m.liveIDs(), func(q uint64) bool { return q == id })).Draw(t, "other queue"))
}

func twoQueues(m *model) bool { return len(m.live()) > 1 }

func and(a, b func(*model) bool) func(*model) bool {
	return func(m *model) bool { return a(m) && b(m) }
}

// home is the queue of item id when it is stored, else any queue.
func home(t *rapid.T, m *model, id uint64) uint64 {
	if it := m.item(id); it != nil && it.status.stored() {
		return it.queue
	}
	return anyQueue(t, m).id
}

func isRunning(m *model, it *mItem) bool  { return m.running(it) }
func isOver(m *model, it *mItem) bool     { return it.status == mLeased && it.leaseEnd <= m.now }
func isDead(_ *model, it *mItem) bool     { return it.status == mDead }
func isPassed(m *model, it *mItem) bool   { return m.passed(it) }
func isLeasable(m *model, it *mItem) bool { return m.leasable(it) }

// notDead draws an ID that no Redrive, Purge or Move may name: a waiting,
// leased or removed item, one of a deleted queue, or one never put.
func notDead(t *rapid.T, m *model) uint64 {
	cands := []uint64{0, uint64(len(m.items) + 1), uint64(len(m.items) + 9)}
	for _, it := range m.items {
		if it.status != mDead {
			cands = append(cands, it.id)
		}
	}
	return rapid.SampledFrom(cands).Draw(t, "not dead")
}

// withIntruder returns a subset of good (possibly empty) with bad inserted
// at a random position.
func withIntruder(t *rapid.T, good []uint64, bad uint64) []uint64 {
	var out []uint64
	if len(good) > 0 {
		out = drawSubset(t, good, "good")
	}
	return insertAnywhere(t, out, bad)
}

func insertAnywhere(t *rapid.T, list []uint64, x uint64) []uint64 {
	return slices.Insert(slices.Clone(list), rapid.IntRange(0, len(list)).Draw(t, "insert at"), x)
}

// endRecord makes a lease-ending record of the drawn kind for receipt.
func endRecord(t *rapid.T, m *model, receipt uint64, kinds []byte) state.Record {
	switch kind := rapid.SampledFrom(kinds).Draw(t, "kind"); kind {
	case state.TypeAck:
		return &state.Ack{Time: m.now, Receipt: receipt}
	case state.TypeExtend:
		return &state.Extend{Time: m.now, Receipt: receipt, LeaseEnd: m.now + 10}
	default:
		return &state.End{Kind: kind, Time: m.now, Receipt: receipt, Due: m.now, Dead: kind == state.TypeDeadLetter}
	}
}

var allEnds = []byte{state.TypeAck, state.TypeExtend, state.TypeNack, state.TypeDeadLetter, state.TypeExpire}

// withDead is a queue that has dead letters.
func withDead(m *model) bool {
	return slices.ContainsFunc(m.live(), func(q *mQueue) bool { return len(q.dead) > 0 })
}

func deadQueueOf(t *rapid.T, m *model) *mQueue {
	return m.queue(draw(t, m, isDead, "dead").queue)
}

// badSettings draws settings that no queue may have.
func badSettings(t *rapid.T) state.Settings {
	set := state.Settings{Visibility: 10, MaxAttempts: 3}
	bad := -rapid.Int64Range(0, 3).Draw(t, "bad value")
	switch rapid.IntRange(0, 5).Draw(t, "bad field") {
	case 0:
		set.Visibility = bad
	case 1:
		set.MaxAttempts = bad
	case 2:
		set.KeyWindow = min(bad, -1)
	case 3:
		set.MaxItems = min(bad, -1)
	case 4:
		set.MaxBytes = min(bad, -1)
	case 5:
		set.MaxInFlight = min(bad, -1)
	}
	return set
}

// keyClash is a dead letter with a key that a stored item of another queue
// holds: moving it there must be refused.
func keyClash(m *model) (*mItem, *mQueue) {
	for _, it := range m.filter(func(it *mItem) bool { return it.status == mDead && it.key != "" }) {
		for _, to := range m.live() {
			if to.id != it.queue && m.storedHolder(to, it.key) != nil {
				return it, to
			}
		}
	}
	return nil, nil
}

// whats is the highest choice among purge (0), redrive (1) and move (2,
// which needs a second queue).
func whats(m *model) int {
	if twoQueues(m) {
		return 2
	}
	return 1
}

// oldIncarnation is a deleted queue that had items or leases and the queue
// that exists under its name now, if one does.
func oldIncarnation(m *model) (old, now *mQueue) {
	for _, q := range m.queues {
		used := slices.ContainsFunc(m.items, func(it *mItem) bool { return it.status == mGone && it.queue == q.id }) ||
			slices.ContainsFunc(m.receipts, func(r receiptOf) bool { return r.queue == q.id })
		if q.deleted && used {
			if cur := m.byName(q.name); cur != nil {
				return q, cur
			}
		}
	}
	return nil, nil
}

var invalidCases = []invalidCase{
	{"lsn out of sequence", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		lsn := rapid.SampledFrom([]uint64{0, m.lsn, m.lsn + 2, m.lsn + 100}).Draw(t, "lsn")
		if lsn == m.lsn+1 {
			lsn = 0
		}
		return lsn, anyQueue(t, m).id, &state.Put{Time: m.now, Items: []state.NewItem{{Body: []byte("x"), Due: m.now}}}
	}},
	{"stale or unknown receipt", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		cands := []uint64{0, m.lsn + 1, m.lsn + 7}
		for _, r := range m.receipts {
			if m.byReceipt(r.receipt) == nil {
				cands = append(cands, r.receipt)
			}
		}
		receipt := rapid.SampledFrom(cands).Draw(t, "receipt")
		return m.lsn + 1, anyQueue(t, m).id, endRecord(t, m, receipt, allEnds)
	}},
	{"lease already over", "over", has(isOver), func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		it := draw(t, m, isOver, "lease")
		kinds := []byte{state.TypeAck, state.TypeExtend, state.TypeNack, state.TypeDeadLetter}
		return m.lsn + 1, it.queue, endRecord(t, m, it.receipt, kinds)
	}},
	{"lease before due", "", has(func(m *model, it *mItem) bool { return it.status == mWaiting && it.due > m.now }),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return it.status == mWaiting && it.due > m.now }, "delayed")
			if rapid.Bool().Draw(t, "just before") {
				m.now = it.due - 1
			}
			return m.lsn + 1, it.queue, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease at or after deadline", "", has(func(m *model, it *mItem) bool { return m.passed(it) && it.due <= m.now }),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return m.passed(it) && it.due <= m.now }, "expired")
			return m.lsn + 1, it.queue, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease of an item not waiting", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		cands := []uint64{0, uint64(len(m.items) + 1)}
		for _, it := range m.items {
			if it.status != mWaiting {
				cands = append(cands, it.id)
			}
		}
		id := rapid.SampledFrom(cands).Draw(t, "id")
		return m.lsn + 1, home(t, m, id), &state.Lease{Time: m.now, ID: id, LeaseEnd: m.now + 10}
	}},
	{"lease that ends before it starts", "", has(isLeasable),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, isLeasable, "ready")
			return m.lsn + 1, it.queue, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now - rapid.Int64Range(0, 5).Draw(t, "back")}
		}},
	{"lease in a paused queue", "", has(func(m *model, it *mItem) bool { return m.leasable(it) && m.queue(it.queue).paused(m.now) }),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return m.leasable(it) && m.queue(it.queue).paused(m.now) }, "ready")
			return m.lsn + 1, it.queue, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease at the MaxInFlight cap", "", has(func(m *model, it *mItem) bool { return m.leasable(it) && m.atCap(m.queue(it.queue)) }),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return m.leasable(it) && m.atCap(m.queue(it.queue)) }, "ready")
			return m.lsn + 1, it.queue, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease of an item of another queue", "", and(twoQueues, has(isLeasable)),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, isLeasable, "ready")
			return m.lsn + 1, otherQueue(t, m, it.queue).id, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease ending in the log of another queue", "running", and(twoQueues, has(isRunning)),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, isRunning, "lease")
			return m.lsn + 1, otherQueue(t, m, it.queue).id, endRecord(t, m, it.receipt, allEnds)
		}},
	{"extend to the past", "running", has(isRunning), func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		it := draw(t, m, isRunning, "lease")
		return m.lsn + 1, it.queue, &state.Extend{Time: m.now, Receipt: it.receipt, LeaseEnd: m.now - rapid.Int64Range(0, 5).Draw(t, "back")}
	}},
	{"deadletter that does not dead-letter", "running", has(isRunning), func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		it := draw(t, m, isRunning, "lease")
		return m.lsn + 1, it.queue, &state.End{Kind: state.TypeDeadLetter, Time: m.now, Receipt: it.receipt, Due: m.now}
	}},
	{"end of an unknown kind", "running", has(isRunning), func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		it := draw(t, m, isRunning, "lease")
		kind := rapid.SampledFrom([]byte{0, state.TypePut, state.TypeLease, state.TypeAck, state.TypePurge, state.TypeCreateQueue, state.TypeMove, 255}).Draw(t, "kind")
		return m.lsn + 1, it.queue, &state.End{Kind: kind, Time: m.now, Receipt: it.receipt, Due: m.now}
	}},
	{"redrive of an item not dead", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := anyQueue(t, m)
		return m.lsn + 1, q.id, &state.Redrive{Time: m.now, IDs: withIntruder(t, q.dead, notDead(t, m))}
	}},
	{"purge of an item not dead", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := anyQueue(t, m)
		return m.lsn + 1, q.id, &state.Purge{Time: m.now, IDs: withIntruder(t, q.dead, notDead(t, m))}
	}},
	{"redrive, purge or move of a dead letter of another queue", "", and(twoQueues, withDead),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, isDead, "dead")
			q := otherQueue(t, m, it.queue)
			named := withIntruder(t, q.dead, it.id)
			switch rapid.IntRange(0, 2).Draw(t, "what") {
			case 0:
				return m.lsn + 1, q.id, &state.Purge{Time: m.now, IDs: named}
			case 1:
				return m.lsn + 1, q.id, &state.Redrive{Time: m.now, IDs: named}
			}
			return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: it.queue, IDs: named}
		}},
	{"redrive, purge or move naming one twice", "", withDead, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := deadQueueOf(t, m)
		named := drawSubset(t, q.dead, "dead")
		named = insertAnywhere(t, named, rapid.SampledFrom(named).Draw(t, "twice"))
		switch rapid.IntRange(0, whats(m)).Draw(t, "what") {
		case 0:
			return m.lsn + 1, q.id, &state.Purge{Time: m.now, IDs: named}
		case 1:
			return m.lsn + 1, q.id, &state.Redrive{Time: m.now, IDs: named}
		}
		return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: otherQueue(t, m, q.id).id, IDs: named}
	}},
	{"redrive, purge or move of nothing", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := anyQueue(t, m)
		switch rapid.IntRange(0, whats(m)).Draw(t, "what") {
		case 0:
			return m.lsn + 1, q.id, &state.Purge{Time: m.now}
		case 1:
			return m.lsn + 1, q.id, &state.Redrive{Time: m.now}
		}
		return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: otherQueue(t, m, q.id).id}
	}},
	{"purge of all naming items", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		return m.lsn + 1, anyQueue(t, m).id, &state.Purge{Time: m.now, All: true, IDs: []uint64{rapid.Uint64Range(0, m.lsn+1).Draw(t, "id")}}
	}},
	{"move into a queue that does not exist", "", withDead, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := deadQueueOf(t, m)
		target := rapid.SampledFrom(m.notQueues()).Draw(t, "target")
		return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: target, IDs: drawSubset(t, q.dead, "dead")}
	}},
	{"move into its own queue", "", withDead, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := deadQueueOf(t, m)
		return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: q.id, IDs: drawSubset(t, q.dead, "dead")}
	}},
	{"move with a key held in the target", "", func(m *model) bool { it, _ := keyClash(m); return it != nil },
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it, to := keyClash(m)
			q := m.queue(it.queue)
			return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: to.id, IDs: withIntruder(t, q.dead, it.id)}
		}},
	{"move of an item not dead", "", twoQueues, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := anyQueue(t, m)
		return m.lsn + 1, q.id, &state.Move{Time: m.now, Target: otherQueue(t, m, q.id).id, IDs: withIntruder(t, q.dead, notDead(t, m))}
	}},
	{"put of no items", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		return m.lsn + 1, anyQueue(t, m).id, &state.Put{Time: m.now}
	}},
	{"put with a deadline not after due", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		due := m.now + rapid.Int64Range(0, 30).Draw(t, "delay")
		bad := state.NewItem{Body: []byte("bad"), Due: due, Deadline: due - rapid.Int64Range(0, 5).Draw(t, "before")}
		items := []state.NewItem{{Body: []byte("good"), Due: m.now}}
		return m.lsn + 1, anyQueue(t, m).id, &state.Put{Time: m.now, Items: slices.Insert(items, rapid.IntRange(0, 1).Draw(t, "at"), bad)}
	}},
	{"put with one key twice", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		key := rapid.SampledFrom(testKeys).Draw(t, "key")
		return m.lsn + 1, anyQueue(t, m).id, &state.Put{Time: m.now, Items: []state.NewItem{
			{Due: m.now, Key: key}, {Due: m.now}, {Due: m.now, Key: key}}}
	}},
	{"put with the key of a stored item", "", has(func(m *model, it *mItem) bool { return it.key != "" && it.status.stored() }),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return it.key != "" && it.status.stored() }, "holder")
			items := []state.NewItem{{Due: m.now}, {Due: m.now, Key: it.key}}
			return m.lsn + 1, it.queue, &state.Put{Time: m.now, Items: items}
		}},
	{"discard of an item not past its deadline", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		cands := []uint64{0, uint64(len(m.items) + 1)}
		for _, it := range m.items {
			if !m.passed(it) {
				cands = append(cands, it.id)
			}
		}
		bad := rapid.SampledFrom(cands).Draw(t, "not passed")
		q := m.queue(home(t, m, bad))
		passed := ids(m.in(q, m.passed))
		return m.lsn + 1, q.id, &state.Discard{Time: m.now, IDs: withIntruder(t, passed, bad)}
	}},
	{"discard of an item of another queue", "", and(twoQueues, has(isPassed)), func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		it := draw(t, m, isPassed, "passed")
		q := otherQueue(t, m, it.queue)
		return m.lsn + 1, q.id, &state.Discard{Time: m.now, IDs: withIntruder(t, ids(m.in(q, m.passed)), it.id)}
	}},
	{"discard naming one twice", "", has(isPassed), func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		q := m.queue(draw(t, m, isPassed, "passed").queue)
		named := drawSubset(t, ids(m.in(q, m.passed)), "passed")
		return m.lsn + 1, q.id, &state.Discard{Time: m.now, IDs: insertAnywhere(t, named, rapid.SampledFrom(named).Draw(t, "twice"))}
	}},
	{"discard of nothing", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		return m.lsn + 1, anyQueue(t, m).id, &state.Discard{Time: m.now}
	}},
	{"record of a queue that does not exist", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		queue := rapid.SampledFrom(m.notQueues()).Draw(t, "queue")
		id := rapid.Uint64Range(0, uint64(len(m.items)+1)).Draw(t, "id")
		recs := []state.Record{
			&state.Put{Time: m.now, Items: []state.NewItem{{Due: m.now}}},
			&state.Lease{Time: m.now, ID: id, LeaseEnd: m.now + 10},
			endRecord(t, m, rapid.Uint64Range(0, m.lsn+1).Draw(t, "receipt"), allEnds),
			&state.SetQueue{Time: m.now, Settings: drawSettings(t)},
			&state.PauseQueue{Time: m.now, Until: math.MaxInt64},
			&state.PauseQueue{Time: m.now},
			&state.DeleteQueue{Time: m.now, Force: true},
			&state.Move{Time: m.now, Target: state.DefaultQueue, IDs: []uint64{id}},
			&state.Redrive{Time: m.now, IDs: []uint64{id}},
			&state.Discard{Time: m.now, IDs: []uint64{id}},
			&state.Purge{Time: m.now, All: true},
		}
		return m.lsn + 1, queue, recs[rapid.IntRange(0, len(recs)-1).Draw(t, "record")]
	}},
	{"receipt or item of a deleted incarnation", "", func(m *model) bool { old, _ := oldIncarnation(m); return old != nil },
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			old, cur := oldIncarnation(m)
			var receipts []uint64
			for _, r := range m.receipts {
				if r.queue == old.id {
					receipts = append(receipts, r.receipt)
				}
			}
			gone := ids(m.filter(func(it *mItem) bool { return it.status == mGone && it.queue == old.id }))
			if len(gone) == 0 || len(receipts) > 0 && rapid.Bool().Draw(t, "a receipt") {
				return m.lsn + 1, cur.id, endRecord(t, m, rapid.SampledFrom(receipts).Draw(t, "receipt"), allEnds)
			}
			id := rapid.SampledFrom(gone).Draw(t, "id")
			recs := []state.Record{
				&state.Lease{Time: m.now, ID: id, LeaseEnd: m.now + 10},
				&state.Redrive{Time: m.now, IDs: []uint64{id}},
				&state.Purge{Time: m.now, IDs: []uint64{id}},
				&state.Discard{Time: m.now, IDs: []uint64{id}},
				&state.Move{Time: m.now, Target: state.DefaultQueue, IDs: []uint64{id}},
			}
			return m.lsn + 1, cur.id, recs[rapid.IntRange(0, len(recs)-1).Draw(t, "record")]
		}},
	{"queue creation in the log of a queue", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		queue := rapid.SampledFrom(append(m.notQueues(), m.liveIDs()...)).Draw(t, "queue")
		if queue == state.DefaultQueue {
			queue = m.lsn + 1
		}
		name := rapid.SampledFrom(queueNames).Draw(t, "name")
		return m.lsn + 1, queue, &state.CreateQueue{Time: m.now, Name: name, Settings: drawSettings(t)}
	}},
	{"create of a queue that exists", "", func(m *model) bool { return len(m.live()) > 1 },
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			q := otherQueue(t, m, state.DefaultQueue)
			return m.lsn + 1, state.DefaultQueue, &state.CreateQueue{Time: m.now, Name: q.name, Settings: drawSettings(t)}
		}},
	{"create with a bad name", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		name := rapid.SampledFrom([]string{"", "-jobs", ".jobs", "_jobs", "jo bs", "jobs/1", "jobs*", "jöbs", "jobs\x00",
			strings.Repeat("j", state.MaxQueueName+1)}).Draw(t, "bad name")
		return m.lsn + 1, state.DefaultQueue, &state.CreateQueue{Time: m.now, Name: name, Settings: drawSettings(t)}
	}},
	{"create or set with bad settings", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		if rapid.Bool().Draw(t, "create") {
			name := fmt.Sprintf("fresh%d", m.lsn)
			return m.lsn + 1, state.DefaultQueue, &state.CreateQueue{Time: m.now, Name: name, Settings: badSettings(t)}
		}
		return m.lsn + 1, anyQueue(t, m).id, &state.SetQueue{Time: m.now, Settings: badSettings(t)}
	}},
	{"pause until a negative time", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		until := rapid.SampledFrom([]int64{-1, math.MinInt64}).Draw(t, "until")
		return m.lsn + 1, anyQueue(t, m).id, &state.PauseQueue{Time: m.now, Until: until}
	}},
	{"delete of the default queue", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		return m.lsn + 1, state.DefaultQueue, &state.DeleteQueue{Time: m.now, Force: rapid.Bool().Draw(t, "force")}
	}},
	{"delete with leases open, not forced", "", has(func(m *model, it *mItem) bool { return it.status == mLeased && it.queue != state.DefaultQueue }),
		func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return it.status == mLeased && it.queue != state.DefaultQueue }, "lease")
			return m.lsn + 1, it.queue, &state.DeleteQueue{Time: m.now}
		}},
	{"unknown record", "", always, func(t *rapid.T, m *model) (uint64, uint64, state.Record) {
		return m.lsn + 1, anyQueue(t, m).id, bogus{}
	}},
}

// Invalid applies a record that the state must refuse without a change.
// Leases are short-lived in the machine, so it first may take one, or take
// one and let it run out, to give the lease rules something to refuse.
func (mc *machine) Invalid(t *rapid.T) {
	needs := rapid.SampledFrom([]string{"", "running", "over"}).Draw(t, "needs")
	switch it := mc.runningLease(t); {
	case it == nil:
		needs = ""
	case needs == "over":
		mc.m.now = it.leaseEnd + rapid.Int64Range(0, 2).Draw(t, "past the end")
	}
	var names []string
	for _, c := range invalidCases {
		if c.needs == needs && c.ok(mc.m) {
			names = append(names, c.name)
		}
	}
	name := rapid.SampledFrom(names).Draw(t, "invalid")
	i := slices.IndexFunc(invalidCases, func(c invalidCase) bool { return c.name == name })
	lsn, queue, rec := invalidCases[i].make(t, mc.m)
	mc.mustReject(t, lsn, queue, rec, name)
}

func itemIDs(items []*state.Item) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// isSubsequence reports whether sub appears in all in the same order.
func isSubsequence(sub, all []uint64) bool {
	i := 0
	for _, x := range all {
		if i < len(sub) && sub[i] == x {
			i++
		}
	}
	return i == len(sub)
}

// itemView is the exported content of an item, comparable with ==.
type itemView struct {
	ID, Queue                 uint64
	Body, Key                 string
	Priority                  int64
	EnqueuedAt, Due, Deadline int64
	Seq                       uint64
	Attempts, Deliveries      int32
	Status                    state.Status
	Receipt                   uint64
	LeaseEnd                  int64
	LastError                 string
	EndedAt                   int64
	History                   string
}

func historyView(h []state.Attempt) string {
	var b strings.Builder
	for _, a := range h {
		fmt.Fprintf(&b, "[%d-%d %s %q]", a.Start, a.End, state.TypeName(a.How), a.Error)
	}
	return b.String()
}

func viewOf(it *state.Item) itemView {
	return itemView{it.ID, it.Queue, fmt.Sprintf("%d/%08x", it.Body.Len, it.Body.Sum), it.Key(), it.Priority, it.EnqueuedAt, it.Due, it.Deadline(), it.Seq,
		it.Attempts, it.Deliveries, it.Status, it.Receipt, it.LeaseEnd, it.LastError(), it.EndedAt(), historyView(it.History())}
}

func (it *mItem) view() itemView {
	st := map[mStatus]state.Status{mWaiting: state.Waiting, mLeased: state.Leased, mDead: state.Dead}[it.status]
	return itemView{it.id, it.queue, fmt.Sprintf("%d/%08x", len(it.body), state.BodySum(it.body)), it.key, it.priority, it.enqueuedAt, it.due, it.deadline, it.seq,
		it.attempts, it.deliveries, st, it.receipt, it.leaseEnd, it.lastError, it.endedAt, historyView(it.history)}
}

func describe(it *state.Item) string {
	if it == nil {
		return "none"
	}
	return fmt.Sprintf("%.2000v", viewOf(it))
}

func describeModel(it *mItem) string {
	if it == nil {
		return "none"
	}
	return fmt.Sprintf("%.2000v", it.view())
}

// queueView is what a queue says of itself.
type queueView struct {
	ID          uint64
	Name        string
	Created     int64
	Settings    state.Settings
	PausedUntil int64
}

// Check compares every query of the state with the model. It runs after
// every action.
func (mc *machine) Check(t *rapid.T) {
	mc.advanceFreeze(t)
	s, m := mc.s, mc.m
	if s.LastLSN() != m.lsn || s.LastTime() != m.lastTime || s.NextID() != uint64(len(m.items)+1) {
		t.Fatalf("LastLSN, LastTime, NextID = %d, %d, %d; model: %d, %d, %d",
			s.LastLSN(), s.LastTime(), s.NextID(), m.lsn, m.lastTime, len(m.items)+1)
	}

	// The queues: those that exist, by ID and by name; none of the others.
	var gotQ, wantQ []queueView
	for _, q := range s.Queues() {
		gotQ = append(gotQ, queueView{q.ID(), q.Name(), q.Created(), q.Settings(), q.PausedUntil()})
	}
	for _, q := range m.live() {
		wantQ = append(wantQ, queueView{q.id, q.name, q.created, q.settings, q.pausedUntil})
		if sq := s.Queue(q.id); sq == nil || sq.ID() != q.id {
			t.Fatalf("Queue(%d) = %v", q.id, sq)
		}
		if sq := s.QueueByName(q.name); sq == nil || sq.ID() != q.id {
			t.Fatalf("QueueByName(%q) is not queue %d", q.name, q.id)
		}
		if got := s.Queue(q.id).Paused(m.now); got != q.paused(m.now) {
			t.Fatalf("queue %d: Paused(%d) = %v, model %v (until %d)", q.id, m.now, got, q.paused(m.now), q.pausedUntil)
		}
	}
	if !slices.Equal(gotQ, wantQ) {
		t.Fatalf("Queues() = %+v\nmodel: %+v", gotQ, wantQ)
	}
	for _, id := range m.notQueues() {
		if s.Queue(id) != nil {
			t.Fatalf("Queue(%d) exists; model: no such queue", id)
		}
	}
	for _, name := range queueNames {
		if m.byName(name) == nil && s.QueueByName(name) != nil {
			t.Fatalf("QueueByName(%q) exists; model: no such queue", name)
		}
	}
	if s.Default() != s.Queue(state.DefaultQueue) || s.QueueByName("") != s.Default() {
		t.Fatalf("the default queue is not Queue(0) and QueueByName(\"\")")
	}
	if c := s.Counters(); c != m.queues[0].counters {
		t.Fatalf("Counters() = %+v, model: %+v", c, m.queues[0].counters)
	}

	// Each item is where the model says, with the model's content; the
	// state stores exactly the items the model calls stored.
	want := make(map[uint64]*state.Gauges)
	var oldestReady, delayedHead = make(map[uint64][]int64), make(map[uint64][]int64)
	for _, q := range m.live() {
		want[q.id] = &state.Gauges{Keys: len(q.keys)}
	}
	total := 0
	var totalBytes int64
	for _, mi := range m.items {
		it := s.Item(mi.id)
		if !mi.status.stored() {
			if it != nil {
				t.Fatalf("item %d is %s in the model but stored as %s", mi.id, mi.status, describe(it))
			}
			continue
		}
		if it == nil {
			t.Fatalf("item %d is %s in the model but not stored", mi.id, mi.status)
		}
		if got, w := viewOf(it), mi.view(); got != w {
			t.Fatalf("item %d:\n got %.3000v\nwant %.3000v", mi.id, got, w)
		}
		g := want[mi.queue]
		g.Items++
		g.Bytes += int64(len(mi.body))
		total++
		totalBytes += int64(len(mi.body))
		switch {
		case mi.status == mLeased:
			g.Leased++
			if l := s.Leased(mi.receipt); l == nil || l.ID != it.ID {
				t.Fatalf("Leased(%d) is not item %d", mi.receipt, mi.id)
			}
		case mi.status == mDead:
			g.Dead++
		case mi.promoted:
			g.Ready++
			oldestReady[mi.queue] = append(oldestReady[mi.queue], mi.due)
		default:
			g.Delayed++
			delayedHead[mi.queue] = append(delayedHead[mi.queue], mi.due)
		}
	}
	for _, r := range m.receipts {
		if mi := m.byReceipt(r.receipt); mi == nil && s.Leased(r.receipt) != nil {
			t.Fatalf("Leased(%d) is item %d; model: the lease is over", r.receipt, s.Leased(r.receipt).ID)
		}
	}
	if s.TotalLen() != total || s.TotalBytes() != totalBytes {
		t.Fatalf("TotalLen, TotalBytes = %d, %d; model: %d, %d", s.TotalLen(), s.TotalBytes(), total, totalBytes)
	}
	for _, q := range m.live() {
		sq, w := s.Queue(q.id), want[q.id]
		if r := oldestReady[q.id]; len(r) > 0 {
			w.OldestReadyDue = slices.Min(r)
		}
		if d := delayedHead[q.id]; len(d) > 0 {
			w.DelayedHeadDue = slices.Min(d)
		}
		if g := sq.Gauges(); g != *w {
			t.Fatalf("queue %d: Gauges() = %+v, model: %+v", q.id, g, *w)
		}
		// GaugesAt counts a waiting item ready once its due time has come,
		// moved out of the delayed heap or not, and moves nothing.
		at := *w
		for _, due := range delayedHead[q.id] {
			if due <= m.now {
				at.Ready++
				at.Delayed--
				if at.OldestReadyDue == 0 || due < at.OldestReadyDue {
					at.OldestReadyDue = due
				}
			}
		}
		if g := sq.GaugesAt(m.now); g != at {
			t.Fatalf("queue %d: GaugesAt(%d) = %+v, model: %+v", q.id, m.now, g, at)
		}
		if g := sq.Gauges(); g != *w {
			t.Fatalf("queue %d: GaugesAt moved items: Gauges() = %+v after it, model: %+v", q.id, g, *w)
		}
		if sq.Len() != w.Items || sq.Bytes() != w.Bytes || sq.Leased() != w.Leased {
			t.Fatalf("queue %d: Len, Bytes, Leased = %d, %d, %d; model: %d, %d, %d", q.id, sq.Len(), sq.Bytes(), sq.Leased(), w.Items, w.Bytes, w.Leased)
		}
		if c := sq.Counters(); c != q.counters {
			t.Fatalf("queue %d: Counters() = %+v, model: %+v", q.id, c, q.counters)
		}
		c := q.counters
		if c.Put+c.MovedIn != uint64(w.Items)+c.Acked+c.Discarded+c.Purged+c.MovedOut {
			t.Fatalf("queue %d: %d put and %d moved in but %d stored, %d acked, %d discarded, %d purged, %d moved out",
				q.id, c.Put, c.MovedIn, w.Items, c.Acked, c.Discarded, c.Purged, c.MovedOut)
		}

		// The ordered queries of the queue.
		if got, w := sq.NextReady(), m.nextReady(q); (got == nil) != (w == nil) || (w != nil && got.ID != w.id) {
			t.Fatalf("queue %d: NextReady() = %s, model: %s", q.id, describe(got), describeModel(w))
		}
		checkMin(t, fmt.Sprintf("queue %d: NextDue", q.id), sq.NextDue,
			m.in(q, func(it *mItem) bool { return it.status == mWaiting && !it.promoted }),
			func(it *mItem) int64 { return it.due })

		// Dead letters, oldest first, as copies with the model's content.
		dead := sq.DeadLetters(0)
		gotDead := make([]uint64, len(dead))
		for i := range dead {
			gotDead[i] = dead[i].ID
			if got, w := viewOf(&dead[i]), m.item(dead[i].ID).view(); got != w {
				t.Fatalf("queue %d: dead letter %d:\n got %.3000v\nwant %.3000v", q.id, dead[i].ID, got, w)
			}
		}
		if !slices.Equal(gotDead, q.dead) {
			t.Fatalf("queue %d: DeadLetters(0) = %v, model: %v", q.id, gotDead, q.dead)
		}
		for _, limit := range []int{1, len(q.dead) - 1} {
			if limit > 0 && limit <= len(q.dead) {
				few := sq.DeadLetters(limit)
				if len(few) != limit || few[limit-1].ID != q.dead[limit-1] {
					t.Fatalf("queue %d: DeadLetters(%d) is not the first %d of %v", q.id, limit, limit, q.dead)
				}
			}
		}
		// Page by page, every dead letter once, in the same order.
		for _, size := range []int{1, 2, 3} {
			var paged []uint64
			var place state.DeadPlace
			for {
				page, last := sq.DeadLettersAfter(place, size)
				if len(page) == 0 {
					break
				}
				if len(page) > size {
					t.Fatalf("queue %d: DeadLettersAfter(%v, %d) returned %d", q.id, place, size, len(page))
				}
				for i := range page {
					paged = append(paged, page[i].ID)
				}
				place = last
			}
			if !slices.Equal(paged, q.dead) {
				t.Fatalf("queue %d: DeadLettersAfter in pages of %d = %v, model: %v", q.id, size, paged, q.dead)
			}
		}

		// Keys, under the queue's window and under shorter ones.
		for _, key := range testKeys {
			for _, window := range []int64{0, 1, keyWindow} {
				gotID, gotHeld := sq.KeyHolder(key, m.now, window)
				wantID, wantHeld := m.holder(q, key, window)
				if gotID != wantID || gotHeld != wantHeld {
					t.Fatalf("queue %d: KeyHolder(%q, %d, %d) = %d, %v; model: %d, %v", q.id, key, m.now, window, gotID, gotHeld, wantID, wantHeld)
				}
			}
		}
	}
	d := *want[state.DefaultQueue]
	if s.Gauges() != d || s.Len() != d.Items || s.Bytes() != d.Bytes {
		t.Fatalf("Gauges, Len, Bytes of the state are not those of the default queue")
	}
	seen := 0
	s.Each(func(it *state.Item) {
		if mi := m.item(it.ID); mi == nil || !mi.status.stored() || mi.queue != it.Queue {
			t.Fatalf("Each visits item %d of queue %d that the model does not store there", it.ID, it.Queue)
		}
		seen++
	})
	if seen != total {
		t.Fatalf("Each visits %d items, model stores %d", seen, total)
	}

	// The ordered queries of the directory.
	checkMin(t, "NextLeaseEnd", s.NextLeaseEnd, m.filter(m.leased), func(it *mItem) int64 { return it.leaseEnd })
	checkMin(t, "NextDeadline", s.NextDeadline, m.filter(func(it *mItem) bool { return it.status == mWaiting && it.deadline != 0 }),
		func(it *mItem) int64 { return it.deadline })
	if got, w := itemIDs(s.ExpiredLeases(m.now, len(m.items)+1)), ids(m.expired()); !slices.Equal(got, w) {
		t.Fatalf("ExpiredLeases(%d) = %v, model: %v", m.now, got, w)
	}
	if got, w := itemIDs(s.PassedDeadlines(m.now, len(m.items)+1)), ids(m.passedDeadlines()); !slices.Equal(got, w) {
		t.Fatalf("PassedDeadlines(%d) = %v, model: %v", m.now, got, w)
	}
	if got, w := itemIDs(s.OpenLeases()), ids(m.leasesByReceipt(m.leased)); !slices.Equal(got, w) {
		t.Fatalf("OpenLeases() = %v, model: %v", got, w)
	}

	// The next key expiry is that of a queue that exists, no later than
	// the oldest key the model remembers as released plus the longest
	// window a queue can have (the state may also count keys since taken
	// again, which only wakes the pruning early).
	var oldest int64
	for _, q := range m.live() {
		for _, k := range q.keys {
			if k.released != 0 && (oldest == 0 || k.released < oldest) {
				oldest = k.released
			}
		}
	}
	at, queue, ok := s.NextKeyExpiry()
	switch {
	case ok && m.queue(queue) == nil:
		t.Fatalf("NextKeyExpiry() = %d, queue %d, which does not exist", at, queue)
	case oldest != 0 && (!ok || at > oldest+max(keyWindow, maxSettingsKeyWindow)):
		t.Fatalf("NextKeyExpiry() = %d, %v; model: a key released at %d", at, ok, oldest)
	}

	// The state survives its snapshot at every step, byte for byte.
	b := marshal(t, s)
	back, err := state.UnmarshalSnapshot(b)
	if err != nil {
		t.Fatalf("UnmarshalSnapshot of a live snapshot: %v", err)
	}
	if again := marshal(t, back); !bytes.Equal(again, b) {
		t.Fatalf("snapshot round trip differs")
	}
	if q := m.queues[0]; len(m.live()) == 1 && q.settings == (state.Settings{}) && q.pausedUntil == 0 && q.counters.MovedIn == 0 && q.counters.MovedOut == 0 {
		checkVersion1(t, b, func(id uint64) []byte { return m.item(id).body })
	}
}

// checkVersion1 checks that the version-1 body of a state that holds only
// a default queue as version 1 knew it (no settings, no pause, no moves)
// decodes to that state without the attempt histories, which version 1
// did not hold. The version-1 body is made from the version-3 one, b, with
// each item's body (given by body) in the place of its reference.
func checkVersion1(t *rapid.T, b []byte, body func(id uint64) []byte) {
	t.Helper()
	root, rest := parseMP(b)
	if len(rest) != 0 {
		t.Fatalf("snapshot has %d bytes after its body", len(rest))
	}
	without := func(n *mpNode, drop ...int) *mpNode {
		out := &mpNode{elems: []*mpNode{}}
		for i, e := range n.elems {
			if !slices.Contains(drop, i) {
				out.elems = append(out.elems, e)
			}
		}
		return out
	}
	counters := root.elems[snapQueues].elems[0].elems[5]
	v1 := &mpNode{elems: []*mpNode{mpUint(1), root.elems[1], root.elems[2], root.elems[3],
		{elems: counters.elems[:9]}, {elems: []*mpNode{}}, {elems: []*mpNode{}}}}
	noHistory := root.clone()
	for i, it := range root.elems[snapItems].elems {
		withBody := it.clone()
		withBody.elems[itemBody] = mpBin(body(mpValue(it.elems[itemID])))
		v1.elems[5].elems = append(v1.elems[5].elems, without(withBody, itemQueue, itemHistory))
		noHistory.elems[snapItems].elems[i].elems[itemHistory] = &mpNode{elems: []*mpNode{}}
	}
	for _, k := range root.elems[snapKeys].elems {
		v1.elems[6].elems = append(v1.elems[6].elems, without(k, keyQueue))
	}
	// Version 4 lists released keys only; version 1 lists the keys the
	// stored items hold too.
	for _, it := range root.elems[snapItems].elems {
		if key := it.elems[itemKey]; !bytes.Equal(key.raw, []byte{0xa0}) {
			v1.elems[6].elems = append(v1.elems[6].elems, &mpNode{elems: []*mpNode{key, it.elems[itemID], mpUint(0)}})
		}
	}
	old, err := state.UnmarshalSnapshot(v1.encode(nil))
	if err != nil {
		t.Fatalf("UnmarshalSnapshot of the version-1 body: %v", err)
	}
	want, err := state.UnmarshalSnapshot(noHistory.encode(nil))
	if err != nil {
		t.Fatalf("UnmarshalSnapshot of the body without histories: %v", err)
	}
	for _, it := range root.elems[snapItems].elems {
		id := mpValue(it.elems[itemID])
		if got, _ := old.Inline(id); len(body(id)) > 0 && !bytes.Equal(got, body(id)) {
			t.Fatalf("the version-1 body holds %q for item %d, want %q", got, id, body(id))
		}
	}
	old.AdoptBodies(want)
	if !bytes.Equal(marshal(t, old), marshal(t, want)) {
		t.Fatalf("the version-1 body decodes to another state than the version-3 body without histories")
	}
}

func checkMin(t *rapid.T, name string, query func() (int64, bool), items []*mItem, field func(*mItem) int64) {
	t.Helper()
	got, ok := query()
	var want int64
	for i, it := range items {
		if i == 0 || field(it) < want {
			want = field(it)
		}
	}
	if ok != (len(items) > 0) || got != want {
		t.Fatalf("%s() = %d, %v; model: %d, %v", name, got, ok, want, len(items) > 0)
	}
}

// TestStateMachine runs random sequences of every record the queue writes,
// valid and invalid, in every queue, against the model, and checks all
// queries after each step; Replay checks that the log and the snapshots
// rebuild the same state.
func TestStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newMachine(t)
		t.Repeat(rapid.StateMachineActions(mc))
	})
}

func TestCutErrorModel(t *testing.T) {
	for _, c := range causes {
		if got, want := state.CutError(c), cutError(c); got != want {
			t.Errorf("CutError(%.40q…) = %d bytes, model %d bytes", c, len(got), len(want))
		}
	}
}
