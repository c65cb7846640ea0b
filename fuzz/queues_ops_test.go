package fuzz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq"
)

// FuzzQueueOps drives a live directory (ManualClock, real files) with an
// operation sequence decoded from the input, on named queues with consumers
// blocked in Get: queues created, opened by a second handle, given other
// settings (a cap on leases in flight raised or lowered), paused (until a
// time, or until Resume), resumed, deleted with Gets blocked and created
// again by name; handles closed with Gets blocked on them; puts with and
// without a delay; TryGet, blocked Gets started and cancelled; acks, nacks
// and extensions of the receipts held; DeleteItems of waiting and leased
// items; RedriveTo between queues; the clock advanced (a millisecond to a
// minute); compaction; and the directory closed with Gets blocked (every
// one returns ErrClosed) and opened again.
//
// Every call's result is checked: an error must be the documented sentinel
// for the handle's state (ErrClosed, ErrQueueDeleted, ErrQueueBusy,
// ErrLeaseLost, ErrNoItem, ErrNotFound), a message must be an item of the
// Get's queue, stored, and not leased at that moment by a lease still
// running, and TryGet must lease exactly when the queue's Stats say it can.
//
// After every step the target waits, a few seconds at most, for the
// directory to settle, and then it must be settled:
//
//   - every Get that a step ended (its context cancelled, its handle
//     closed, its queue deleted) has returned its error;
//   - no Get waits on a queue that can lease (Stats.Stalled, and the
//     target's own count of its Gets against the queue's Stats: not
//     paused, items ready within MaxInFlight);
//   - the Gets waiting and signalled (Stats.Wakeups) are the Gets the
//     target has blocked, none signalled;
//   - each queue holds the items put and neither acked nor deleted, and
//     leases exactly the leases whose time has not run out; no item due
//     is left counted delayed (DelayedPastDue is zero);
//   - idle: over 2 ms of real time, with nothing called and the clock
//     standing still, neither the timer loop nor the committer runs a
//     round (Stats.Wakeups) and nothing reads the clock.
//
// A round of the timer or the committer still under way when the step's
// call returned shows as one more round in the 2 ms, so the wait goes on
// until a quiet 2 ms; a loop that spins never gives one. A spinning loop
// shares the processors with everything else and may sit out a window, so
// two signs of one fail at once: the timer armed again and again for a
// time already past while the clock stands still, and more rounds of the
// timer loop or the committer in one step than its calls can explain.
func FuzzQueueOps(f *testing.F) {
	for _, seed := range queueOpsSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			data = data[:300] // keep one execution short
		}
		h := newQueuesHarness(t)
		defer h.shutdown()
		in := &input{data: data}
		for step := 0; !in.empty(); step++ {
			h.step(step, in)
			h.settle(step)
		}
	})
}

// The operations, the first byte of each step modulo qopCount; the bytes
// after it are the operation's arguments.
const (
	qopOpen        = iota // name, options: OpenQueue (creates), or SetSettings
	qopHandle             // name: OpenQueue with the queue's settings as they are
	qopPut                // handle, flags: delay and priority
	qopPutNow             // handle: no delay
	qopTryGet             // handle
	qopGet                // handle: a Get in a goroutine
	qopCancel             // get: cancel its context
	qopAck                // lease
	qopNack               // lease
	qopExtend             // lease, duration
	qopDeleteItem         // handle, item
	qopPauseUntil         // handle, duration
	qopPause              // handle: until Resume
	qopResume             // handle
	qopDeleteQueue        // handle, force (odd)
	qopCloseHandle        // handle
	qopRedrive            // source handle, target handle, flags (odd: an ID that is no dead letter)
	qopAdvance            // duration
	qopCompact            //
	qopReopen             // close the directory, open it again
	qopCount
)

// queueOpsSeeds reach the wake-ups that once went wrong. Each of the first
// five fails on the build before wake-ups came from one place (997a6e0),
// as noted.
var queueOpsSeeds = [][]byte{
	// A Get waits on a paused queue whose delayed item came due: the timer
	// loop spun (its next wake counted the due item, its tick skipped the
	// paused queue) until something promoted the item. Resume wakes it.
	// 997a6e0: at step 4, the timer armed thousands of times in the past.
	{qopOpen, 0, 0, qopPause, 0, qopPut, 0, 3, qopGet, 0, qopAdvance, 5, qopResume, 0},
	// A timed pause ends with two Gets waiting and one item: one takes it;
	// the timer loop spun on the pause's end for the other. A put wakes it.
	// 997a6e0: at step 5, the timer spins.
	{qopOpen, 0, 0, qopPauseUntil, 0, 4, qopPutNow, 0, qopGet, 0, qopGet, 0, qopAdvance, 5, qopPutNow, 0},
	// A handle closed with a Get blocked on it left its waiter, which took
	// the wake-up the ack gave under MaxInFlight 1: the Get on the other
	// handle stalled with an item ready. 997a6e0: at step 8, 1 Get waits
	// while the queue can lease 1.
	{qopOpen, 0, 1, qopHandle, 0, qopPutNow, 1, qopPutNow, 1, qopGet, 1, qopGet, 0, qopCloseHandle, 0, qopGet, 1, qopAck, 0},
	// DeleteItems of the leased item of a queue at MaxInFlight 1 woke no
	// Get blocked at the cap. 997a6e0: at step 5, 1 Get waits while the
	// queue can lease 1.
	{qopOpen, 0, 1, qopPutNow, 0, qopPutNow, 0, qopGet, 0, qopGet, 0, qopDeleteItem, 0, 0},
	// A delayed item came due with no consumer: Stats counted it delayed
	// (DelayedPastDue grew) until a consumer looked. 997a6e0: at step 2,
	// the item due 1s ago is still delayed.
	{qopOpen, 0, 0, qopPut, 0, 3, qopAdvance, 5, qopTryGet, 0},
	// Resume, and new settings raising the cap and lifting it, wake the
	// Gets they let lease: a wake-up that looks at the queue before the
	// record (or the settings) took effect leaves them stalled. (997a6e0
	// woke every blocked Get on both; on the first, its timer spins at
	// step 3, as it took an item put without a delay for one delayed.)
	{qopOpen, 0, 0, qopPause, 0, qopGet, 0, qopPutNow, 0, qopResume, 0},
	{qopOpen, 0, 1, qopPutNow, 0, qopPutNow, 0, qopPutNow, 0, qopGet, 0, qopGet, 0, qopGet, 0, qopOpen, 0, 2, qopOpen, 0, 0},
	// A queue deleted with Gets blocked on two handles, created again by
	// name; a dead letter redriven into a queue with a Get waiting; the
	// directory closed with Gets blocked, and opened again.
	{qopOpen, 0, 12, qopHandle, 0, qopGet, 0, qopGet, 1, qopDeleteQueue, 1, 1, qopOpen, 0, 12, qopPutNow, 2, qopTryGet, 2,
		qopNack, 0, qopOpen, 1, 0, qopGet, 3, qopRedrive, 2, 3, 0, qopGet, 3, qopReopen, qopPutNow, 0, qopGet, 1, qopAdvance, 9},
	// Leases expiring at a cap, an extension, a timed pause replaced by
	// one until Resume, compaction with Gets blocked.
	{qopOpen, 0, 4, qopPutNow, 0, qopPut, 0, 8, qopTryGet, 0, qopGet, 0, qopExtend, 0, 1, qopAdvance, 4, qopPauseUntil, 0, 6,
		qopPause, 0, qopAdvance, 7, qopCompact, qopResume, 0, qopNack, 0, qopAdvance, 6},
}

var queueNames = []string{"a", "b", "c"}

// Durations the clock advances by and pauses and extensions last.
var queueDurations = []time.Duration{
	time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
}

// Delays of puts: none, or a millisecond to a minute.
var queueDelays = []time.Duration{0, 0, time.Millisecond, time.Second, 5 * time.Second, time.Minute}

const (
	queueVisibility  = 10 * time.Second
	queueMaxAttempts = 3
	maxQueueHandles  = 6
	maxQueueGets     = 6
	settleWait       = 3 * time.Second
	idleWait         = 2 * time.Millisecond
	// A loop that runs more rounds than this in one step spins, and one
	// that arms its timer this many times for a time already past, with
	// the clock standing still, does too.
	maxLoopRounds = 1000
	maxPastArms   = 64
)

func queueBackoff(attempt int) time.Duration { return time.Duration(attempt) * 500 * time.Millisecond }

// queueOptions decodes b: MaxInFlight 0 to 2, Visibility (0: the
// directory's) and MaxAttempts (0: the directory's).
func queueOptions(b byte) walq.QueueOptions {
	return walq.QueueOptions{
		MaxInFlight: int(b % 3),
		Visibility:  []time.Duration{0, time.Second, 5 * time.Second, 30 * time.Second}[(b/3)%4],
		MaxAttempts: int(b/12) % 4,
	}
}

// incarnation is one life of a named queue, from its creation to its
// deletion: the handles of a queue share it, and a queue created again
// under the name is another.
type incarnation struct {
	name string
	no   int // in order of creation
	opts walq.QueueOptions
	gone bool // deleted
}

func (inc *incarnation) String() string { return fmt.Sprintf("queue %q (#%d)", inc.name, inc.no) }

func (inc *incarnation) visibility() time.Duration {
	if inc.opts.Visibility != 0 {
		return inc.opts.Visibility
	}
	return queueVisibility
}

type queueHandle struct {
	q      *walq.Queue
	inc    *incarnation
	no     int // in order of opening
	epoch  int // the directory's opening it belongs to
	closed bool
}

func (hd *queueHandle) String() string { return fmt.Sprintf("handle %d on %v", hd.no, hd.inc) }

type getResult struct {
	m   walq.Message
	err error
}

// blockedGet is a Get running in its own goroutine.
type blockedGet struct {
	no     int
	h      *queueHandle
	step   int
	cancel context.CancelFunc
	res    chan getResult
	// expect is the error the Get must return, set by the step that ends
	// it; nil while it may only return an item.
	expect error
	why    string
}

// heldLease is a lease handed out by Get or TryGet.
type heldLease struct {
	id    uint64
	r     walq.Receipt
	inc   *incarnation
	h     *queueHandle
	end   time.Time // wall clock
	epoch int
	ended bool // acked, nacked, deleted with its item or its queue
	step  int
}

type storedItem struct {
	inc     *incarnation
	present bool // put, and neither acked nor deleted (with its queue or alone)
}

type queuesHarness struct {
	t     *testing.T
	dir   string
	clock *walq.ManualClock
	cc    *countingClock
	opts  walq.Options
	d     *walq.Queue // the directory (its default queue)
	epoch int

	incs     map[string]*incarnation // the queue of each name now; absent: none
	nIncs    int
	handles  []*queueHandle
	nHandles int
	gets     []*blockedGet
	nGets    int
	leases   []*heldLease
	items    map[uint64]*storedItem
	itemIDs  []uint64 // in the order put
	trace    []string // what each step did, shown with a failure
}

func newQueuesHarness(t *testing.T) *queuesHarness {
	clock := walq.NewManualClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	h := &queuesHarness{t: t, dir: t.TempDir(), clock: clock, cc: &countingClock{ManualClock: clock},
		incs: make(map[string]*incarnation), items: make(map[uint64]*storedItem)}
	h.opts = walq.Options{
		Visibility: queueVisibility, MaxAttempts: queueMaxAttempts, Backoff: queueBackoff,
		SegmentSize: 4096, Sync: walq.SyncNever, DisableAutoCompact: true, Clock: h.cc,
	}
	var err error
	if h.d, err = walq.Open(h.dir, h.opts); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return h
}

func (h *queuesHarness) fatalf(step int, format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("step %d: %s\nthe steps:\n\t%s", step, fmt.Sprintf(format, args...), strings.Join(h.trace, "\n\t"))
}

// note adds to the trace of the steps.
func (h *queuesHarness) note(step int, format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf("%d: %s", step, fmt.Sprintf(format, args...)))
}

// check fails the test unless err is want (nil, or wrapping the sentinel
// want).
func (h *queuesHarness) check(step int, call string, err, want error) {
	h.t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		h.fatalf(step, "%s: %v, want %v", call, err, want)
	}
}

// callErr is the error a call on hd must return for the handle's state
// alone: the directory closed since, the queue deleted, the handle closed
// (in the order the queue checks them).
func (h *queuesHarness) callErr(hd *queueHandle) error {
	switch {
	case hd.epoch != h.epoch:
		return walq.ErrClosed
	case hd.inc.gone:
		return walq.ErrQueueDeleted
	case hd.closed:
		return walq.ErrClosed
	}
	return nil
}

func (h *queuesHarness) pickHandle(b byte) *queueHandle {
	if len(h.handles) == 0 {
		return nil
	}
	return h.handles[int(b)%len(h.handles)]
}

// leaseOpen says whether l still runs: not ended by a call, in this
// opening of the directory (a reopen ends every lease), its time not out.
func (h *queuesHarness) leaseOpen(l *heldLease) bool {
	return !l.ended && l.epoch == h.epoch && !l.inc.gone && h.clock.Now().Before(l.end)
}

func (h *queuesHarness) openLeases(inc *incarnation) int {
	n := 0
	for _, l := range h.leases {
		if l.inc == inc && h.leaseOpen(l) {
			n++
		}
	}
	return n
}

func (h *queuesHarness) presentItems(inc *incarnation) int {
	n := 0
	for _, it := range h.items {
		if it.inc == inc && it.present {
			n++
		}
	}
	return n
}

// waitingGets counts the Gets on inc's handles that nothing ended.
func (h *queuesHarness) waitingGets(inc *incarnation) int {
	n := 0
	for _, g := range h.gets {
		if g.h.inc == inc && g.expect == nil {
			n++
		}
	}
	return n
}

// leasable is how many items a Get could lease by the queue's Stats: those
// ready, within MaxInFlight; none while it is paused.
func leasable(st walq.Stats) int {
	if st.Paused {
		return 0
	}
	n := st.Ready
	if st.MaxInFlight > 0 {
		n = min(n, st.MaxInFlight-st.Leased)
	}
	return max(n, 0)
}

func (h *queuesHarness) step(step int, in *input) {
	h.t.Helper()
	if h.d == nil {
		return // the directory did not open again
	}
	switch op := in.byte() % qopCount; op {
	case qopOpen:
		h.open(step, in.byte(), in.byte(), false)
	case qopHandle:
		h.open(step, in.byte(), 0, true)
	case qopPut:
		h.put(step, h.pickHandle(in.byte()), in.byte())
	case qopPutNow:
		h.put(step, h.pickHandle(in.byte()), 0)
	case qopTryGet:
		h.tryGet(step, h.pickHandle(in.byte()))
	case qopGet:
		h.startGet(step, h.pickHandle(in.byte()))
	case qopCancel:
		if b := in.byte(); len(h.gets) > 0 {
			g := h.gets[int(b)%len(h.gets)]
			h.note(step, "cancel Get %d on %v", g.no, g.h)
			g.cancel()
			if g.expect == nil {
				g.expect, g.why = context.Canceled, fmt.Sprintf("its context was cancelled at step %d", step)
			}
		}
	case qopAck, qopNack:
		h.endLease(step, op, in.byte(), 0)
	case qopExtend:
		h.endLease(step, op, in.byte(), in.byte())
	case qopDeleteItem:
		h.deleteItem(step, h.pickHandle(in.byte()), in.byte())
	case qopPauseUntil:
		hd, d := h.pickHandle(in.byte()), queueDurations[int(in.byte())%len(queueDurations)]
		if hd != nil {
			until := h.clock.Now().Add(d)
			h.note(step, "pause %v for %v", hd, d)
			h.check(step, fmt.Sprintf("Pause of %v until %v from now", hd, d), hd.q.Pause(until), h.callErr(hd))
		}
	case qopPause:
		if hd := h.pickHandle(in.byte()); hd != nil {
			h.note(step, "pause %v until Resume", hd)
			h.check(step, fmt.Sprintf("Pause of %v", hd), hd.q.Pause(time.Time{}), h.callErr(hd))
		}
	case qopResume:
		if hd := h.pickHandle(in.byte()); hd != nil {
			h.note(step, "resume %v", hd)
			h.check(step, fmt.Sprintf("Resume of %v", hd), hd.q.Resume(), h.callErr(hd))
		}
	case qopDeleteQueue:
		h.deleteQueue(step, h.pickHandle(in.byte()), in.byte()%2 == 1)
	case qopCloseHandle:
		h.closeHandle(step, h.pickHandle(in.byte()))
	case qopRedrive:
		h.redrive(step, h.pickHandle(in.byte()), h.pickHandle(in.byte()), in.byte())
	case qopAdvance:
		d := queueDurations[int(in.byte())%len(queueDurations)]
		h.note(step, "advance the clock by %v", d)
		h.clock.Advance(d)
	case qopCompact:
		h.note(step, "compact")
		h.check(step, "Compact", h.d.Compact(), nil)
	case qopReopen:
		h.reopen(step)
	}
	h.pruneLeases()
}

// open makes a handle on the named queue with the options ob, or with the
// queue's settings as they are (same).
func (h *queuesHarness) open(step int, nb, ob byte, same bool) {
	name := queueNames[int(nb)%len(queueNames)]
	inc := h.incs[name]
	qo := queueOptions(ob)
	if same && inc != nil {
		qo = inc.opts
	}
	var q *walq.Queue
	var err error
	if inc == nil || same {
		q, err = h.d.OpenQueue(name, qo)
	} else {
		// Opening never changes settings: open as it is, then set them.
		if q, err = h.d.OpenQueue(name, walq.QueueOptions{}); err == nil {
			err = q.SetSettings(qo)
		}
	}
	if err != nil {
		h.fatalf(step, "OpenQueue(%q, %+v): %v", name, qo, err)
	}
	if inc == nil {
		h.nIncs++
		inc = &incarnation{name: name, no: h.nIncs}
		h.incs[name] = inc
	}
	inc.opts = qo
	h.addHandle(q, inc)
	h.note(step, "OpenQueue(%q, MaxInFlight %d, Visibility %v, MaxAttempts %d): %v", name, qo.MaxInFlight, qo.Visibility, qo.MaxAttempts, h.handles[len(h.handles)-1])
}

func (h *queuesHarness) addHandle(q *walq.Queue, inc *incarnation) {
	if q.Name() != inc.name {
		h.t.Fatalf("OpenQueue(%q) returned a handle on %q", inc.name, q.Name())
	}
	if len(h.handles) >= maxQueueHandles {
		// Forget the oldest handle no Get waits on.
		for i, old := range h.handles {
			busy := false
			for _, g := range h.gets {
				busy = busy || g.h == old
			}
			if !busy {
				h.handles = append(h.handles[:i], h.handles[i+1:]...)
				break
			}
		}
	}
	h.nHandles++
	h.handles = append(h.handles, &queueHandle{q: q, inc: inc, no: h.nHandles, epoch: h.epoch})
}

func (h *queuesHarness) put(step int, hd *queueHandle, flags byte) {
	if hd == nil {
		return
	}
	delay := queueDelays[int(flags)%len(queueDelays)]
	prio := int(flags/6) % 3
	id, err := hd.q.Put(context.Background(), []byte(fmt.Sprintf("item of step %d", step)), walq.WithDelay(delay), walq.WithPriority(prio))
	h.note(step, "put on %v, delay %v, priority %d: item %d, %v", hd, delay, prio, id, err)
	h.check(step, fmt.Sprintf("Put on %v", hd), err, h.callErr(hd))
	if err != nil {
		return
	}
	if h.items[id] != nil {
		h.fatalf(step, "Put on %v returned item %d, an ID given before", hd, id)
	}
	h.items[id] = &storedItem{inc: hd.inc, present: true}
	h.itemIDs = append(h.itemIDs, id)
}

func (h *queuesHarness) tryGet(step int, hd *queueHandle) {
	if hd == nil {
		return
	}
	want := h.callErr(hd)
	can := 0
	var st walq.Stats
	if want == nil {
		st = hd.q.Stats()
		can = leasable(st)
	}
	m, ok, err := hd.q.TryGet()
	h.note(step, "TryGet on %v: item %d, %v, %v", hd, m.ID, ok, err)
	h.check(step, fmt.Sprintf("TryGet on %v", hd), err, want)
	if err != nil {
		return
	}
	if ok != (can > 0) {
		h.fatalf(step, "TryGet on %v: leased %v, where its Stats said it could lease %d (ready %d, delayed %d, leased %d, paused %v, MaxInFlight %d)",
			hd, ok, can, st.Ready, st.Delayed, st.Leased, st.Paused, st.MaxInFlight)
	}
	if ok {
		h.leased(step, hd, m, "TryGet")
	}
}

// leased checks the message m that a Get or TryGet on hd returned, and
// holds its lease.
func (h *queuesHarness) leased(step int, hd *queueHandle, m walq.Message, call string) {
	h.t.Helper()
	if m.Queue != hd.inc.name {
		h.fatalf(step, "%s on %v returned item %d of queue %q", call, hd, m.ID, m.Queue)
	}
	it := h.items[m.ID]
	switch {
	case it == nil:
		h.fatalf(step, "%s on %v returned item %d, which was never put", call, hd, m.ID)
	case it.inc != hd.inc:
		h.fatalf(step, "%s on %v returned item %d, an item of %v", call, hd, m.ID, it.inc)
	case !it.present:
		h.fatalf(step, "%s on %v returned item %d, acked or deleted", call, hd, m.ID)
	}
	for _, l := range h.leases {
		if l.id == m.ID && h.leaseOpen(l) {
			h.fatalf(step, "%s on %v leased item %d twice: its lease of step %d runs until %v, and now is %v",
				call, hd, m.ID, l.step, l.end, h.clock.Now())
		}
	}
	if want := h.clock.Now().Add(hd.inc.visibility()); !m.LeaseEnd.Equal(want) {
		h.fatalf(step, "%s on %v leased item %d until %v, want %v (visibility %v)", call, hd, m.ID, m.LeaseEnd, want, hd.inc.visibility())
	}
	h.leases = append(h.leases, &heldLease{id: m.ID, r: m.Receipt, inc: hd.inc, h: hd, end: m.LeaseEnd, epoch: h.epoch, step: step})
}

func (h *queuesHarness) startGet(step int, hd *queueHandle) {
	if hd == nil || len(h.gets) >= maxQueueGets {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.nGets++
	g := &blockedGet{no: h.nGets, h: hd, step: step, cancel: cancel, res: make(chan getResult, 1), expect: h.callErr(hd)}
	if g.expect != nil {
		g.why = "it was called on a closed handle or a deleted queue"
	}
	h.gets = append(h.gets, g)
	h.note(step, "Get %d on %v", g.no, hd)
	go func() {
		m, err := hd.q.Get(ctx)
		g.res <- getResult{m, err}
	}()
}

// collect takes the results of the Gets that returned and checks them.
func (h *queuesHarness) collect(step int) {
	h.t.Helper()
	for i := 0; i < len(h.gets); {
		g := h.gets[i]
		select {
		case r := <-g.res:
			h.gets = append(h.gets[:i], h.gets[i+1:]...)
			g.cancel()
			h.gotResult(step, g, r)
		default:
			i++
		}
	}
}

func (h *queuesHarness) gotResult(step int, g *blockedGet, r getResult) {
	h.t.Helper()
	what := fmt.Sprintf("Get %d on %v (from step %d)", g.no, g.h, g.step)
	h.note(step, "%s returned item %d, %v", what, r.m.ID, r.err)
	if r.err != nil {
		if g.expect == nil {
			h.fatalf(step, "%s returned %v, and nothing ended it", what, r.err)
		}
		if !errors.Is(r.err, g.expect) {
			h.fatalf(step, "%s returned %v, want %v: %s", what, r.err, g.expect, g.why)
		}
		return
	}
	if g.expect != nil {
		h.fatalf(step, "%s returned item %d, want %v: %s", what, r.m.ID, g.expect, g.why)
	}
	h.leased(step, g.h, r.m, what)
}

// handleFor is the handle to end or extend l with: an open handle of its
// queue, else the handle that leased it.
func (h *queuesHarness) handleFor(l *heldLease) *queueHandle {
	for _, hd := range h.handles {
		if hd.inc == l.inc && !hd.closed {
			return hd
		}
	}
	return l.h
}

func (h *queuesHarness) endLease(step int, op byte, lb, db byte) {
	if len(h.leases) == 0 {
		return
	}
	l := h.leases[int(lb)%len(h.leases)]
	hd := h.handleFor(l)
	open := h.leaseOpen(l)
	want := h.callErr(hd)
	if want == nil && !open {
		want = walq.ErrLeaseLost
	}
	call := fmt.Sprintf("of item %d's lease of step %d (ends %v, now %v) on %v", l.id, l.step, l.end, h.clock.Now(), hd)
	h.note(step, "%s %s", map[byte]string{qopAck: "ack", qopNack: "nack", qopExtend: "extend"}[op], call)
	switch op {
	case qopAck:
		err := hd.q.Ack(l.r)
		h.check(step, "Ack "+call, err, want)
		if err == nil {
			l.ended = true
			h.items[l.id].present = false
		}
	case qopNack:
		err := hd.q.Nack(l.r, errors.New("nacked"))
		h.check(step, "Nack "+call, err, want)
		if err == nil {
			l.ended = true
		}
	case qopExtend:
		d := queueDurations[int(db)%len(queueDurations)]
		err := hd.q.Extend(l.r, d)
		h.check(step, fmt.Sprintf("Extend by %v %s", d, call), err, want)
		if err == nil {
			l.end = h.clock.Now().Add(d)
		}
	}
}

func (h *queuesHarness) deleteItem(step int, hd *queueHandle, ib byte) {
	if hd == nil || len(h.itemIDs) == 0 {
		return
	}
	id := h.itemIDs[int(ib)%len(h.itemIDs)]
	it := h.items[id]
	want := h.callErr(hd)
	if want == nil && (!it.present || it.inc != hd.inc) {
		want = walq.ErrNoItem
	}
	err := hd.q.DeleteItems(id)
	h.note(step, "DeleteItems(%d) on %v: %v", id, hd, err)
	h.check(step, fmt.Sprintf("DeleteItems(%d) on %v (the item of %v, present %v)", id, hd, it.inc, it.present), err, want)
	if err != nil {
		return
	}
	it.present = false
	for _, l := range h.leases {
		if l.id == id && h.leaseOpen(l) {
			l.ended = true
		}
	}
}

func (h *queuesHarness) deleteQueue(step int, hd *queueHandle, force bool) {
	if hd == nil {
		return
	}
	inc := hd.inc
	want := h.callErr(hd)
	open := h.openLeases(inc)
	if want == nil && !force && open > 0 {
		want = walq.ErrQueueBusy
	}
	err := hd.q.Delete(force)
	h.note(step, "Delete(force %v) of %v: %v", force, hd, err)
	h.check(step, fmt.Sprintf("Delete(force %v) of %v with %d leases open", force, hd, open), err, want)
	if err != nil {
		return
	}
	inc.gone = true
	delete(h.incs, inc.name)
	for _, g := range h.gets {
		if g.h.inc == inc && g.expect == nil {
			g.expect, g.why = walq.ErrQueueDeleted, fmt.Sprintf("its queue was deleted at step %d", step)
		}
	}
	for _, l := range h.leases {
		if l.inc == inc {
			l.ended = true
		}
	}
	for _, it := range h.items {
		if it.inc == inc {
			it.present = false
		}
	}
}

func (h *queuesHarness) closeHandle(step int, hd *queueHandle) {
	if hd == nil {
		return
	}
	var want error
	if hd.closed {
		want = walq.ErrClosed
	}
	err := hd.q.Close()
	h.note(step, "close %v: %v", hd, err)
	h.check(step, fmt.Sprintf("Close of %v", hd), err, want)
	if err != nil {
		return
	}
	hd.closed = true
	for _, g := range h.gets {
		if g.h == hd && g.expect == nil {
			g.expect, g.why = walq.ErrClosed, fmt.Sprintf("its handle was closed at step %d", step)
		}
	}
}

// redrive sends the dead letters of src's queue (two at most) to dst's,
// with an ID that names no dead letter when flags is odd.
func (h *queuesHarness) redrive(step int, src, dst *queueHandle, flags byte) {
	if src == nil {
		return
	}
	var ids []uint64
	for _, dl := range src.q.DeadLetters(2) {
		if it := h.items[dl.ID]; it == nil || it.inc != src.inc || !it.present {
			h.fatalf(step, "DeadLetters of %v lists item %d, not a stored item of it", src, dl.ID)
		}
		ids = append(ids, dl.ID)
	}
	bogus := flags%2 == 1
	if bogus {
		ids = append(ids, 1<<40)
	}
	var want error
	switch {
	case len(ids) == 0:
	case h.callErr(src) != nil:
		want = h.callErr(src)
	case bogus:
		want = walq.ErrNotFound
	case dst.inc != src.inc:
		want = h.callErr(dst)
	}
	var err error
	if dst.inc == src.inc {
		err = src.q.Redrive(ids...)
	} else {
		err = src.q.RedriveTo(dst.q, ids...)
	}
	h.note(step, "RedriveTo(%v, %v) from %v: %v", dst, ids, src, err)
	h.check(step, fmt.Sprintf("RedriveTo(%v, %v) from %v", dst, ids, src), err, want)
	if err != nil {
		return
	}
	for _, id := range ids {
		h.items[id].inc = dst.inc
	}
}

// reopen closes the directory with its Gets blocked, each of which must
// return ErrClosed, and opens it again with a handle on each queue.
func (h *queuesHarness) reopen(step int) {
	h.t.Helper()
	h.note(step, "close the directory and open it again")
	for _, g := range h.gets {
		if g.expect == nil {
			g.expect, g.why = walq.ErrClosed, fmt.Sprintf("the directory was closed at step %d", step)
		}
	}
	h.check(step, "Close of the directory", h.d.Close(), nil)
	h.d = nil
	deadline := time.Now().Add(settleWait)
	for len(h.gets) > 0 {
		h.collect(step)
		if len(h.gets) > 0 && time.Now().After(deadline) {
			g := h.gets[0]
			h.fatalf(step, "Get %d on %v (from step %d) still blocked %v after the directory was closed", g.no, g.h, g.step, settleWait)
		}
		pause(len(h.gets))
	}
	h.cc.forgetTimers()
	h.epoch++
	var err error
	if h.d, err = walq.Open(h.dir, h.opts); err != nil {
		h.fatalf(step, "reopen: %v", err)
	}
	h.handles = nil
	for _, name := range queueNames {
		if inc := h.incs[name]; inc != nil {
			q, err := h.d.OpenQueue(name, inc.opts)
			if err != nil {
				h.fatalf(step, "OpenQueue(%q) after the reopen: %v", name, err)
			}
			h.addHandle(q, inc)
		}
	}
}

// pruneLeases forgets the leases that have ended but the last few (kept
// for calls with a lost lease); a lease still running is never forgotten.
func (h *queuesHarness) pruneLeases() {
	const keep = 6
	out := h.leases[:0]
	for i, l := range h.leases {
		if h.leaseOpen(l) || i >= len(h.leases)-keep {
			out = append(out, l)
		}
	}
	clear(h.leases[len(out):])
	h.leases = out
}

// pause is the poll's wait between looks: a yield at first, then up to a
// millisecond.
func pause(round int) {
	if round < 8 {
		time.Sleep(50 * time.Microsecond)
		return
	}
	time.Sleep(time.Millisecond)
}

// settle waits until the directory is settled after a step (see
// FuzzQueueOps), failing the test if it is not within settleWait.
func (h *queuesHarness) settle(step int) {
	h.t.Helper()
	deadline := time.Now().Add(settleWait)
	timer0, commit0 := statsLoops(h.d.DirStats())
	for round := 0; ; round++ {
		if n := h.cc.pastArms(); n > maxPastArms {
			h.fatalf(step, "the timer loop spins: it armed its timer %d times for a time already past, with the clock standing still", n)
		}
		if timer, commit := statsLoops(h.d.DirStats()); timer-timer0 > maxLoopRounds || commit-commit0 > maxLoopRounds {
			h.fatalf(step, "a loop spins: the timer loop ran %d rounds and the committer %d since the step", timer-timer0, commit-commit0)
		}
		h.collect(step)
		problem := h.unsettled()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			h.fatalf(step, "not settled after %v: %s", settleWait, problem)
		}
		pause(round)
	}
}

// unsettled says why the directory is not settled, or "".
func (h *queuesHarness) unsettled() string {
	for _, g := range h.gets {
		if g.expect != nil {
			return fmt.Sprintf("Get %d on %v (from step %d) has not returned: it must return %v, as %s", g.no, g.h, g.step, g.expect, g.why)
		}
	}
	if h.cc.firedUntaken() {
		return "a timer fired and the timer loop has not taken it"
	}
	st := h.d.DirStats()
	if w, k, ok := statsWaiting(st); ok && (w != len(h.gets) || k != 0) {
		return fmt.Sprintf("%d Gets wait and %d of them were signalled; %d Gets were started and have not returned", w, k, len(h.gets))
	}
	// Idle: nothing moves while nothing is called and the clock stands
	// still. This comes before the queues' Stats, which must find the
	// directory as it left itself.
	timer0, commit0 := statsLoops(st)
	calls0 := h.cc.calls.Load()
	time.Sleep(idleWait)
	calls1 := h.cc.calls.Load()
	timer1, commit1 := statsLoops(h.d.DirStats())
	if timer1 != timer0 || commit1 != commit0 || calls1 != calls0 {
		return fmt.Sprintf("not idle: in %v with nothing called and the clock still, the timer loop ran %d rounds, the committer %d, and the clock was read %d times",
			idleWait, timer1-timer0, commit1-commit0, calls1-calls0)
	}
	for _, name := range queueNames {
		inc := h.incs[name]
		if inc == nil {
			continue
		}
		var hd *queueHandle
		for _, x := range h.handles {
			if x.inc == inc {
				hd = x
				break
			}
		}
		if hd == nil {
			continue // no handle: no Get either
		}
		if p := h.queueProblem(inc, hd.q.Stats()); p != "" {
			return fmt.Sprintf("%v: %s", inc, p)
		}
	}
	return ""
}

// queueProblem says what is wrong with the Stats of inc's queue, settled.
func (h *queuesHarness) queueProblem(inc *incarnation, st walq.Stats) string {
	waiting := h.waitingGets(inc)
	var p []string
	if st.Queue != inc.name {
		p = append(p, fmt.Sprintf("Stats of queue %q", st.Queue))
	}
	if n := h.presentItems(inc); st.Items != n {
		p = append(p, fmt.Sprintf("holds %d items, %d were put (or redriven in) and are neither acked nor deleted", st.Items, n))
	}
	if st.Ready+st.Delayed+st.Leased+st.Dead != st.Items {
		p = append(p, fmt.Sprintf("%d ready, %d delayed, %d leased and %d dead make not its %d items", st.Ready, st.Delayed, st.Leased, st.Dead, st.Items))
	}
	if n := h.openLeases(inc); st.Leased != n {
		p = append(p, fmt.Sprintf("%d leased, and %d leases have time left", st.Leased, n))
	}
	if st.DelayedPastDue != 0 {
		p = append(p, fmt.Sprintf("items due %v ago still delayed (%d ready, %d delayed)", st.DelayedPastDue, st.Ready, st.Delayed))
	}
	if n := leasable(st); waiting > 0 && n > 0 {
		p = append(p, fmt.Sprintf("%d Gets wait while it can lease %d (ready %d, leased %d, MaxInFlight %d)", waiting, n, st.Ready, st.Leased, st.MaxInFlight))
	}
	if statsStalled(st) {
		p = append(p, "Stats.Stalled")
	}
	if w, k, ok := statsWaiting(st); ok && (w != waiting || k != 0) {
		p = append(p, fmt.Sprintf("%d Gets wait and %d were signalled, where %d Gets were started on it and have not returned", w, k, waiting))
	}
	return strings.Join(p, "; ")
}

// shutdown closes the directory, and every Get still blocked returns.
func (h *queuesHarness) shutdown() {
	if h.d != nil {
		h.d.Close()
	}
	deadline := time.Now().Add(settleWait)
	for _, g := range h.gets {
		if h.d == nil {
			g.cancel() // the directory's Close failed or never came: the context ends it
		}
		select {
		case <-g.res:
		case <-time.After(time.Until(deadline)):
			g.cancel()
			h.t.Errorf("Get %d on %v (from step %d) still blocked %v after the directory was closed", g.no, g.h, g.step, settleWait)
			<-g.res
		}
		g.cancel()
	}
	h.gets = nil
}

// countingClock is a ManualClock that counts the calls the directory
// makes on it and on its timers, and can tell that one of those timers
// fired and the tick was not taken yet.
type countingClock struct {
	*walq.ManualClock
	calls  atomic.Uint64
	mu     sync.Mutex
	timers []walq.Timer
	// The timers armed for a time already past at the clock's reading
	// pastAt: once, twice with a kick in between, but a loop that does it
	// again and again spins (a busy loop's time slices show in no window).
	pastAt   time.Duration
	nPastArm int
}

func (c *countingClock) Now() time.Time {
	c.calls.Add(1)
	return c.ManualClock.Now()
}

func (c *countingClock) Monotonic() time.Duration {
	c.calls.Add(1)
	return c.ManualClock.Monotonic()
}

func (c *countingClock) NewTimer(d time.Duration) walq.Timer {
	c.calls.Add(1)
	t := c.ManualClock.NewTimer(d)
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return countingTimer{Timer: t, c: c}
}

// firedUntaken says whether a timer fired and its tick waits to be taken.
func (c *countingClock) firedUntaken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if len(t.C()) > 0 {
			return true
		}
	}
	return false
}

// armedPast notes a timer armed for a time already past.
func (c *countingClock) armedPast() {
	mono := c.ManualClock.Monotonic()
	c.mu.Lock()
	defer c.mu.Unlock()
	if mono != c.pastAt {
		c.pastAt, c.nPastArm = mono, 0
	}
	c.nPastArm++
}

// pastArms is how many times a timer was armed for a time already past at
// the clock's reading now.
func (c *countingClock) pastArms() int {
	mono := c.ManualClock.Monotonic()
	c.mu.Lock()
	defer c.mu.Unlock()
	if mono != c.pastAt {
		return 0
	}
	return c.nPastArm
}

// forgetTimers forgets the timers of a directory that was closed.
func (c *countingClock) forgetTimers() {
	c.mu.Lock()
	c.timers = nil
	c.mu.Unlock()
}

type countingTimer struct {
	walq.Timer
	c *countingClock
}

func (t countingTimer) Stop() bool {
	t.c.calls.Add(1)
	return t.Timer.Stop()
}

func (t countingTimer) Reset(d time.Duration) bool {
	t.c.calls.Add(1)
	if d <= 0 {
		t.c.armedPast()
	}
	return t.Timer.Reset(d)
}
