package state_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/walq/walq/state"
)

// This file checks *state.State against a plain model: a slice of items with
// one status field each, a slice of dead-letter IDs and a fake clock. The
// model knows nothing of heaps, levels or stale entries; every query it
// answers is a linear scan over the items, written from the semantics in
// DESIGN.md and the doc comments of package state, not from its code.

const (
	clockStart = 1_000_000 // the fake clock never reads 0: a zero time means "none" in several fields
	keyWindow  = 50        // KeyWindow of the fake queue, in clock units
)

// testKeys is small so that puts collide on keys often.
var testKeys = []string{"a", "b", "c"}

type mStatus int

const (
	mWaiting mStatus = iota + 1
	mLeased
	mDead
	mAcked
	mDiscarded
	mPurged
)

func (st mStatus) String() string {
	return [...]string{"?", "waiting", "leased", "dead", "acked", "discarded", "purged"}[st]
}

// stored reports whether an item in this status is still held by the state.
func (st mStatus) stored() bool { return st == mWaiting || st == mLeased || st == mDead }

// mItem is the model of one item ever put. Its status is a single field, so
// it is in exactly one state by construction; the checks make sure the
// implementation's many views (item map, heaps, lease map, dead order) agree
// with it.
type mItem struct {
	id         uint64
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
}

type model struct {
	now      int64
	lsn      uint64
	lastTime int64
	items    []*mItem // items[id-1]
	dead     []uint64 // dead letters, oldest first
	pruned   map[string]bool
	counters state.Counters
	receipts []uint64 // every receipt ever handed out
}

func newModel() *model {
	return &model{now: clockStart, pruned: make(map[string]bool)}
}

func (m *model) item(id uint64) *mItem {
	if id == 0 || id > uint64(len(m.items)) {
		return nil
	}
	return m.items[id-1]
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

// leasable is a waiting item that a Lease at now may take.
func (m *model) leasable(it *mItem) bool {
	return it.status == mWaiting && it.due <= m.now && (it.deadline == 0 || m.now < it.deadline)
}

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

// promote is Promote(now): waiting items that are due become ready.
func (m *model) promote() {
	for _, it := range m.items {
		if it.status == mWaiting && it.due <= m.now {
			it.promoted = true
		}
	}
}

// nextReady is the promoted item a delivery takes: smallest priority, then
// earliest due time, then the record that made it waiting, then the ID (the
// order of items within one put or redrive).
func (m *model) nextReady() *mItem {
	var best *mItem
	for _, it := range m.items {
		if it.status != mWaiting || !it.promoted {
			continue
		}
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

// holder answers KeyHolder(key, now, window) for window <= keyWindow: the
// newest item put with the key holds it while stored, and for window after
// it left, unless PruneKeys has forgotten it.
func (m *model) holder(key string, window int64) (uint64, bool) {
	var newest *mItem
	for _, it := range m.items {
		if it.key == key {
			newest = it
		}
	}
	switch {
	case newest == nil || m.pruned[key]:
		return 0, false
	case newest.status.stored() || m.now < newest.removedAt+window:
		return newest.id, true
	}
	return 0, false
}

// keyCount is the number of keys the state still remembers.
func (m *model) keyCount() int {
	n := 0
	for _, key := range testKeys {
		if slices.ContainsFunc(m.items, func(it *mItem) bool { return it.key == key }) && !m.pruned[key] {
			n++
		}
	}
	return n
}

func (m *model) prune() {
	for _, key := range testKeys {
		if _, held := m.holder(key, keyWindow); !held {
			for _, it := range m.items {
				if it.key == key {
					m.pruned[key] = true
				}
			}
		}
	}
}

func (m *model) put(lsn uint64, items []state.NewItem) {
	for _, n := range items {
		m.items = append(m.items, &mItem{
			id: uint64(len(m.items) + 1), body: n.Body, key: n.Key, priority: n.Priority,
			enqueuedAt: m.now, due: n.Due, deadline: n.Deadline, seq: lsn, status: mWaiting,
		})
		if n.Key != "" {
			m.pruned[n.Key] = false
		}
		m.counters.Put++
	}
}

func (m *model) lease(it *mItem, lsn uint64, leaseEnd int64) {
	it.status, it.promoted = mLeased, false
	it.receipt, it.leaseEnd = lsn, leaseEnd
	it.attempts++
	it.deliveries++
	m.receipts = append(m.receipts, lsn)
	m.counters.Delivered++
}

func (m *model) remove(it *mItem, st mStatus) {
	it.status, it.promoted = st, false
	it.receipt, it.leaseEnd = 0, 0
	it.removedAt = m.now
}

func (m *model) end(kind byte, it *mItem, lsn uint64, cause string, due int64, dead bool) {
	it.receipt, it.leaseEnd = 0, 0
	it.endedAt = m.now
	if cause != "" {
		it.lastError = cause
	}
	switch kind {
	case state.TypeNack:
		m.counters.Nacked++
	case state.TypeExpire:
		m.counters.Expired++
	}
	switch {
	case dead:
		it.status = mDead
		m.dead = append(m.dead, it.id)
		m.counters.DeadLettered++
	case it.deadline != 0 && due >= it.deadline:
		m.remove(it, mDiscarded)
		m.counters.Discarded++
	default:
		it.status, it.promoted = mWaiting, false
		it.due, it.seq = due, lsn
	}
}

func (m *model) undead(id uint64) {
	m.dead = slices.DeleteFunc(m.dead, func(d uint64) bool { return d == id })
}

// checkpoint is a snapshot taken mid-history, with the LSN it covers.
type checkpoint struct {
	lsn  uint64
	data []byte
}

// logged is one applied record as the log would hold it.
type logged struct {
	lsn  uint64
	typ  byte
	body []byte
}

// machine drives a *state.State and the model side by side.
type machine struct {
	s           *state.State
	m           *model
	log         []logged
	checkpoints []checkpoint
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

// apply applies a record that must be valid at the next LSN and logs it.
func (mc *machine) apply(t *rapid.T, rec state.Record) uint64 {
	t.Helper()
	lsn := mc.m.lsn + 1
	if err := mc.s.Apply(lsn, rec); err != nil {
		t.Fatalf("Apply(%d, %s %+v): %v", lsn, state.TypeName(rec.Type()), rec, err)
	}
	body, err := state.Encode(nil, rec)
	if err != nil {
		t.Fatalf("Encode(%+v): %v", rec, err)
	}
	mc.log = append(mc.log, logged{lsn, rec.Type(), body})
	mc.m.lsn = lsn
	mc.m.lastTime = max(mc.m.lastTime, rec.At())
	return lsn
}

// mustReject applies a record that must be refused with ErrInvalid and leave
// the state exactly as it was.
func (mc *machine) mustReject(t *rapid.T, lsn uint64, rec state.Record, why string) {
	t.Helper()
	before := marshal(t, mc.s)
	gauges := mc.s.Gauges()
	next := mc.s.NextReady()
	err := mc.s.Apply(lsn, rec)
	if !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("%s: Apply(%d, %s %+v) = %v, want ErrInvalid", why, lsn, state.TypeName(rec.Type()), rec, err)
	}
	if after := marshal(t, mc.s); !bytes.Equal(before, after) {
		t.Fatalf("%s: refused record %+v changed the snapshot", why, rec)
	}
	if g := mc.s.Gauges(); g != gauges {
		t.Fatalf("%s: refused record %+v changed the gauges: %+v, was %+v", why, rec, g, gauges)
	}
	if n := mc.s.NextReady(); n != next {
		t.Fatalf("%s: refused record %+v changed NextReady", why, rec)
	}
}

// runningLease draws a lease that is still running, as a worker holds one:
// when none is running, it gets one first. It returns nil when nothing is
// ready either.
func (mc *machine) runningLease(t *rapid.T) *mItem {
	m := mc.m
	if len(m.filter(m.running)) == 0 {
		mc.getOne(t)
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

func drawCause(t *rapid.T) string {
	return rapid.SampledFrom([]string{"", "boom", "timeout"}).Draw(t, "cause")
}

// Put puts one to four items. A drawn key that the model says is held is
// first shown to be held (by KeyHolder, and by a refused put when a stored
// item holds it) and then dropped from the item.
func (mc *machine) Put(t *rapid.T) {
	m := mc.m
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
		if id, held := m.holder(key, keyWindow); key != "" && held {
			if got, ok := mc.s.KeyHolder(key, m.now, keyWindow); !ok || got != id {
				t.Fatalf("KeyHolder(%q) = %d, %v; model: held by %d", key, got, ok, id)
			}
			if m.item(id).status.stored() {
				mc.mustReject(t, m.lsn+1, &state.Put{Time: m.now, Items: []state.NewItem{{Due: m.now, Key: key}}},
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
	lsn := mc.apply(t, &state.Put{Time: m.now, Items: items})
	m.put(lsn, items)
}

// Flood is a poison batch: many items put at once, each leased and
// dead-lettered, so that redrives and purges work on a long dead-letter list.
func (mc *machine) Flood(t *rapid.T) {
	m := mc.m
	items := make([]state.NewItem, rapid.IntRange(10, 40).Draw(t, "items"))
	for i := range items {
		items[i] = state.NewItem{Body: []byte{byte(i)}, Due: m.now, Priority: int64(i % 2)}
	}
	lsn := mc.apply(t, &state.Put{Time: m.now, Items: items})
	m.put(lsn, items)
	for _, it := range m.items[len(m.items)-len(items):] {
		lsn := mc.apply(t, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 1})
		m.lease(it, lsn, m.now+1)
		end := &state.End{Kind: state.TypeDeadLetter, Time: m.now, Receipt: it.receipt, Cause: "poison", Due: m.now, Dead: true}
		lsn = mc.apply(t, end)
		m.end(end.Kind, it, lsn, end.Cause, end.Due, end.Dead)
	}
}

// Get is one to three workers calling the queue's Get.
func (mc *machine) Get(t *rapid.T) {
	for range rapid.IntRange(1, 3).Draw(t, "workers") {
		mc.getOne(t)
	}
}

// getOne does what the queue's Get does: promote, take the next ready item,
// lease it.
func (mc *machine) getOne(t *rapid.T) {
	m := mc.m
	mc.s.Promote(m.now)
	m.promote()
	want := m.nextReady()
	got := mc.s.NextReady()
	if (want == nil) != (got == nil) || (want != nil && want.id != got.ID) {
		t.Fatalf("NextReady at %d = %s, model: %s", m.now, describe(got), describeModel(want))
	}
	early := m.filter(func(it *mItem) bool { return it.status == mWaiting && it.due > m.now })
	if len(early) > 0 && rapid.Bool().Draw(t, "try a delayed item") {
		it := slices.MinFunc(early, func(a, b *mItem) int { return cmp.Compare(a.due, b.due) })
		mc.mustReject(t, m.lsn+1, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: it.due + 10}, "lease before due")
	}
	if want == nil {
		return
	}
	rec := &state.Lease{Time: m.now, ID: want.id, LeaseEnd: m.now + rapid.Int64Range(1, 60).Draw(t, "visibility")}
	if !m.leasable(want) {
		mc.mustReject(t, m.lsn+1, rec, "lease at or after the deadline")
		return
	}
	lsn := mc.apply(t, rec)
	m.lease(want, lsn, rec.LeaseEnd)
}

// Extend moves a lease's end, often past or before another lease's end.
func (mc *machine) Extend(t *rapid.T) {
	m := mc.m
	if rapid.Bool().Draw(t, "another worker") {
		mc.getOne(t)
	}
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	rec := &state.Extend{Time: m.now, Receipt: it.receipt, LeaseEnd: m.now + rapid.Int64Range(1, 60).Draw(t, "extension")}
	mc.apply(t, rec)
	it.leaseEnd = rec.LeaseEnd
}

func (mc *machine) Ack(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	mc.apply(t, &state.Ack{Time: m.now, Receipt: it.receipt})
	m.remove(it, mAcked)
	m.counters.Acked++
}

func (mc *machine) Nack(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	rec := &state.End{Kind: state.TypeNack, Time: m.now, Receipt: it.receipt, Cause: drawCause(t),
		Due: drawDue(t, m, it), Dead: rapid.IntRange(0, 3).Draw(t, "out of attempts") == 0}
	lsn := mc.apply(t, rec)
	m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
}

func (mc *machine) DeadLetter(t *rapid.T) {
	m := mc.m
	it := mc.runningLease(t)
	if it == nil {
		return
	}
	rec := &state.End{Kind: state.TypeDeadLetter, Time: m.now, Receipt: it.receipt, Cause: drawCause(t), Due: m.now, Dead: true}
	lsn := mc.apply(t, rec)
	m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
}

// ExpireByTime moves the clock and expires what ExpiredLeases reports, as
// the queue's timer does.
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
		lsn := mc.apply(t, rec)
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
		rec := &state.End{Kind: state.TypeExpire, Time: m.now, Receipt: it.receipt, Cause: "lease open at recovery",
			Due: drawDue(t, m, it), Dead: rapid.IntRange(0, 3).Draw(t, "out of attempts") == 0}
		lsn := mc.apply(t, rec)
		m.end(rec.Kind, it, lsn, rec.Cause, rec.Due, rec.Dead)
	}
}

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
	discard := drawSubset(t, ids(want), "discard")
	mc.apply(t, &state.Discard{Time: m.now, IDs: discard})
	for _, id := range discard {
		m.remove(m.item(id), mDiscarded)
		m.counters.Discarded++
	}
}

func (mc *machine) Redrive(t *rapid.T) {
	m := mc.m
	if len(m.dead) == 0 {
		t.Skip("no dead letters")
	}
	redrive := drawSubset(t, m.dead, "redrive")
	lsn := mc.apply(t, &state.Redrive{Time: m.now, IDs: redrive})
	for _, id := range redrive {
		it := m.item(id)
		it.status, it.promoted = mWaiting, false
		it.attempts = 0
		it.due, it.seq = m.now, lsn
		m.undead(id)
		m.counters.Redriven++
	}
}

func (mc *machine) Purge(t *rapid.T) {
	m := mc.m
	var purge []uint64
	if rapid.Bool().Draw(t, "all") {
		mc.apply(t, &state.Purge{Time: m.now, All: true})
		purge = slices.Clone(m.dead)
	} else {
		if len(m.dead) == 0 {
			t.Skip("no dead letters")
		}
		purge = drawSubset(t, m.dead, "purge")
		mc.apply(t, &state.Purge{Time: m.now, IDs: purge})
	}
	for _, id := range purge {
		m.remove(m.item(id), mPurged)
		m.undead(id)
		m.counters.Purged++
	}
}

// Advance moves the clock, often to exactly the next time at which a rule
// changes its answer: the boundaries are where off-by-one mistakes live.
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
		case !it.status.stored() && it.key != "":
			targets = append(targets, it.removedAt+keyWindow-1, it.removedAt+keyWindow)
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

// replay applies logged records to s, each decoded from its encoding.
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
		if err := s.Apply(l.lsn, rec); err != nil {
			t.Fatalf("replay record %d: %v", l.lsn, err)
		}
	}
	return s
}

// bogus is a record type that Apply does not know.
type bogus struct{}

func (bogus) Type() byte { return 200 }
func (bogus) At() int64  { return clockStart }

// invalidCase makes one kind of record that must be refused, when the
// model's state allows it. Cases about a running lease or one that ran out
// say so in needs.
type invalidCase struct {
	name  string
	needs string // "", "running" or "over"
	ok    func(m *model) bool
	make  func(t *rapid.T, m *model) (lsn uint64, rec state.Record)
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

func isRunning(m *model, it *mItem) bool { return m.running(it) }
func isOver(m *model, it *mItem) bool    { return it.status == mLeased && it.leaseEnd <= m.now }
func isDead(_ *model, it *mItem) bool    { return it.status == mDead }
func isPassed(m *model, it *mItem) bool  { return m.passed(it) }

// notDead draws an ID that no Redrive or Purge may name: a waiting, leased
// or removed item, or one never put.
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

var invalidCases = []invalidCase{
	{"lsn out of sequence", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		lsn := rapid.SampledFrom([]uint64{0, m.lsn, m.lsn + 2, m.lsn + 100}).Draw(t, "lsn")
		if lsn == m.lsn+1 {
			lsn = 0
		}
		return lsn, &state.Put{Time: m.now, Items: []state.NewItem{{Body: []byte("x"), Due: m.now}}}
	}},
	{"stale or unknown receipt", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		cands := []uint64{0, m.lsn + 1, m.lsn + 7}
		for _, r := range m.receipts {
			if m.byReceipt(r) == nil {
				cands = append(cands, r)
			}
		}
		receipt := rapid.SampledFrom(cands).Draw(t, "receipt")
		kinds := []byte{state.TypeAck, state.TypeExtend, state.TypeNack, state.TypeDeadLetter, state.TypeExpire}
		return m.lsn + 1, endRecord(t, m, receipt, kinds)
	}},
	{"lease already over", "over", has(isOver), func(t *rapid.T, m *model) (uint64, state.Record) {
		it := draw(t, m, isOver, "lease")
		kinds := []byte{state.TypeAck, state.TypeExtend, state.TypeNack, state.TypeDeadLetter}
		return m.lsn + 1, endRecord(t, m, it.receipt, kinds)
	}},
	{"lease before due", "", has(func(m *model, it *mItem) bool { return it.status == mWaiting && it.due > m.now }),
		func(t *rapid.T, m *model) (uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return it.status == mWaiting && it.due > m.now }, "delayed")
			if rapid.Bool().Draw(t, "just before") {
				m.now = it.due - 1
			}
			return m.lsn + 1, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease at or after deadline", "", has(func(m *model, it *mItem) bool { return m.passed(it) && it.due <= m.now }),
		func(t *rapid.T, m *model) (uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return m.passed(it) && it.due <= m.now }, "expired")
			return m.lsn + 1, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now + 10}
		}},
	{"lease of an item not waiting", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		cands := []uint64{0, uint64(len(m.items) + 1)}
		for _, it := range m.items {
			if it.status != mWaiting {
				cands = append(cands, it.id)
			}
		}
		id := rapid.SampledFrom(cands).Draw(t, "id")
		return m.lsn + 1, &state.Lease{Time: m.now, ID: id, LeaseEnd: m.now + 10}
	}},
	{"lease that ends before it starts", "", has(func(m *model, it *mItem) bool { return m.leasable(it) }),
		func(t *rapid.T, m *model) (uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return m.leasable(it) }, "ready")
			return m.lsn + 1, &state.Lease{Time: m.now, ID: it.id, LeaseEnd: m.now - rapid.Int64Range(0, 5).Draw(t, "back")}
		}},
	{"extend to the past", "running", has(isRunning), func(t *rapid.T, m *model) (uint64, state.Record) {
		it := draw(t, m, isRunning, "lease")
		return m.lsn + 1, &state.Extend{Time: m.now, Receipt: it.receipt, LeaseEnd: m.now - rapid.Int64Range(0, 5).Draw(t, "back")}
	}},
	{"deadletter that does not dead-letter", "running", has(isRunning), func(t *rapid.T, m *model) (uint64, state.Record) {
		it := draw(t, m, isRunning, "lease")
		return m.lsn + 1, &state.End{Kind: state.TypeDeadLetter, Time: m.now, Receipt: it.receipt, Due: m.now}
	}},
	{"end of an unknown kind", "running", has(isRunning), func(t *rapid.T, m *model) (uint64, state.Record) {
		it := draw(t, m, isRunning, "lease")
		kind := rapid.SampledFrom([]byte{0, state.TypePut, state.TypeLease, state.TypeAck, state.TypePurge, 11, 255}).Draw(t, "kind")
		return m.lsn + 1, &state.End{Kind: kind, Time: m.now, Receipt: it.receipt, Due: m.now}
	}},
	{"redrive of an item not dead", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		return m.lsn + 1, &state.Redrive{Time: m.now, IDs: withIntruder(t, m.dead, notDead(t, m))}
	}},
	{"purge of an item not dead", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		return m.lsn + 1, &state.Purge{Time: m.now, IDs: withIntruder(t, m.dead, notDead(t, m))}
	}},
	{"redrive or purge naming one twice", "", has(isDead), func(t *rapid.T, m *model) (uint64, state.Record) {
		named := drawSubset(t, m.dead, "dead")
		named = insertAnywhere(t, named, rapid.SampledFrom(named).Draw(t, "twice"))
		if rapid.Bool().Draw(t, "purge") {
			return m.lsn + 1, &state.Purge{Time: m.now, IDs: named}
		}
		return m.lsn + 1, &state.Redrive{Time: m.now, IDs: named}
	}},
	{"redrive or purge of nothing", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		if rapid.Bool().Draw(t, "purge") {
			return m.lsn + 1, &state.Purge{Time: m.now}
		}
		return m.lsn + 1, &state.Redrive{Time: m.now}
	}},
	{"purge of all naming items", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		return m.lsn + 1, &state.Purge{Time: m.now, All: true, IDs: []uint64{rapid.Uint64Range(0, m.lsn+1).Draw(t, "id")}}
	}},
	{"put of no items", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		return m.lsn + 1, &state.Put{Time: m.now}
	}},
	{"put with a deadline not after due", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		due := m.now + rapid.Int64Range(0, 30).Draw(t, "delay")
		bad := state.NewItem{Body: []byte("bad"), Due: due, Deadline: due - rapid.Int64Range(0, 5).Draw(t, "before")}
		items := []state.NewItem{{Body: []byte("good"), Due: m.now}}
		return m.lsn + 1, &state.Put{Time: m.now, Items: slices.Insert(items, rapid.IntRange(0, 1).Draw(t, "at"), bad)}
	}},
	{"put with one key twice", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		key := rapid.SampledFrom(testKeys).Draw(t, "key")
		return m.lsn + 1, &state.Put{Time: m.now, Items: []state.NewItem{
			{Due: m.now, Key: key}, {Due: m.now}, {Due: m.now, Key: key}}}
	}},
	{"put with the key of a stored item", "", has(func(m *model, it *mItem) bool { return it.key != "" && it.status.stored() }),
		func(t *rapid.T, m *model) (uint64, state.Record) {
			it := draw(t, m, func(m *model, it *mItem) bool { return it.key != "" && it.status.stored() }, "holder")
			items := []state.NewItem{{Due: m.now}, {Due: m.now, Key: it.key}}
			return m.lsn + 1, &state.Put{Time: m.now, Items: items}
		}},
	{"discard of an item not past its deadline", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		cands := []uint64{0, uint64(len(m.items) + 1)}
		for _, it := range m.items {
			if !m.passed(it) {
				cands = append(cands, it.id)
			}
		}
		bad := rapid.SampledFrom(cands).Draw(t, "not passed")
		return m.lsn + 1, &state.Discard{Time: m.now, IDs: withIntruder(t, ids(m.passedDeadlines()), bad)}
	}},
	{"discard naming one twice", "", has(isPassed), func(t *rapid.T, m *model) (uint64, state.Record) {
		named := drawSubset(t, ids(m.passedDeadlines()), "passed")
		return m.lsn + 1, &state.Discard{Time: m.now, IDs: insertAnywhere(t, named, rapid.SampledFrom(named).Draw(t, "twice"))}
	}},
	{"discard of nothing", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		return m.lsn + 1, &state.Discard{Time: m.now}
	}},
	{"unknown record", "", always, func(t *rapid.T, m *model) (uint64, state.Record) {
		return m.lsn + 1, bogus{}
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
	lsn, rec := invalidCases[i].make(t, mc.m)
	mc.mustReject(t, lsn, rec, name)
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
	ID                        uint64
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
}

func viewOf(it *state.Item) itemView {
	return itemView{it.ID, string(it.Body), it.Key, it.Priority, it.EnqueuedAt, it.Due, it.Deadline, it.Seq,
		it.Attempts, it.Deliveries, it.Status, it.Receipt, it.LeaseEnd, it.LastError, it.EndedAt}
}

func (it *mItem) view() itemView {
	st := map[mStatus]state.Status{mWaiting: state.Waiting, mLeased: state.Leased, mDead: state.Dead}[it.status]
	return itemView{it.id, string(it.body), it.key, it.priority, it.enqueuedAt, it.due, it.deadline, it.seq,
		it.attempts, it.deliveries, st, it.receipt, it.leaseEnd, it.lastError, it.endedAt}
}

func describe(it *state.Item) string {
	if it == nil {
		return "none"
	}
	return fmt.Sprintf("%+v", viewOf(it))
}

func describeModel(it *mItem) string {
	if it == nil {
		return "none"
	}
	return fmt.Sprintf("%+v", it.view())
}

// Check compares every query of the state with the model. It runs after
// every action.
func (mc *machine) Check(t *rapid.T) {
	s, m := mc.s, mc.m
	if s.LastLSN() != m.lsn || s.LastTime() != m.lastTime || s.NextID() != uint64(len(m.items)+1) {
		t.Fatalf("LastLSN, LastTime, NextID = %d, %d, %d; model: %d, %d, %d",
			s.LastLSN(), s.LastTime(), s.NextID(), m.lsn, m.lastTime, len(m.items)+1)
	}
	if c := s.Counters(); c != m.counters {
		t.Fatalf("Counters() = %+v, model: %+v", c, m.counters)
	}

	// Each item is where the model says, with the model's content; the
	// state stores exactly the items the model calls stored.
	var want state.Gauges
	var oldestReady, delayedHead []int64
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
			t.Fatalf("item %d:\n got %+v\nwant %+v", mi.id, got, w)
		}
		want.Items++
		want.Bytes += int64(len(mi.body))
		switch {
		case mi.status == mLeased:
			want.Leased++
			if s.Leased(mi.receipt) != it {
				t.Fatalf("Leased(%d) is not item %d", mi.receipt, mi.id)
			}
		case mi.status == mDead:
			want.Dead++
		case mi.promoted:
			want.Ready++
			oldestReady = append(oldestReady, mi.due)
		default:
			want.Delayed++
			delayedHead = append(delayedHead, mi.due)
		}
	}
	if len(oldestReady) > 0 {
		want.OldestReadyDue = slices.Min(oldestReady)
	}
	if len(delayedHead) > 0 {
		want.DelayedHeadDue = slices.Min(delayedHead)
	}
	want.Keys = m.keyCount()
	if g := s.Gauges(); g != want {
		t.Fatalf("Gauges() = %+v, model: %+v", g, want)
	}
	if s.Len() != want.Items || s.Bytes() != want.Bytes {
		t.Fatalf("Len, Bytes = %d, %d; model: %d, %d", s.Len(), s.Bytes(), want.Items, want.Bytes)
	}
	seen := 0
	s.Each(func(it *state.Item) {
		if mi := m.item(it.ID); mi == nil || !mi.status.stored() {
			t.Fatalf("Each visits item %d that the model does not store", it.ID)
		}
		seen++
	})
	if seen != want.Items {
		t.Fatalf("Each visits %d items, model stores %d", seen, want.Items)
	}
	c := m.counters
	if c.Put != uint64(want.Items)+c.Acked+c.Discarded+c.Purged {
		t.Fatalf("%d put but %d stored, %d acked, %d discarded, %d purged", c.Put, want.Items, c.Acked, c.Discarded, c.Purged)
	}

	// The ordered queries.
	if got, w := s.NextReady(), m.nextReady(); (got == nil) != (w == nil) || (w != nil && got.ID != w.id) {
		t.Fatalf("NextReady() = %s, model: %s", describe(got), describeModel(w))
	}
	checkMin(t, "NextDue", s.NextDue, m.filter(func(it *mItem) bool { return it.status == mWaiting && !it.promoted }),
		func(it *mItem) int64 { return it.due })
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

	// Dead letters, oldest first, as copies with the model's content.
	dead := s.DeadLetters(0)
	gotDead := make([]uint64, len(dead))
	for i := range dead {
		gotDead[i] = dead[i].ID
		if got, w := viewOf(&dead[i]), m.item(dead[i].ID).view(); got != w {
			t.Fatalf("dead letter %d:\n got %+v\nwant %+v", dead[i].ID, got, w)
		}
	}
	if !slices.Equal(gotDead, m.dead) {
		t.Fatalf("DeadLetters(0) = %v, model: %v", gotDead, m.dead)
	}
	for _, limit := range []int{1, len(m.dead) - 1} {
		if limit > 0 && limit <= len(m.dead) {
			few := s.DeadLetters(limit)
			if len(few) != limit || few[limit-1].ID != m.dead[limit-1] {
				t.Fatalf("DeadLetters(%d) is not the first %d of %v", limit, limit, m.dead)
			}
		}
	}

	// Keys, under the queue's window and under shorter ones.
	for _, key := range testKeys {
		for _, window := range []int64{0, 1, keyWindow} {
			gotID, gotHeld := s.KeyHolder(key, m.now, window)
			wantID, wantHeld := m.holder(key, window)
			if gotID != wantID || gotHeld != wantHeld {
				t.Fatalf("KeyHolder(%q, %d, %d) = %d, %v; model: %d, %v", key, m.now, window, gotID, gotHeld, wantID, wantHeld)
			}
		}
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
// valid and invalid, against the model, and checks all queries after each
// step; Replay checks that the log and the snapshots rebuild the same state.
func TestStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newMachine(t)
		t.Repeat(rapid.StateMachineActions(mc))
	})
}
