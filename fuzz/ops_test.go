package fuzz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
)

// FuzzOps drives a live queue (ManualClock, real directory) with an
// operation sequence decoded from the input and checks every result, and
// the Stats after every operation, against a plain model of the semantics
// in DESIGN.md: puts with delays, deadlines, priorities and keys; leases,
// extensions, acks, nacks, dead-lettering, expiry, redrive and purge;
// compaction; close-and-reopen, after which every open lease has ended as
// expired; and wall-clock steps, back and forward, apart from the passing
// of time. At the end the queue is closed and reopened once more and must
// come back as the model says.
//
// The model runs on queue time: the wall clock read at open (raised to the
// newest time in the log when the wall clock is behind it) plus the time
// advanced since. A wall step changes nothing observable but the offset by
// which absolute times are translated at the API: a lease lasts its
// visibility, a delay its delay, a deadline its span, however the wall
// clock moves, within a run or across a reopen.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{0, 0, 0, 0, 3, 3, 5, 0, 3, 6, 1, 3, 7, 0, 10, 0, 11, 0, 13, 3, 9, 40, 3})
	f.Add([]byte{2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 9, 30, 9, 30, 3, 3, 13, 3, 7, 1, 10, 1, 0})
	f.Add([]byte{0, 5, 4, 1, 2, 0, 3, 9, 8, 3, 9, 9, 3, 6, 0, 7, 0, 9, 25, 12, 11, 0, 13, 4, 5})
	// Clock steps: back and forward around leases, delays and deadlines,
	// and back across reopens.
	f.Add([]byte{0, 0x28, 0, 9, 3, 14, 0x83, 3, 14, 0x05, 9, 19, 13, 14, 0x88, 0, 0x08, 0, 3, 13, 9, 21, 3, 5, 0})
	f.Add([]byte{0, 0x08, 1, 5, 14, 0x8f, 13, 3, 14, 0x8f, 13, 9, 8, 3, 8, 0, 3, 14, 0x01, 9, 25, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			data = data[:400] // keep one execution short
		}
		h := newOpsHarness(t)
		defer h.close()
		in := &input{data: data}
		for step := 0; !in.empty(); step++ {
			h.step(step, in)
			h.compareStats(fmt.Sprintf("after step %d", step))
		}
		h.reopen("final reopen")
	})
}

const (
	opsVisibility  = 10 * time.Second
	opsMaxAttempts = 3
	opsKeyWindow   = 30 * time.Second
	opsMaxItems    = 12
)

func opsBackoff(attempt int) time.Duration { return time.Duration(attempt) * time.Second }

type input struct{ data []byte }

func (in *input) empty() bool { return len(in.data) == 0 }

func (in *input) byte() byte {
	if len(in.data) == 0 {
		return 0
	}
	b := in.data[0]
	in.data = in.data[1:]
	return b
}

// modelItem is an item as the model sees it.
type modelItem struct {
	id         uint64
	body       []byte
	key        string
	priority   int
	enqueued   int64
	due        int64
	deadline   int64
	seq        uint64 // order of the transition that made it waiting: FIFO among equals
	attempts   int
	deliveries int
	status     string // "waiting", "leased", "dead"
	receipt    walq.Receipt
	leaseNo    int // index of receipt in opsHarness.receipts: lease order
	leaseEnd   int64
	lastError  string
	deadAt     int64
	deadSeq    uint64
}

type modelKey struct {
	id       uint64
	released int64 // 0 while the item is stored
}

type model struct {
	items    map[uint64]*modelItem
	keys     map[string]*modelKey
	nextID   uint64
	seq      uint64
	counters walq.Stats // only the counter fields are used
	lateAcks uint64
}

type opsHarness struct {
	t     *testing.T
	dir   string
	clock *walq.ManualClock
	// qnow is the model's queue time; lastTime the newest time of a record
	// the model says the queue wrote (where queue time resumes at a reopen
	// with the wall clock behind it).
	qnow, lastTime int64
	opts           walq.Options
	q              *walq.Queue
	m              model
	receipts       []walq.Receipt // every receipt handed out, stale ones too, in lease order
	handedOut      map[walq.Receipt]bool
	bodies         int
}

func newOpsHarness(t *testing.T) *opsHarness {
	h := &opsHarness{t: t, dir: t.TempDir(), clock: walq.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		handedOut: make(map[walq.Receipt]bool)}
	h.opts = walq.Options{
		Visibility: opsVisibility, MaxAttempts: opsMaxAttempts, Backoff: opsBackoff, KeyWindow: opsKeyWindow,
		MaxItems: opsMaxItems, SegmentSize: 4096, Sync: walq.SyncNever, DisableAutoCompact: true, Clock: h.clock,
	}
	h.m = model{items: make(map[uint64]*modelItem), keys: make(map[string]*modelKey), nextID: 1}
	h.qnow = h.clock.Now().UnixNano()
	var err error
	if h.q, err = walq.Open(h.dir, h.opts); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return h
}

// wrote notes that the queue wrote a record at the current queue time.
func (h *opsHarness) wrote() { h.lastTime = max(h.lastTime, h.qnow) }

// toWall translates a queue time as the queue does at the API: by the
// offset between the wall clock and queue time now.
func (h *opsHarness) toWall(at int64) time.Time {
	return time.Unix(0, at+h.clock.Now().UnixNano()-h.qnow)
}

func (h *opsHarness) close() {
	if h.q != nil {
		h.q.Close()
	}
}

// now is the model's queue time.
func (h *opsHarness) now() int64 { return h.qnow }

func (h *opsHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf(format, args...)
}

func (h *opsHarness) step(step int, in *input) {
	h.t.Helper()
	switch op := in.byte() % 15; op {
	case 0, 1:
		h.put(step, in, 1)
	case 2:
		h.put(step, in, 1+int(in.byte()%3))
	case 3, 4:
		h.get(step)
	case 5:
		r, foreign := h.pickReceipt(in)
		h.endLease(step, "ack", r, foreign)
	case 6:
		r, foreign := h.pickReceipt(in)
		h.endLease(step, "nack", r, foreign)
	case 7:
		r, foreign := h.pickReceipt(in)
		h.endLease(step, "dead", r, foreign)
	case 8:
		r, foreign := h.pickReceipt(in)
		h.extend(step, r, foreign, time.Duration(1+in.byte()%20)*time.Second)
	case 9:
		h.advance(step, time.Duration(in.byte()%32)*500*time.Millisecond)
	case 10:
		h.redriveOrPurge(step, in, "redrive")
	case 11:
		h.redriveOrPurge(step, in, "purge")
	case 12:
		before := h.q.Stats().LastLSN
		if err := h.q.Compact(); err != nil {
			h.fatalf("step %d: Compact: %v", step, err)
		}
		if h.q.Stats().LastLSN > before {
			// It copied bodies forward out of a sparse sealed segment, in
			// relocate records written at the queue's now: those move the
			// log's newest time, where a reopen behind the wall clock
			// starts.
			h.wrote()
		}
	case 13:
		h.reopen(fmt.Sprintf("step %d: reopen", step))
	case 14:
		h.stepWall(step, in.byte())
	}
}

// pickReceipt picks a receipt handed out (stale or not) or makes one that
// never was: foreign reports a receipt this queue did not issue (the zero
// Receipt, or one of another directory or queue), which every call must
// refuse with ErrInvalid and no record; the others name no open lease of
// this directory (ErrLeaseLost).
func (h *opsHarness) pickReceipt(in *input) (r walq.Receipt, foreign bool) {
	i := int(in.byte())
	if i < len(h.receipts) {
		return h.receipts[len(h.receipts)-1-i], false
	}
	if len(h.receipts) == 0 {
		return walq.Receipt{}, true
	}
	// Made from the text form of the newest receipt: <dir>-<queue>-<lease>.
	dir := h.receipts[len(h.receipts)-1].String()[:32]
	text := fmt.Sprintf("%s-0-%x", dir, 1_000_000+i) // this directory, a lease never handed out
	switch i % 3 {
	case 1: // another directory
		other := []byte(dir)
		other[i%32] = "123456789abcdef0"[strings.IndexByte("0123456789abcdef", other[i%32])]
		text, foreign = fmt.Sprintf("%s-0-%x", other, 1_000_000+i), true
	case 2: // another queue of this directory
		text, foreign = fmt.Sprintf("%s-%x-%x", dir, 1+i, 1_000_000+i), true
	}
	r, err := walq.ParseReceipt(text)
	if err != nil {
		h.fatalf("ParseReceipt(%q): %v", text, err)
	}
	return r, foreign
}

// refused checks the outcome of a call with a receipt the queue did not
// issue: ErrInvalid, and no record written.
func (h *opsHarness) refused(step int, call string, r walq.Receipt, lsn uint64, err error) {
	h.t.Helper()
	if !errors.Is(err, walq.ErrInvalid) {
		h.fatalf("step %d: %s of foreign receipt %v: %v, want ErrInvalid", step, call, r, err)
	}
	if after := h.q.Stats().LastLSN; after != lsn {
		h.fatalf("step %d: %s of foreign receipt %v wrote records: last LSN %d, was %d", step, call, r, after, lsn)
	}
}

func (h *opsHarness) keyHeld(key string, now int64) (uint64, bool) {
	k := h.m.keys[key]
	if k == nil || (k.released != 0 && k.released+int64(opsKeyWindow) <= now) {
		return 0, false
	}
	return k.id, true
}

func (h *opsHarness) put(step int, in *input, n int) {
	h.t.Helper()
	now := h.now()
	items := make([]walq.Item, n)
	for i := range items {
		h.bodies++
		flags := in.byte()
		it := walq.Item{Body: fmt.Appendf(nil, "item %d %s", h.bodies, bytes.Repeat([]byte{'.'}, int(flags%8)))}
		it.Priority = int(in.byte() % 3)
		if flags&0x08 != 0 {
			it.Delay = time.Duration(in.byte()%8) * 500 * time.Millisecond
		}
		if flags&0x10 != 0 {
			it.Key = fmt.Sprintf("k%d", in.byte()%4)
		}
		if flags&0x20 != 0 {
			// Sometimes at or before the due time: ErrInvalidDeadline.
			// A wall-clock time: the queue takes it as that span from now.
			it.Deadline = h.clock.Now().Add(it.Delay + time.Duration(int(in.byte()%16)-2)*time.Second)
		}
		items[i] = it
	}

	// The model's answer.
	var wantErr error
	wantIDs := make([]uint64, n)
	dup := make([]bool, n)
	inBatch := make(map[string]int)
	accepted := 0
	deadlineOf := func(it walq.Item) int64 { return now + int64(it.Deadline.Sub(h.clock.Now())) }
	for i, it := range items {
		due := now + int64(it.Delay)
		if !it.Deadline.IsZero() && deadlineOf(it) <= due {
			wantErr = walq.ErrInvalidDeadline
			break
		}
		if it.Key != "" {
			if id, held := h.keyHeld(it.Key, now); held {
				wantIDs[i], dup[i] = id, true
				continue
			}
			if first, ok := inBatch[it.Key]; ok {
				wantIDs[i], dup[i] = uint64(first), true // resolved below
				continue
			}
			inBatch[it.Key] = i
		}
		accepted++
	}
	if wantErr == nil && len(h.m.items)+accepted > opsMaxItems {
		wantErr = walq.ErrFull
	}

	var ids []uint64
	var err error
	if n == 1 {
		var id uint64
		it := items[0]
		id, err = h.q.Put(context.Background(), it.Body, walq.WithDelay(it.Delay), walq.WithDeadline(it.Deadline),
			walq.WithPriority(it.Priority), walq.WithKey(it.Key))
		ids = []uint64{id}
	} else {
		ids, err = h.q.PutBatch(context.Background(), items)
	}
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			h.fatalf("step %d: put %d items: got %v, want %v", step, n, err, wantErr)
		}
		return
	}
	if accepted > 0 {
		h.m.seq++
		h.wrote()
	}
	next := h.m.nextID
	for i, it := range items {
		if dup[i] {
			continue
		}
		wantIDs[i] = next
		mi := &modelItem{id: next, body: it.Body, key: it.Key, priority: it.Priority, enqueued: now,
			due: now + int64(it.Delay), seq: h.m.seq, status: "waiting"}
		if !it.Deadline.IsZero() {
			mi.deadline = deadlineOf(it)
		}
		h.m.items[next] = mi
		if it.Key != "" {
			h.m.keys[it.Key] = &modelKey{id: next}
		}
		h.m.counters.Put++
		next++
	}
	h.m.nextID = next
	anyDup := false
	for i := range items {
		if dup[i] {
			anyDup = true
			if first, ok := inBatch[items[i].Key]; ok && first != i {
				wantIDs[i] = wantIDs[first]
			}
		}
	}
	if anyDup != (err != nil) || (err != nil && !errors.Is(err, walq.ErrDuplicate)) {
		h.fatalf("step %d: put %d items: err %v, duplicates expected %v", step, n, err, dup)
	}
	if !slices.Equal(ids, wantIDs) {
		h.fatalf("step %d: put %d items: ids %v, want %v", step, n, ids, wantIDs)
	}
}

// discardPassed discards waiting items whose deadline has come, as every
// lease attempt and the timer do.
func (h *opsHarness) discardPassed(now int64) {
	for _, it := range h.sortedItems() {
		if it.status == "waiting" && it.deadline != 0 && it.deadline <= now {
			h.removeItem(it, now)
			h.m.counters.Discarded++
			h.wrote()
		}
	}
}

func (h *opsHarness) removeItem(it *modelItem, now int64) {
	delete(h.m.items, it.id)
	if it.key != "" {
		if k := h.m.keys[it.key]; k != nil && k.id == it.id {
			k.released = now
		}
	}
}

func (h *opsHarness) sortedItems() []*modelItem {
	var out []*modelItem
	for _, it := range h.m.items {
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b *modelItem) int { return int(a.id) - int(b.id) })
	return out
}

func (h *opsHarness) get(step int) {
	h.t.Helper()
	now := h.now()
	h.discardPassed(now)
	var next *modelItem
	for _, it := range h.sortedItems() {
		if it.status != "waiting" || it.due > now {
			continue
		}
		if next == nil || it.priority < next.priority ||
			(it.priority == next.priority && (it.due < next.due || (it.due == next.due && (it.seq < next.seq ||
				(it.seq == next.seq && it.id < next.id))))) {
			next = it
		}
	}
	m, ok, err := h.q.TryGet()
	if err != nil {
		h.fatalf("step %d: TryGet: %v", step, err)
	}
	if next == nil {
		if ok {
			h.fatalf("step %d: TryGet delivered item %d, the model has nothing ready", step, m.ID)
		}
		return
	}
	if !ok {
		h.fatalf("step %d: TryGet delivered nothing, the model has item %d ready", step, next.id)
	}
	if h.handedOut[m.Receipt] {
		h.fatalf("step %d: receipt %v was handed out before", step, m.Receipt)
	}
	if text, err := m.Receipt.MarshalText(); err != nil {
		h.fatalf("step %d: receipt %v: MarshalText: %v", step, m.Receipt, err)
	} else if back, err := walq.ParseReceipt(string(text)); err != nil || back != m.Receipt || string(text) != m.Receipt.String() {
		h.fatalf("step %d: receipt %v: text %q parses as %v, %v", step, m.Receipt, text, back, err)
	}
	h.handedOut[m.Receipt] = true
	h.receipts = append(h.receipts, m.Receipt)
	h.wrote()
	next.status, next.receipt, next.leaseEnd = "leased", m.Receipt, now+int64(opsVisibility)
	next.leaseNo = len(h.receipts) - 1
	next.attempts++
	next.deliveries++
	h.m.counters.Delivered++
	want := walq.Message{ID: next.id, Receipt: m.Receipt, Body: next.body, Attempt: next.attempts,
		Deliveries: next.deliveries, Priority: next.priority, Key: next.key,
		EnqueuedAt: h.toWall(next.enqueued), LeaseEnd: h.toWall(next.leaseEnd)}
	if m.ID != want.ID || !bytes.Equal(m.Body, want.Body) || m.Attempt != want.Attempt || m.Deliveries != want.Deliveries ||
		m.Priority != want.Priority || m.Key != want.Key || !m.EnqueuedAt.Equal(want.EnqueuedAt) || !m.LeaseEnd.Equal(want.LeaseEnd) {
		h.fatalf("step %d: TryGet = %+v\n  want %+v", step, m, want)
	}
}

func (h *opsHarness) openLease(r walq.Receipt, now int64) *modelItem {
	for _, it := range h.m.items {
		if it.status == "leased" && it.receipt == r && now < it.leaseEnd {
			return it
		}
	}
	return nil
}

// endLease ends a lease as the queue's end record does.
func (h *opsHarness) endLease(step int, kind string, r walq.Receipt, foreign bool) {
	h.t.Helper()
	now := h.now()
	it := h.openLease(r, now)
	lsn := h.q.Stats().LastLSN
	var err error
	switch kind {
	case "ack":
		err = h.q.Ack(r)
	case "nack":
		err = h.q.Nack(r, nil)
	case "dead":
		err = h.q.DeadLetter(r, errors.New("poison"))
	}
	if foreign {
		h.refused(step, kind, r, lsn, err)
		return
	}
	if it == nil {
		if !errors.Is(err, walq.ErrLeaseLost) {
			h.fatalf("step %d: %s of receipt %v that is not an open lease: %v, want ErrLeaseLost", step, kind, r, err)
		}
		h.m.lateAcks++
		return
	}
	if err != nil {
		h.fatalf("step %d: %s of open lease %v (item %d): %v", step, kind, r, it.id, err)
	}
	h.wrote()
	switch kind {
	case "ack":
		h.removeItem(it, now)
		h.m.counters.Acked++
	case "nack":
		h.m.counters.Nacked++
		h.endModel(it, now, false, "nack")
	case "dead":
		h.endModel(it, now, true, "poison")
	}
}

// endModel ends a lease without success: dead-lettered when asked or out of
// attempts, otherwise back after the backoff, or discarded if that is at or
// after the deadline.
func (h *opsHarness) endModel(it *modelItem, now int64, dead bool, cause string) {
	h.m.seq++
	it.receipt, it.leaseNo, it.leaseEnd = walq.Receipt{}, 0, 0
	it.lastError = cause
	if dead || it.attempts >= opsMaxAttempts {
		it.status, it.deadAt, it.deadSeq = "dead", now, h.m.seq
		h.m.counters.DeadLettered++
		return
	}
	due := now + int64(opsBackoff(it.attempts))
	if it.deadline != 0 && due >= it.deadline {
		h.removeItem(it, now)
		h.m.counters.Discarded++
		return
	}
	it.status, it.due, it.seq = "waiting", due, h.m.seq
}

func (h *opsHarness) extend(step int, r walq.Receipt, foreign bool, d time.Duration) {
	h.t.Helper()
	now := h.now()
	it := h.openLease(r, now)
	lsn := h.q.Stats().LastLSN
	err := h.q.Extend(r, d)
	if foreign {
		h.refused(step, "extend", r, lsn, err)
		return
	}
	if it == nil {
		if !errors.Is(err, walq.ErrLeaseLost) {
			h.fatalf("step %d: extend of receipt %v that is not an open lease: %v, want ErrLeaseLost", step, r, err)
		}
		h.m.lateAcks++
		return
	}
	if err != nil {
		h.fatalf("step %d: extend of open lease %v: %v", step, r, err)
	}
	h.wrote()
	it.leaseEnd = now + int64(d)
}

// expire ends the leases that have run out, earliest first, as the timer
// does (or, at reopen, every open lease in receipt order).
func (h *opsHarness) expire(now int64, all bool, cause string) {
	var ended []*modelItem
	for _, it := range h.m.items {
		if it.status == "leased" && (all || it.leaseEnd <= now) {
			ended = append(ended, it)
		}
	}
	slices.SortFunc(ended, func(a, b *modelItem) int {
		if !all && a.leaseEnd != b.leaseEnd {
			return compareInt(a.leaseEnd, b.leaseEnd)
		}
		return compareInt(int64(a.leaseNo), int64(b.leaseNo))
	})
	for _, it := range ended {
		h.m.counters.Expired++
		h.endModel(it, now, false, cause)
		h.wrote()
	}
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// advance moves the clock and waits for the queue's timer to do what came
// due: end the expired leases, then discard the items past their deadline.
func (h *opsHarness) advance(step int, d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.qnow += int64(d)
	now := h.now()
	h.expire(now, false, "lease expired")
	h.discardPassed(now)
	h.waitTimer(fmt.Sprintf("step %d: after advancing the clock by %v", step, d))
}

// waitTimer waits for the queue's timer to do what the model says came due.
func (h *opsHarness) waitTimer(where string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := h.q.Stats()
		if st.Expired == h.m.counters.Expired && st.Discarded == h.m.counters.Discarded &&
			st.DeadLettered == h.m.counters.DeadLettered {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			h.fatalf("%s the timer has not caught up in 5s: "+
				"redelivered %d discarded %d dead-lettered %d, want %d %d %d (timers armed: %d)\n%s", where,
				st.Expired, st.Discarded, st.DeadLettered,
				h.m.counters.Expired, h.m.counters.Discarded, h.m.counters.DeadLettered, h.clock.Timers(), buf)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// stepWall steps the wall clock by 1 s to 64 h, back when the high bit of
// b is set, without any time passing. The model does not change: queue
// time does not move, and no lease, delay or deadline is any nearer. The
// timer must not act on the step; Stats and every later result are held
// against the model as always.
func (h *opsHarness) stepWall(step int, b byte) {
	h.t.Helper()
	d := time.Duration(1+int(b&0x3f)) * time.Second
	if b&0x40 != 0 {
		d *= 3600
	}
	if b&0x80 != 0 {
		d = -d
	}
	before := h.q.Stats()
	h.clock.StepWall(d)
	time.Sleep(50 * time.Microsecond) // a timer that wrongly woke on the step has a chance to act
	if after := h.q.Stats(); after.Expired != before.Expired || after.Discarded != before.Discarded || after.Ready != before.Ready {
		h.fatalf("step %d: stepping the wall clock by %v changed the queue: expired %d->%d, discarded %d->%d, ready %d->%d",
			step, d, before.Expired, after.Expired, before.Discarded, after.Discarded, before.Ready, after.Ready)
	}
}

func (h *opsHarness) deadIDs() []uint64 {
	var dead []*modelItem
	for _, it := range h.m.items {
		if it.status == "dead" {
			dead = append(dead, it)
		}
	}
	slices.SortFunc(dead, func(a, b *modelItem) int { return compareInt(int64(a.deadSeq), int64(b.deadSeq)) })
	ids := make([]uint64, len(dead))
	for i, it := range dead {
		ids[i] = it.id
	}
	return ids
}

func (h *opsHarness) redriveOrPurge(step int, in *input, op string) {
	h.t.Helper()
	dead := h.deadIDs()
	var ids []uint64
	for n := in.byte() % 4; n > 0; n-- {
		i := int(in.byte())
		switch {
		case i < len(dead):
			ids = append(ids, dead[i])
		case i%2 == 0 && len(ids) > 0:
			ids = append(ids, ids[0]) // named twice
		default:
			ids = append(ids, uint64(i)) // any item, dead or not, or none
		}
	}
	var wantErr error
	seen := make(map[uint64]bool)
	for _, id := range ids {
		if it := h.m.items[id]; it == nil || it.status != "dead" {
			wantErr = walq.ErrNotFound
			break
		}
		if seen[id] {
			wantErr = walq.ErrInvalid
			break
		}
		seen[id] = true
	}
	var err error
	if op == "redrive" {
		err = h.q.Redrive(ids...)
	} else {
		err = h.q.PurgeDeadLetters(ids...)
	}
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			h.fatalf("step %d: %s %v: %v, want %v", step, op, ids, err, wantErr)
		}
		return
	}
	if err != nil {
		h.fatalf("step %d: %s %v: %v", step, op, ids, err)
	}
	now := h.now()
	if op == "purge" && len(ids) == 0 {
		ids = dead
	}
	if len(ids) > 0 {
		h.m.seq++
		h.wrote()
	}
	for _, id := range ids {
		it := h.m.items[id]
		if op == "redrive" {
			it.status, it.attempts, it.due, it.seq = "waiting", 0, now, h.m.seq
			h.m.counters.Redriven++
		} else {
			h.removeItem(it, now)
			h.m.counters.Purged++
		}
	}
	if op == "redrive" && len(ids) > 0 {
		// A redriven item whose deadline has come is discarded by the timer,
		// which the redrive woke.
		h.discardPassed(now)
		h.waitTimer(fmt.Sprintf("step %d: after redriving %v", step, ids))
	}
}

func (h *opsHarness) reopen(where string) {
	h.t.Helper()
	if err := h.q.Close(); err != nil {
		h.fatalf("%s: Close: %v", where, err)
	}
	var err error
	// Queue time starts again from the wall clock, or from the newest time
	// in the log if the wall clock is behind it.
	h.qnow = max(h.clock.Now().UnixNano(), h.lastTime)
	if h.q, err = walq.Open(h.dir, h.opts); err != nil {
		h.q = nil
		h.fatalf("%s: Open: %v", where, err)
	}
	h.expire(h.now(), true, "lease open at recovery")
	// A wall clock stepped forward across the reopen moves queue time on:
	// what came due meanwhile, the timer now does.
	h.discardPassed(h.now())
	h.waitTimer(where + ":")
	h.m.lateAcks = 0
	h.compareStats(where)
}

// compareStats checks the queue's gauges, counters and dead letters against
// the model.
func (h *opsHarness) compareStats(where string) {
	h.t.Helper()
	st := h.q.Stats()
	var waiting, leased, dead int
	var size int64
	for _, it := range h.m.items {
		size += int64(len(it.body))
		switch it.status {
		case "waiting":
			waiting++
		case "leased":
			leased++
		case "dead":
			dead++
		}
	}
	c := h.m.counters
	got := []uint64{uint64(st.Ready + st.Delayed), uint64(st.Leased), uint64(st.Dead), uint64(st.Items), uint64(st.Bytes),
		st.Put, st.Delivered, st.Acked, st.Nacked, st.Expired, st.DeadLettered, st.Discarded, st.Redriven, st.Purged, st.LateAcks}
	want := []uint64{uint64(waiting), uint64(leased), uint64(dead), uint64(len(h.m.items)), uint64(size),
		c.Put, c.Delivered, c.Acked, c.Nacked, c.Expired, c.DeadLettered, c.Discarded, c.Redriven, c.Purged, h.m.lateAcks}
	if !slices.Equal(got, want) {
		h.fatalf("%s: stats differ from the model (waiting leased dead items bytes put delivered acked nacked "+
			"redelivered deadlettered discarded redriven purged lateacks):\n  queue %v\n  model %v", where, got, want)
	}
	dl := h.q.DeadLetters(0)
	ids := h.deadIDs()
	if len(dl) != len(ids) {
		h.fatalf("%s: %d dead letters, the model has %d", where, len(dl), len(ids))
	}
	for i, d := range dl {
		it := h.m.items[ids[i]]
		if d.ID != it.id || !bytes.Equal(d.Body, it.body) || d.Attempts != it.attempts || d.Deliveries != it.deliveries ||
			d.LastError != it.lastError || !d.DeadAt.Equal(h.toWall(it.deadAt)) || d.Key != it.key {
			h.fatalf("%s: dead letter %d is %+v, the model has %+v", where, i, d, *it)
		}
	}
}
