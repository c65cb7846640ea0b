package state_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/state"
)

var (
	t0  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	sec = int64(time.Second)
)

// tape applies records with consecutive LSNs, failing the test on an error,
// and keeps them for replay.
type tape struct {
	t    testing.TB
	s    *state.State
	recs []state.Record
}

func newTape(t testing.TB) *tape { return &tape{t: t, s: state.New()} }

func (tp *tape) apply(rec state.Record) uint64 {
	tp.t.Helper()
	lsn := tp.s.LastLSN() + 1
	if err := tp.s.ApplyAt(lsn, state.DefaultQueue, rec, 4096); err != nil {
		tp.t.Fatalf("Apply(%d, %s %+v): %v", lsn, state.TypeName(rec.Type()), rec, err)
	}
	tp.recs = append(tp.recs, rec)
	return lsn
}

// put puts items at now and returns their IDs.
func (tp *tape) put(now int64, items ...state.NewItem) []uint64 {
	tp.t.Helper()
	first := tp.s.NextID()
	tp.apply(&state.Put{Time: now, Items: items})
	out := make([]uint64, len(items))
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

func (tp *tape) lease(now int64, id uint64) uint64 {
	tp.t.Helper()
	return tp.apply(&state.Lease{Time: now, ID: id, LeaseEnd: now + 30*sec})
}

func (tp *tape) deadLetter(now int64, id uint64) {
	tp.t.Helper()
	receipt := tp.lease(now, id)
	tp.apply(&state.End{Kind: state.TypeDeadLetter, Time: now, Receipt: receipt, Cause: "poison", Due: now, Dead: true})
}

// drain leases every item ready at now, in the order the state hands them
// out.
func drain(t testing.TB, s *state.State, now int64) []uint64 {
	t.Helper()
	var order []uint64
	s.Promote(now)
	for it := s.NextReady(); it != nil; it = s.NextReady() {
		order = append(order, it.ID)
		if err := s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Lease{Time: now, ID: it.ID, LeaseEnd: now + sec}, 4096); err != nil {
			t.Fatalf("lease of item %d: %v", it.ID, err)
		}
	}
	return order
}

func roundTrip(t testing.TB, s *state.State) *state.State {
	t.Helper()
	b, err := s.MarshalSnapshot()
	if err != nil {
		t.Fatalf("MarshalSnapshot: %v", err)
	}
	r, err := state.UnmarshalSnapshot(b)
	if err != nil {
		t.Fatalf("UnmarshalSnapshot: %v", err)
	}
	return r
}

func TestReadyOrder(t *testing.T) {
	at := func(due int64) state.NewItem { return state.NewItem{Due: due} }
	prio := func(p int64) state.NewItem { return state.NewItem{Due: t0, Priority: p} }
	tests := []struct {
		name  string
		setup func(tp *tape)
		now   int64
		want  []uint64
	}{
		{"smaller priority first", func(tp *tape) {
			tp.put(t0, prio(5), prio(1), prio(3))
		}, t0, []uint64{2, 3, 1}},
		{"negative priority before zero", func(tp *tape) {
			tp.put(t0, prio(0), prio(-1))
		}, t0, []uint64{2, 1}},
		{"priority before due time", func(tp *tape) {
			tp.put(t0, state.NewItem{Due: t0, Priority: 1}, state.NewItem{Due: t0 + 5*sec})
		}, t0 + 10*sec, []uint64{2, 1}},
		{"earlier due time first within a priority", func(tp *tape) {
			tp.put(t0, at(t0+20*sec))
			tp.put(t0+sec, at(t0+10*sec))
		}, t0 + 30*sec, []uint64{2, 1}},
		{"FIFO across puts", func(tp *tape) {
			tp.put(t0, at(t0))
			tp.put(t0, at(t0))
			tp.put(t0, at(t0))
		}, t0, []uint64{1, 2, 3}},
		{"FIFO within one put", func(tp *tape) {
			tp.put(t0, at(t0), at(t0), at(t0), at(t0), at(t0))
		}, t0, []uint64{1, 2, 3, 4, 5}},
		{"FIFO within one put after a promote", func(tp *tape) {
			tp.put(t0, state.NewItem{Due: t0, Priority: 1}, at(t0), at(t0))
		}, t0, []uint64{2, 3, 1}},
		{"a nacked item goes back at its new due time", func(tp *tape) {
			tp.put(t0, at(t0), at(t0+2*sec))
			receipt := tp.lease(t0, 1)
			tp.apply(&state.End{Kind: state.TypeNack, Time: t0, Receipt: receipt, Due: t0 + 3*sec})
		}, t0 + 3*sec, []uint64{2, 1}},
		{"one redrive of several in ID order", func(tp *tape) {
			tp.put(t0, at(t0), at(t0), at(t0))
			for _, id := range []uint64{3, 1, 2} {
				tp.deadLetter(t0, id)
			}
			tp.apply(&state.Redrive{Time: t0 + sec, IDs: []uint64{3, 1, 2}})
		}, t0 + sec, []uint64{1, 2, 3}},
		{"a redriven item after items due before the redrive", func(tp *tape) {
			tp.put(t0, at(t0))
			tp.deadLetter(t0, 1)
			tp.put(t0+sec, at(t0+sec))
			tp.apply(&state.Redrive{Time: t0 + 2*sec, IDs: []uint64{1}})
		}, t0 + 2*sec, []uint64{2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := newTape(t)
			tt.setup(tp)
			restored := roundTrip(t, tp.s)
			if got := drain(t, tp.s, tt.now); !slices.Equal(got, tt.want) {
				t.Errorf("lease order %v, want %v", got, tt.want)
			}
			if got := drain(t, restored, tt.now); !slices.Equal(got, tt.want) {
				t.Errorf("lease order after a snapshot %v, want %v", got, tt.want)
			}
		})
	}
}

// A new 50 ms item is not stuck behind a 1 h one that was put before it.
func TestShortDelayNotBehindLongOne(t *testing.T) {
	tp := newTape(t)
	hour := tp.put(t0, state.NewItem{Due: t0 + int64(time.Hour)})[0]
	short := tp.put(t0+sec, state.NewItem{Due: t0 + sec + int64(50*time.Millisecond)})[0]
	s := tp.s
	if due, ok := s.NextDue(); !ok || due != t0+sec+int64(50*time.Millisecond) {
		t.Fatalf("NextDue() = %d, %v; want the 50 ms item's due time", due, ok)
	}
	s.Promote(t0 + sec + int64(50*time.Millisecond) - 1)
	if it := s.NextReady(); it != nil {
		t.Fatalf("item %d ready before its due time", it.ID)
	}
	s.Promote(t0 + sec + int64(50*time.Millisecond))
	if it := s.NextReady(); it == nil || it.ID != short {
		t.Fatalf("NextReady() = %v, want the 50 ms item %d", it, short)
	}
	if g := s.Gauges(); g.Ready != 1 || g.Delayed != 1 || g.DelayedHeadDue != t0+int64(time.Hour) {
		t.Fatalf("Gauges() = %+v, want 1 ready and the 1 h item %d delayed", g, hour)
	}
}

func TestAttemptsAndDeliveries(t *testing.T) {
	tp := newTape(t)
	id := tp.put(t0, state.NewItem{Body: []byte("x"), Due: t0})[0]
	now := t0
	var receipt uint64
	steps := []struct {
		name                 string
		do                   func()
		attempts, deliveries int32
		status               state.Status
	}{
		{"put", func() {}, 0, 0, state.Waiting},
		{"first lease", func() { receipt = tp.lease(now, id) }, 1, 1, state.Leased},
		{"extend adds nothing", func() {
			tp.apply(&state.Extend{Time: now, Receipt: receipt, LeaseEnd: now + time.Hour.Nanoseconds()})
		}, 1, 1, state.Leased},
		{"nack adds nothing", func() {
			tp.apply(&state.End{Kind: state.TypeNack, Time: now, Receipt: receipt, Due: now})
		}, 1, 1, state.Waiting},
		{"second lease", func() { receipt = tp.lease(now, id) }, 2, 2, state.Leased},
		{"expire at recovery adds nothing", func() {
			tp.apply(&state.End{Kind: state.TypeExpire, Time: now, Receipt: receipt, Due: now})
		}, 2, 2, state.Waiting},
		{"third lease", func() { receipt = tp.lease(now, id) }, 3, 3, state.Leased},
		{"dead-letter adds nothing", func() {
			tp.apply(&state.End{Kind: state.TypeDeadLetter, Time: now, Receipt: receipt, Due: now, Dead: true})
		}, 3, 3, state.Dead},
		{"redrive resets attempts, not deliveries", func() {
			now += sec
			tp.apply(&state.Redrive{Time: now, IDs: []uint64{id}})
		}, 0, 3, state.Waiting},
		{"lease after redrive", func() { receipt = tp.lease(now, id) }, 1, 4, state.Leased},
		{"snapshot keeps both", func() { tp.s = roundTrip(t, tp.s) }, 1, 4, state.Leased},
	}
	for _, step := range steps {
		step.do()
		it := tp.s.Item(id)
		if it == nil || it.Attempts != step.attempts || it.Deliveries != step.deliveries || it.Status != step.status {
			t.Fatalf("after %s: item %s; want attempts %d, deliveries %d, %s",
				step.name, describe(it), step.attempts, step.deliveries, step.status)
		}
	}
	if c := tp.s.Counters(); c.Delivered != 4 || c.Nacked != 1 || c.Expired != 1 || c.DeadLettered != 1 || c.Redriven != 1 {
		t.Fatalf("Counters() = %+v", c)
	}
}

// An item whose next due time would fall at or after its deadline is
// discarded when its lease ends; dead-lettering wins over discarding.
func TestEndAtDeadline(t *testing.T) {
	const window = 10 * int64(time.Minute)
	deadline := t0 + 10*sec
	tests := []struct {
		name   string
		kind   byte
		due    int64
		dead   bool
		status state.Status // 0: discarded
	}{
		{"nack due before deadline waits", state.TypeNack, deadline - 1, false, state.Waiting},
		{"nack due at deadline is discarded", state.TypeNack, deadline, false, 0},
		{"nack due after deadline is discarded", state.TypeNack, deadline + sec, false, 0},
		{"expire due at deadline is discarded", state.TypeExpire, deadline, false, 0},
		{"expire due before deadline waits", state.TypeExpire, deadline - 1, false, state.Waiting},
		{"nack out of attempts dead-letters past deadline", state.TypeNack, deadline + sec, true, state.Dead},
		{"deadletter past deadline dead-letters", state.TypeDeadLetter, deadline, true, state.Dead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := newTape(t)
			id := tp.put(t0, state.NewItem{Body: []byte("abc"), Due: t0, Deadline: deadline, Key: "k"})[0]
			receipt := tp.lease(t0, id)
			endAt := t0 + sec
			tp.apply(&state.End{Kind: tt.kind, Time: endAt, Receipt: receipt, Cause: "failed", Due: tt.due, Dead: tt.dead})
			it := tp.s.Item(id)
			c := tp.s.Counters()
			if tt.status == 0 {
				if it != nil || c.Discarded != 1 || tp.s.Bytes() != 0 || tp.s.Len() != 0 {
					t.Fatalf("item %s, Discarded %d, Bytes %d: want it discarded", describe(it), c.Discarded, tp.s.Bytes())
				}
				if _, held := tp.s.KeyHolder("k", endAt+window-1, window); !held {
					t.Fatalf("key free within the window after the discard")
				}
				if _, held := tp.s.KeyHolder("k", endAt+window, window); held {
					t.Fatalf("key held after the window")
				}
				return
			}
			if it == nil || it.Status != tt.status || c.Discarded != 0 || it.LastError() != "failed" || it.EndedAt() != endAt {
				t.Fatalf("item %s, Discarded %d: want %s", describe(it), c.Discarded, tt.status)
			}
			if tt.status == state.Waiting && it.Due != tt.due {
				t.Fatalf("waiting item due at %d, want %d", it.Due, tt.due)
			}
		})
	}
}

func TestKeyWindow(t *testing.T) {
	const window = 10 * int64(time.Minute)
	deadline := t0 + 5*sec
	// Each way out of the state: the item leaves at the returned time.
	tests := []struct {
		name  string
		leave func(tp *tape, id uint64) int64
	}{
		{"ack", func(tp *tape, id uint64) int64 {
			receipt := tp.lease(t0, id)
			tp.apply(&state.Ack{Time: t0 + sec, Receipt: receipt})
			return t0 + sec
		}},
		{"discard at the deadline", func(tp *tape, id uint64) int64 {
			tp.apply(&state.Discard{Time: deadline, IDs: []uint64{id}})
			return deadline
		}},
		{"discarded at nack", func(tp *tape, id uint64) int64 {
			receipt := tp.lease(t0, id)
			tp.apply(&state.End{Kind: state.TypeNack, Time: t0 + 2*sec, Receipt: receipt, Due: deadline})
			return t0 + 2*sec
		}},
		{"purge", func(tp *tape, id uint64) int64 {
			tp.deadLetter(t0, id)
			tp.apply(&state.Purge{Time: t0 + 3*sec, IDs: []uint64{id}})
			return t0 + 3*sec
		}},
		{"purge all", func(tp *tape, id uint64) int64 {
			tp.deadLetter(t0, id)
			tp.apply(&state.Purge{Time: t0 + 4*sec, All: true})
			return t0 + 4*sec
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := newTape(t)
			id := tp.put(t0, state.NewItem{Due: t0, Deadline: deadline, Key: "k"})[0]
			// Held while stored, whatever the window, even far in the future.
			if got, held := tp.s.KeyHolder("k", t0+100*window, 0); !held || got != id {
				t.Fatalf("KeyHolder while stored = %d, %v", got, held)
			}
			refused := tp.s.ApplyAt(tp.s.LastLSN()+1, state.DefaultQueue, &state.Put{Time: t0, Items: []state.NewItem{{Due: t0, Key: "k"}}}, 4096)
			if !errors.Is(refused, state.ErrInvalid) {
				t.Fatalf("put with a stored item's key: %v, want ErrInvalid", refused)
			}
			left := tt.leave(tp, id)
			if tp.s.Item(id) != nil {
				t.Fatalf("item %d still stored", id)
			}
			for _, s := range []*state.State{tp.s, roundTrip(t, tp.s)} {
				if got, held := s.KeyHolder("k", left+window-1, window); !held || got != id {
					t.Fatalf("KeyHolder just inside the window = %d, %v; want %d", got, held, id)
				}
				if got, held := s.KeyHolder("k", left+window, window); held {
					t.Fatalf("KeyHolder at the end of the window = %d, held", got)
				}
			}
			tp.s.PruneKeys(left+window-1, window)
			if g := tp.s.Gauges(); g.Keys != 1 {
				t.Fatalf("pruned a key inside its window: %d keys", g.Keys)
			}
			tp.s.PruneKeys(left+window, window)
			if g := tp.s.Gauges(); g.Keys != 0 {
				t.Fatalf("kept a key past its window: %d keys", g.Keys)
			}
			again := tp.put(left+window, state.NewItem{Due: left + window, Key: "k"})[0]
			if got, held := tp.s.KeyHolder("k", left+window, window); !held || got != again {
				t.Fatalf("KeyHolder after a new put = %d, %v; want %d", got, held, again)
			}
		})
	}
}

// A key released at time 0 (the epoch, as a test clock may start) is not
// mistaken for one whose item is still stored: that state's snapshot would
// not decode.
func TestKeyReleasedAtTimeZero(t *testing.T) {
	const window = 100
	tp := newTape(t)
	id := tp.put(0, state.NewItem{Due: 0, Key: "k"})[0]
	receipt := tp.apply(&state.Lease{Time: 0, ID: id, LeaseEnd: 10})
	tp.apply(&state.Ack{Time: 0, Receipt: receipt})
	restored := roundTrip(t, tp.s)
	for _, s := range []*state.State{tp.s, restored} {
		if _, held := s.KeyHolder("k", window-1, window); !held {
			t.Fatalf("key free inside its window")
		}
		if _, held := s.KeyHolder("k", window+1, window); held {
			t.Fatalf("key held after its window: taken for a stored item's")
		}
	}
}

// A key taken again once its window ended leaves a stale entry behind; a
// window that grows after that must not count it as not ended yet, nor let
// it hide a key whose window did end (KeysAt counted the stale entries as
// ended ones, which a longer window made wrong).
func TestKeysAtAfterWindowGrows(t *testing.T) {
	const short, long = 5, 74
	tp := newTape(t)
	q := tp.s.Default()
	q.SetKeyWindow(short)
	ack := func(now int64, id uint64) {
		receipt := tp.apply(&state.Lease{Time: now, ID: id, LeaseEnd: now + 10})
		tp.apply(&state.Ack{Time: now, Receipt: receipt})
	}
	ack(10, tp.put(10, state.NewItem{Due: 10, Key: "b"})[0])
	ack(20, tp.put(20, state.NewItem{Due: 20, Key: "a"})[0])
	// "a" ended with the short window: a new item takes it.
	if _, held := q.KeyHolder("a", 25, short); held {
		t.Fatal(`"a" still held after its window`)
	}
	tp.put(25, state.NewItem{Due: 25, Key: "a"})
	// Asked with a window longer than the state was told: counted.
	if got := q.KeysAt(90, long); got != 1 {
		t.Fatalf("KeysAt(90, %d) with window %d told = %d, want 1", long, short, got)
	}
	q.SetKeyWindow(long)
	// At 90 with the long window: "b" ended (10+74 <= 90), the new "a" is
	// stored; one key.
	for _, s := range []*state.State{tp.s, roundTrip(t, tp.s)} {
		if got := s.Default().KeysAt(90, long); got != 1 {
			t.Fatalf("KeysAt(90, %d) = %d, want 1", long, got)
		}
		if got := s.Default().KeysAt(25, short); got != 1 {
			t.Fatalf("KeysAt(25, %d) = %d, want 1", short, got)
		}
		if got := s.Default().KeysAt(90, 1000); got != 2 {
			t.Fatalf("KeysAt(90, 1000) = %d, want 2", got)
		}
	}
	tp.s.PruneKeysBy(90, func(uint64) int64 { return long })
	if got := q.KeysAt(90, long); got != 1 {
		t.Fatalf("after PruneKeysBy, KeysAt(90, %d) = %d, want 1", long, got)
	}
	if _, _, ok := tp.s.NextKeyExpiry(); ok {
		t.Fatal("a released key left after pruning them all")
	}
}

func deadIDs(s *state.State, limit int) []uint64 {
	var out []uint64
	for _, it := range s.DeadLetters(limit) {
		out = append(out, it.ID)
	}
	return out
}

func TestDeadLettersOldestFirst(t *testing.T) {
	tp := newTape(t)
	tp.put(t0, state.NewItem{Due: t0}, state.NewItem{Due: t0}, state.NewItem{Due: t0}, state.NewItem{Due: t0})
	for _, id := range []uint64{3, 1, 4, 2} {
		tp.deadLetter(t0, id)
	}
	steps := []struct {
		name string
		do   func()
		want []uint64
	}{
		{"in the order they died", func() {}, []uint64{3, 1, 4, 2}},
		{"a redriven item dies again last", func() {
			tp.apply(&state.Redrive{Time: t0 + sec, IDs: []uint64{1}})
			tp.deadLetter(t0+sec, 1)
		}, []uint64{3, 4, 2, 1}},
		{"a purged item leaves", func() {
			tp.apply(&state.Purge{Time: t0 + sec, IDs: []uint64{4}})
		}, []uint64{3, 2, 1}},
		{"a snapshot keeps the order", func() { tp.s = roundTrip(t, tp.s) }, []uint64{3, 2, 1}},
		{"redrive of the oldest", func() {
			tp.apply(&state.Redrive{Time: t0 + 2*sec, IDs: []uint64{3}})
		}, []uint64{2, 1}},
		{"purge of all", func() {
			tp.apply(&state.Purge{Time: t0 + 2*sec, All: true})
		}, nil},
	}
	for _, step := range steps {
		step.do()
		if got := deadIDs(tp.s, 0); !slices.Equal(got, step.want) {
			t.Fatalf("%s: DeadLetters(0) = %v, want %v", step.name, got, step.want)
		}
		if len(step.want) > 1 {
			if got := deadIDs(tp.s, 2); !slices.Equal(got, step.want[:2]) {
				t.Fatalf("%s: DeadLetters(2) = %v, want %v", step.name, got, step.want[:2])
			}
		}
		if g := tp.s.Gauges(); g.Dead != len(step.want) {
			t.Fatalf("%s: Gauges().Dead = %d, want %d", step.name, g.Dead, len(step.want))
		}
	}
}

// Many rounds of dead-lettering, redrive and purge over a long list, checked
// against a slice after every record.
func TestDeadLettersLongHistory(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tp := newTape(t)
	const n = 300
	items := make([]state.NewItem, n)
	for i := range items {
		items[i] = state.NewItem{Due: t0}
	}
	tp.put(t0, items...)
	var dead []uint64
	waiting := make([]uint64, 0, n)
	for id := uint64(1); id <= n; id++ {
		waiting = append(waiting, id)
	}
	now := t0
	rounds := 1500 // the long tests take 6,000
	if testrule.Long {
		rounds = 6000
	}
	for round := range rounds {
		now++
		switch op := rng.IntN(10); {
		case op < 5 && len(waiting) > 0:
			i := rng.IntN(len(waiting))
			tp.deadLetter(now, waiting[i])
			dead = append(dead, waiting[i])
			waiting = slices.Delete(waiting, i, i+1)
		case op < 8 && len(dead) > 0:
			id := dead[rng.IntN(len(dead))]
			tp.apply(&state.Redrive{Time: now, IDs: []uint64{id}})
			dead = slices.DeleteFunc(dead, func(d uint64) bool { return d == id })
			waiting = append(waiting, id)
		case op < 9 && len(dead) > 0:
			id := dead[rng.IntN(len(dead))]
			tp.apply(&state.Purge{Time: now, IDs: []uint64{id}})
			dead = slices.DeleteFunc(dead, func(d uint64) bool { return d == id })
		case op == 9 && len(waiting) < 10:
			ids := tp.put(now, state.NewItem{Due: now}, state.NewItem{Due: now})
			waiting = append(waiting, ids...)
		}
		if got := deadIDs(tp.s, 0); !slices.Equal(got, dead) {
			t.Fatalf("round %d: DeadLetters(0) = %v, want %v", round, got, dead)
		}
		if round%500 == 0 {
			if got := deadIDs(roundTrip(t, tp.s), 0); !slices.Equal(got, dead) {
				t.Fatalf("round %d: DeadLetters(0) after a snapshot = %v, want %v", round, got, dead)
			}
		}
	}
}

// mpNode is a msgpack value kept as its raw bytes, or an array of values:
// enough to edit one field of a real snapshot and encode it again.
type mpNode struct {
	raw   []byte
	elems []*mpNode
}

func parseMP(b []byte) (*mpNode, []byte) {
	c := b[0]
	var n, hdr int
	switch {
	case c&0xf0 == 0x90:
		n, hdr = int(c&0x0f), 1
	case c == 0xdc:
		n, hdr = int(binary.BigEndian.Uint16(b[1:])), 3
	case c == 0xdd:
		n, hdr = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		size := mpScalarSize(b)
		return &mpNode{raw: b[:size]}, b[size:]
	}
	node := &mpNode{elems: make([]*mpNode, 0, n)}
	rest := b[hdr:]
	for range n {
		var e *mpNode
		e, rest = parseMP(rest)
		node.elems = append(node.elems, e)
	}
	return node, rest
}

func mpScalarSize(b []byte) int {
	c := b[0]
	switch {
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return 1
	case c&0xe0 == 0xa0:
		return 1 + int(c&0x1f)
	case c == 0xcc || c == 0xd0:
		return 2
	case c == 0xcd || c == 0xd1:
		return 3
	case c == 0xce || c == 0xd2:
		return 5
	case c == 0xcf || c == 0xd3:
		return 9
	case c == 0xc4 || c == 0xd9:
		return 2 + int(b[1])
	case c == 0xc5 || c == 0xda:
		return 3 + int(binary.BigEndian.Uint16(b[1:]))
	case c == 0xc6 || c == 0xdb:
		return 5 + int(binary.BigEndian.Uint32(b[1:]))
	}
	panic(fmt.Sprintf("msgpack code 0x%02x not expected in a snapshot", c))
}

func (n *mpNode) encode(b []byte) []byte {
	if n.elems == nil && n.raw != nil {
		return append(b, n.raw...)
	}
	b = append(b, 0xdd)
	b = binary.BigEndian.AppendUint32(b, uint32(len(n.elems)))
	for _, e := range n.elems {
		b = e.encode(b)
	}
	return b
}

func (n *mpNode) clone() *mpNode {
	c := &mpNode{raw: n.raw}
	if n.elems != nil {
		c.elems = make([]*mpNode, len(n.elems))
		for i, e := range n.elems {
			c.elems[i] = e.clone()
		}
	}
	return c
}

func mpUint(v uint64) *mpNode { return &mpNode{raw: binary.BigEndian.AppendUint64([]byte{0xcf}, v)} }
func mpInt(v int64) *mpNode {
	return &mpNode{raw: binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(v))}
}
func mpBin(b []byte) *mpNode {
	return &mpNode{raw: append(binary.BigEndian.AppendUint32([]byte{0xc6}, uint32(len(b))), b...)}
}

// mpValue reads an unsigned integer scalar.
func mpValue(n *mpNode) uint64 {
	var v uint64
	switch c := n.raw[0]; {
	case c < 0x80:
		v = uint64(c)
	case c == 0xcc:
		v = uint64(n.raw[1])
	case c == 0xcd:
		v = uint64(binary.BigEndian.Uint16(n.raw[1:]))
	case c == 0xce:
		v = uint64(binary.BigEndian.Uint32(n.raw[1:]))
	case c == 0xcf:
		v = binary.BigEndian.Uint64(n.raw[1:])
	}
	return v
}

func mpStr(s string) *mpNode {
	return &mpNode{raw: append(binary.BigEndian.AppendUint32([]byte{0xdb}, uint32(len(s))), s...)}
}

// Fields of the frozen snapshot layout (see MarshalSnapshot).
const (
	snapVersion, snapLastLSN, snapNextID, snapQueues, snapItems, snapKeys = 0, 1, 3, 4, 5, 6
	itemID, itemQueue, itemBody, itemKey, itemAttempts, itemStatus        = 0, 1, 2, 3, 9, 11
	itemReceipt                                                           = 12
	itemHistory                                                           = 17
	keyQueue, keyName, keyID, keyReleased                                 = 0, 1, 2, 3
	queueID, queueName                                                    = 0, 1
)

// snapshotFixture is a state with a waiting (1), two leased (2, 3) and a
// dead (4) item, keys held by stored items ("w", "l", "d") and one released
// key ("a", of the acked item 5), and its snapshot as a tree.
func snapshotFixture(t testing.TB) (*state.State, *mpNode) {
	tp := newTape(t)
	tp.put(t0,
		state.NewItem{Body: []byte("waiting"), Due: t0, Key: "w"},
		state.NewItem{Body: []byte("leased"), Due: t0, Key: "l"},
		state.NewItem{Body: []byte("leased too"), Due: t0},
		state.NewItem{Body: []byte("dead"), Due: t0, Key: "d"},
		state.NewItem{Body: []byte("acked"), Due: t0, Key: "a"},
	)
	tp.lease(t0, 2)
	tp.lease(t0, 3)
	tp.deadLetter(t0, 4)
	tp.apply(&state.Ack{Time: t0, Receipt: tp.lease(t0, 5)})
	b, err := tp.s.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	root, rest := parseMP(b)
	if len(rest) != 0 || !snapshotDecodes(root) {
		t.Fatalf("snapshot fixture does not parse, or does not decode with wide headers")
	}
	return tp.s, root
}

func snapshotDecodes(n *mpNode) bool {
	_, err := state.UnmarshalSnapshot(n.encode(nil))
	return err == nil
}

func TestUnmarshalSnapshotRejects(t *testing.T) {
	s, root := snapshotFixture(t)
	good, _ := s.MarshalSnapshot()
	item := func(r *mpNode, id int) *mpNode { return r.elems[snapItems].elems[id-1] } // items are in ID order
	key := func(r *mpNode, name string) *mpNode {
		for _, k := range r.elems[snapKeys].elems {
			if string(k.elems[keyName].raw[1:]) == name { // a fixstr
				return k
			}
		}
		t.Fatalf("no key %q in the fixture", name)
		return nil
	}
	tests := []struct {
		name  string
		edit  func(r *mpNode)
		bytes []byte // instead of edit
	}{
		{name: "empty", bytes: []byte{}},
		{name: "nil", bytes: []byte{0xc0}},
		{name: "garbage", bytes: []byte("not a snapshot at all")},
		{name: "trailing bytes", bytes: append(slices.Clone(good), 0x00)},
		{name: "huge item count", bytes: []byte{0x97, 0x01, 0x00, 0x00, 0x01, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0x7f, 0xff, 0xff, 0xff}},
		{"unknown version", func(r *mpNode) { r.elems[snapVersion] = mpUint(5) }, nil},
		{"version 1 with a version-4 body", func(r *mpNode) { r.elems[snapVersion] = mpUint(1) }, nil},
		{"version 2 with a version-4 body", func(r *mpNode) { r.elems[snapVersion] = mpUint(2) }, nil},
		{"version 3 with a version-4 body", func(r *mpNode) { r.elems[snapVersion] = mpUint(3) }, nil}, // its held keys are not listed
		{"body in record 0", func(r *mpNode) { item(r, 3).elems[itemBody].elems[0] = mpUint(0) }, nil},
		{"body in a record after the last lsn", func(r *mpNode) { item(r, 3).elems[itemBody].elems[0] = mpUint(1000) }, nil},
		{"body at offset 0", func(r *mpNode) { item(r, 3).elems[itemBody].elems[1] = mpInt(0) }, nil},
		{"body length over 32 bits", func(r *mpNode) { item(r, 3).elems[itemBody].elems[2] = mpUint(1 << 32) }, nil},
		{"body crc over 32 bits", func(r *mpNode) { item(r, 3).elems[itemBody].elems[3] = mpUint(1 << 32) }, nil},
		{"body reference of 3 fields", func(r *mpNode) {
			item(r, 3).elems[itemBody].elems = item(r, 3).elems[itemBody].elems[:3]
		}, nil},
		{"no queues", func(r *mpNode) { r.elems[snapQueues].elems = nil }, nil},
		{"first queue not the default", func(r *mpNode) { r.elems[snapQueues].elems[0].elems[queueID] = mpUint(1) }, nil},
		{"default queue with a name", func(r *mpNode) { r.elems[snapQueues].elems[0].elems[queueName] = mpStr("x") }, nil},
		{"item of a missing queue", func(r *mpNode) { item(r, 3).elems[itemQueue] = mpUint(7) }, nil},
		{"key of a missing queue", func(r *mpNode) { key(r, "a").elems[keyQueue] = mpUint(7) }, nil},
		{"history too long", func(r *mpNode) {
			h := item(r, 4).elems[itemHistory]
			for len(h.elems) <= state.HistoryLen {
				h.elems = append(h.elems, h.elems[0].clone())
			}
		}, nil},
		{"missing field", func(r *mpNode) { r.elems = r.elems[:6] }, nil},
		{"extra field", func(r *mpNode) { r.elems = append(r.elems, mpUint(0)) }, nil},
		{"next id zero", func(r *mpNode) {
			r.elems[snapNextID] = mpUint(0)
			r.elems[snapItems].elems = r.elems[snapItems].elems[:0]
			r.elems[snapKeys].elems = r.elems[snapKeys].elems[:0]
		}, nil},
		{"item id zero", func(r *mpNode) { item(r, 3).elems[itemID] = mpUint(0) }, nil},
		{"item id not below next id", func(r *mpNode) { item(r, 3).elems[itemID] = mpUint(6) }, nil},
		{"duplicate item id", func(r *mpNode) {
			r.elems[snapItems].elems = append(r.elems[snapItems].elems, item(r, 3).clone())
		}, nil},
		{"unknown status zero", func(r *mpNode) { item(r, 3).elems[itemStatus] = mpUint(0) }, nil},
		{"unknown status", func(r *mpNode) { item(r, 3).elems[itemStatus] = mpUint(9) }, nil},
		{"status out of range", func(r *mpNode) { item(r, 3).elems[itemStatus] = mpUint(1 << 40) }, nil},
		{"leased without a receipt", func(r *mpNode) { item(r, 3).elems[itemReceipt] = mpUint(0) }, nil},
		{"receipt after the last lsn", func(r *mpNode) { item(r, 3).elems[itemReceipt] = mpUint(1000) }, nil},
		{"two leases with one receipt", func(r *mpNode) {
			item(r, 3).elems[itemReceipt] = item(r, 2).elems[itemReceipt].clone()
		}, nil},
		{"negative value in an unsigned field", func(r *mpNode) { r.elems[snapLastLSN] = mpInt(-1) }, nil},
		{"attempts overflow", func(r *mpNode) { item(r, 2).elems[itemAttempts] = mpInt(math.MaxInt32 + 1) }, nil},
		{"string where an integer belongs", func(r *mpNode) { r.elems[snapNextID] = mpStr("6") }, nil},
		{"held key listed", func(r *mpNode) { key(r, "a").elems[keyReleased] = mpInt(0) }, nil},
		{"two items hold one key", func(r *mpNode) { item(r, 3).elems[itemKey] = mpStr("w") }, nil},
		{"released key a stored item holds", func(r *mpNode) {
			k := key(r, "a").clone()
			k.elems[keyName] = mpStr("w")
			r.elems[snapKeys].elems = append(r.elems[snapKeys].elems, k)
		}, nil},
		{"empty key", func(r *mpNode) { key(r, "a").elems[keyName] = mpStr("") }, nil},
		{"key twice", func(r *mpNode) {
			r.elems[snapKeys].elems = append(r.elems[snapKeys].elems, key(r, "a").clone())
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.bytes
			if tt.edit != nil {
				r := root.clone()
				tt.edit(r)
				data = r.encode(nil)
			}
			if s, err := state.UnmarshalSnapshot(data); err == nil {
				t.Fatalf("UnmarshalSnapshot accepted it: %d items", s.Len())
			}
		})
	}
	t.Run("every truncation", func(t *testing.T) {
		for n := range len(good) {
			if _, err := state.UnmarshalSnapshot(good[:n]); err == nil {
				t.Fatalf("accepted the first %d of %d bytes", n, len(good))
			}
		}
	})
}

// sampleRecords is a history that uses every record type and every form of
// its fields: the seeds of the fuzz targets and the cases of the codec test.
func sampleRecords() []state.Record {
	long := strings.Repeat("x", 70000)
	many := make([]uint64, 70000)
	for i := range many {
		many[i] = uint64(i) * 0x10001
	}
	return []state.Record{
		&state.Put{Time: t0, Items: []state.NewItem{
			{Body: []byte("hello"), Due: t0, Deadline: t0 + sec, Priority: -3, Key: "k1"},
			{Due: t0 + 5*sec, Priority: math.MaxInt64},
			{Body: []byte{}, Due: t0, Key: strings.Repeat("k", 40)},
		}},
		&state.Put{Time: -1, Items: []state.NewItem{{Body: []byte(long), Due: math.MinInt64, Priority: math.MinInt64, Key: long[:300]}}},
		&state.Lease{Time: t0, ID: 1, LeaseEnd: t0 + 30*sec},
		&state.Lease{Time: 0, ID: math.MaxUint64, LeaseEnd: math.MaxInt64},
		&state.Extend{Time: t0 + sec, Receipt: 3, LeaseEnd: t0 + 60*sec},
		&state.Ack{Time: t0 + 2*sec, Receipt: 3},
		&state.End{Kind: state.TypeNack, Time: t0, Receipt: 200, Cause: "boom", Due: t0 + sec},
		&state.End{Kind: state.TypeExpire, Time: t0, Receipt: 1 << 20, Cause: "", Due: t0, Dead: true},
		&state.End{Kind: state.TypeDeadLetter, Time: t0, Receipt: 1 << 40, Cause: long[:40000], Due: t0, Dead: true},
		&state.Discard{Time: t0, IDs: []uint64{1, 2, 300}},
		&state.Discard{Time: t0, IDs: many[:20]},
		&state.Redrive{Time: t0, IDs: many},
		&state.Redrive{Time: t0, IDs: []uint64{7}},
		&state.Purge{Time: t0, IDs: []uint64{1, 1 << 33}},
		&state.Purge{Time: t0, All: true},
		&state.CreateQueue{Time: t0, Name: "jobs", Settings: state.Settings{Visibility: 30 * sec, MaxAttempts: 5,
			KeyWindow: 3600 * sec, MaxItems: 1 << 40, MaxBytes: math.MaxInt64, MaxInFlight: 100}},
		&state.CreateQueue{Time: -1, Name: strings.Repeat("q", state.MaxQueueName+300)},
		&state.SetQueue{Time: t0, Settings: state.Settings{Visibility: 1, MaxAttempts: math.MaxInt64, KeyWindow: -1, MaxInFlight: 1}},
		&state.PauseQueue{Time: t0, Until: math.MaxInt64},
		&state.PauseQueue{Time: t0},
		&state.DeleteQueue{Time: t0, Force: true},
		&state.DeleteQueue{Time: math.MinInt64},
		&state.Move{Time: t0, Target: 1 << 40, IDs: many[:30]},
		&state.Move{Time: t0, Target: state.DefaultQueue, IDs: []uint64{7}},
	}
}

// cuts lists lengths shorter than n to truncate a body to: all of them for
// small bodies, the first and last 32 and a spread between for large ones.
func cuts(n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		if n <= 4096 || i < 32 || i >= n-32 || i%(n/32) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// normalize makes the empty and nil forms of slices equal.
func normalize(rec state.Record) state.Record {
	switch r := rec.(type) {
	case *state.Put:
		c := *r
		c.Items = slices.Clone(r.Items)
		for i := range c.Items {
			if len(c.Items[i].Body) == 0 {
				c.Items[i].Body = nil
			}
		}
		return &c
	case *state.Discard:
		c := *r
		c.IDs = slices.Clip(append([]uint64(nil), r.IDs...))
		return &c
	case *state.Redrive:
		c := *r
		c.IDs = slices.Clip(append([]uint64(nil), r.IDs...))
		return &c
	case *state.Purge:
		c := *r
		c.IDs = slices.Clip(append([]uint64(nil), r.IDs...))
		return &c
	case *state.Move:
		c := *r
		c.IDs = slices.Clip(append([]uint64(nil), r.IDs...))
		return &c
	}
	return rec
}

func TestRecordCodec(t *testing.T) {
	for i, rec := range sampleRecords() {
		t.Run(fmt.Sprintf("%d_%s", i, state.TypeName(rec.Type())), func(t *testing.T) {
			body, err := state.Encode([]byte("prefix"), rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(body, []byte("prefix")) {
				t.Fatalf("Encode did not append to dst")
			}
			body = body[len("prefix"):]
			got, err := state.Decode(rec.Type(), body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(normalize(got), normalize(rec)) {
				t.Fatalf("Decode(Encode(rec)):\n got %+v\nwant %+v", got, rec)
			}
			for _, n := range cuts(len(body)) {
				if _, err := state.Decode(rec.Type(), body[:n]); err == nil {
					t.Fatalf("Decode accepted the first %d of %d bytes", n, len(body))
				}
			}
			if _, err := state.Decode(rec.Type(), append(slices.Clone(body), 0xc0)); err == nil {
				t.Fatalf("Decode accepted a trailing byte")
			}
		})
	}
	t.Run("unknown types", func(t *testing.T) {
		body, _ := state.Encode(nil, &state.Ack{Time: t0, Receipt: 1})
		for _, typ := range []byte{0, state.LastType + 1, 255} {
			if _, err := state.Decode(typ, body); err == nil {
				t.Fatalf("Decode accepted type %d", typ)
			}
		}
	})
	t.Run("end kind must match the type", func(t *testing.T) {
		body, _ := state.Encode(nil, &state.End{Kind: state.TypeNack, Time: t0, Receipt: 1, Due: t0})
		for _, typ := range []byte{state.TypeExpire, state.TypeDeadLetter} {
			if _, err := state.Decode(typ, body); err == nil {
				t.Fatalf("Decode of a nack body as type %d succeeded", typ)
			}
		}
	})
	t.Run("type names", func(t *testing.T) {
		for typ := state.TypePut; typ <= state.LastType; typ++ {
			if got := state.TypeByName(state.TypeName(typ)); got != typ {
				t.Fatalf("TypeByName(TypeName(%d)) = %d", typ, got)
			}
		}
		if state.TypeByName("nope") != 0 {
			t.Fatalf("TypeByName of an unknown name is not 0")
		}
	})
}

// fuzzBase is the state every fuzzed record is applied to: it has waiting,
// delayed, leased and dead items, and keys.
func fuzzBase(t testing.TB) []byte {
	tp := newTape(t)
	tp.put(t0,
		state.NewItem{Body: []byte("a"), Due: t0, Deadline: t0 + 10*sec, Key: "a"},
		state.NewItem{Body: []byte("b"), Due: t0 + 5*sec, Priority: 1},
		state.NewItem{Body: []byte("c"), Due: t0, Key: "c"},
		state.NewItem{Body: []byte("d"), Due: t0},
	)
	tp.lease(t0, 3)
	tp.deadLetter(t0, 4)
	b, err := tp.s.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeRecord decodes arbitrary bodies. It must never panic; what it
// accepts must encode back to a body that decodes to the same record; and
// applying it must either succeed or leave the state exactly as it was.
func FuzzDecodeRecord(f *testing.F) {
	for _, rec := range sampleRecords() {
		body, err := state.Encode(nil, rec)
		if err != nil {
			f.Fatal(err)
		}
		if len(body) < 4096 {
			f.Add(rec.Type(), body)
		}
	}
	base := fuzzBase(f)
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		rec, err := state.Decode(typ, body)
		if err != nil {
			return
		}
		if rec.Type() != typ {
			t.Fatalf("Decode(%d) gave a %s record", typ, state.TypeName(rec.Type()))
		}
		again, err := state.Encode(nil, rec)
		if err != nil {
			t.Fatalf("Encode of a decoded record: %v", err)
		}
		rec2, err := state.Decode(typ, again)
		if err != nil || !reflect.DeepEqual(normalize(rec2), normalize(rec)) {
			t.Fatalf("decoded record does not survive Encode and Decode (%v):\n%+v\n%+v", err, rec, rec2)
		}
		s, err := state.UnmarshalSnapshot(base)
		if err != nil {
			t.Fatal(err)
		}
		lsn := s.LastLSN() + 1
		if err := s.ApplyAt(lsn, state.DefaultQueue, rec, 4096); err != nil {
			if !errors.Is(err, state.ErrInvalid) {
				t.Fatalf("Apply error %v does not wrap ErrInvalid", err)
			}
			if after, _ := s.MarshalSnapshot(); !bytes.Equal(after, base) {
				t.Fatalf("refused record %+v changed the state", rec)
			}
			return
		}
		if s.LastLSN() != lsn {
			t.Fatalf("LastLSN %d after applying record %d", s.LastLSN(), lsn)
		}
		roundTrip(t, s)
	})
}

// FuzzUnmarshalSnapshot decodes arbitrary snapshots. It must never panic;
// what it accepts must encode again to a snapshot that decodes, and must
// answer every query and take further records without panicking and without
// reaching a state whose snapshot it would refuse.
func FuzzUnmarshalSnapshot(f *testing.F) {
	f.Add(fuzzBase(f))
	_, root := snapshotFixture(f)
	f.Add(root.encode(nil))
	empty, _ := state.New().MarshalSnapshot()
	f.Add(empty)
	f.Add([]byte{})
	named, _ := namedFixture(f).MarshalSnapshot()
	f.Add(named)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := state.UnmarshalSnapshot(data)
		if err != nil {
			return
		}
		// The bodies of an old version's snapshot must be copied into
		// the log before the state can be written again.
		if ids := s.InlineIDs(); len(ids) > 0 {
			rec := &state.Relocate{Time: s.LastTime()}
			for _, id := range ids {
				b, _ := s.Inline(id)
				rec.Items = append(rec.Items, state.Relocated{ID: id, Body: b})
			}
			if err := s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, rec, 4096); err != nil {
				t.Fatalf("relocating the bodies of an accepted snapshot: %v", err)
			}
			if left := s.InlineIDs(); len(left) > 0 {
				t.Fatalf("%d bodies left inline after their relocation", len(left))
			}
		}
		b, err := s.MarshalSnapshot()
		if err != nil {
			t.Fatalf("MarshalSnapshot of an accepted snapshot: %v", err)
		}
		s2, err := state.UnmarshalSnapshot(b)
		if err != nil {
			t.Fatalf("an accepted snapshot does not decode after MarshalSnapshot: %v", err)
		}
		if b2, _ := s2.MarshalSnapshot(); !bytes.Equal(b, b2) {
			t.Fatalf("MarshalSnapshot is not stable across a round trip")
		}
		now := s.LastTime()
		s.Promote(now)
		s.NextReady()
		s.Gauges()
		s.DeadLetters(0)
		s.PassedDeadlines(now, 100)
		s.ExpiredLeases(now, 100)
		s.KeyHolder("a", now, sec)
		s.PruneKeys(now, sec)
		for _, it := range s.OpenLeases() {
			_ = s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.End{Kind: state.TypeExpire, Time: now, Receipt: it.Receipt, Due: now}, 4096)
		}
		if dead := s.DeadLetters(1); len(dead) > 0 {
			_ = s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Redrive{Time: now, IDs: []uint64{dead[0].ID}}, 4096)
		}
		_ = s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Purge{Time: now, All: true}, 4096)
		_ = s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Put{Time: now, Items: []state.NewItem{{Due: now, Key: "a"}}}, 4096)
		for it := s.NextReady(); it != nil; it = s.NextReady() {
			if s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Lease{Time: max(now, it.Due), ID: it.ID, LeaseEnd: max(now, it.Due) + 1}, 4096) != nil {
				break
			}
		}
		roundTrip(t, s) // a state it accepted stays readable after more records
	})
}

// namedFixture is a state with three queues: the default one with a ready
// item holding key "k"; "jobs" (paused until resumed, capped at one lease)
// with an item holding "k" too, leased, and a dead letter whose history is
// full and whose last error was cut; and "next", created after a queue of
// that name was deleted, holding a dead letter moved in from "jobs".
func namedFixture(t testing.TB) *state.State {
	t.Helper()
	s := state.New()
	apply := func(queue uint64, rec state.Record) uint64 {
		t.Helper()
		lsn := s.LastLSN() + 1
		if err := s.ApplyAt(lsn, queue, rec, 4096); err != nil {
			t.Fatalf("ApplyTo(%d, queue %d, %s): %v", lsn, queue, state.TypeName(rec.Type()), err)
		}
		return lsn
	}
	set := state.Settings{Visibility: 30 * sec, MaxAttempts: 20, MaxInFlight: 1}
	apply(0, &state.Put{Time: t0, Items: []state.NewItem{{Body: []byte("d"), Due: t0, Key: "k"}}})
	jobs := apply(0, &state.CreateQueue{Time: t0, Name: "jobs", Settings: set})
	apply(jobs, &state.Put{Time: t0, Items: []state.NewItem{
		{Body: []byte("leased"), Due: t0, Key: "k"}, {Body: []byte("dead"), Due: t0, Deadline: t0 + 100*sec}, {Body: []byte("moved"), Due: t0}}})
	for i := range state.HistoryLen + 2 {
		r := apply(jobs, &state.Lease{Time: t0 + int64(i), ID: 3, LeaseEnd: t0 + sec})
		apply(jobs, &state.End{Kind: state.TypeNack, Time: t0 + int64(i), Receipt: r, Cause: strings.Repeat("é", 300), Due: t0 + int64(i),
			Dead: i == state.HistoryLen+1})
	}
	r := apply(jobs, &state.Lease{Time: t0 + sec, ID: 4, LeaseEnd: t0 + 2*sec})
	apply(jobs, &state.End{Kind: state.TypeDeadLetter, Time: t0 + sec, Receipt: r, Cause: "poison", Due: t0 + sec, Dead: true})
	apply(jobs, &state.Lease{Time: t0 + sec, ID: 2, LeaseEnd: t0 + 2*sec})
	old := apply(0, &state.CreateQueue{Time: t0, Name: "next", Settings: set})
	apply(old, &state.DeleteQueue{Time: t0})
	next := apply(0, &state.CreateQueue{Time: t0, Name: "next", Settings: set})
	apply(jobs, &state.Move{Time: t0 + sec, Target: next, IDs: []uint64{4}})
	apply(jobs, &state.PauseQueue{Time: t0 + sec, Until: math.MaxInt64})
	return s
}

func BenchmarkApplyPutLeaseAck(b *testing.B) {
	s := state.New()
	body := make([]byte, 256)
	now := t0
	lsn := uint64(0)
	apply := func(rec state.Record) {
		lsn++
		if err := s.ApplyAt(lsn, state.DefaultQueue, rec, 4096); err != nil {
			b.Fatal(err)
		}
	}
	// A standing backlog, so the heaps are not trivially small.
	for range 1000 {
		apply(&state.Put{Time: now, Items: []state.NewItem{{Body: body, Due: now, Priority: int64(lsn % 3)}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		now++
		apply(&state.Put{Time: now, Items: []state.NewItem{{Body: body, Due: now, Priority: int64(lsn % 3)}}})
		s.Promote(now)
		it := s.NextReady()
		apply(&state.Lease{Time: now, ID: it.ID, LeaseEnd: now + 30*sec})
		apply(&state.Ack{Time: now, Receipt: lsn})
	}
}

func BenchmarkSnapshot(b *testing.B) {
	tp := newTape(b)
	for i := range 10000 {
		id := tp.put(t0, state.NewItem{Body: make([]byte, 100), Due: t0, Key: fmt.Sprint("key", i)})[0]
		if i%3 == 0 {
			tp.lease(t0, id)
		}
	}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tp.s.MarshalSnapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
	data, _ := tp.s.MarshalSnapshot()
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := state.UnmarshalSnapshot(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPromoteAllAfterLoad promotes at once every item a snapshot load
// left delayed, in the shapes that take each path of promotePass (one
// priority in due order, which is taken as the heap as it is; one
// priority out of order; several priorities), then deletes items from
// the middle of the heaps, which needs every item's place in its heap to
// be right, and leases the rest: the order must be priority, due time,
// Seq, ID.
func TestPromoteAllAfterLoad(t *testing.T) {
	const n = 2000
	for _, tc := range []struct {
		name string
		item func(r *rand.Rand, i int) state.NewItem
	}{
		{"one priority in due order", func(_ *rand.Rand, i int) state.NewItem { return state.NewItem{Due: t0 + int64(i)} }},
		{"one priority, same due time", func(_ *rand.Rand, i int) state.NewItem { return state.NewItem{Due: t0} }},
		{"one priority out of order", func(r *rand.Rand, _ int) state.NewItem { return state.NewItem{Due: t0 + r.Int64N(100)} }},
		{"one item out of order at the end", func(_ *rand.Rand, i int) state.NewItem {
			if i == n-1 {
				return state.NewItem{Due: t0 - 1}
			}
			return state.NewItem{Due: t0 + int64(i)}
		}},
		{"several priorities", func(r *rand.Rand, i int) state.NewItem {
			return state.NewItem{Due: t0 + int64(i), Priority: r.Int64N(3)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			tp := newTape(t)
			for i := 0; i < n; i += 100 { // puts of 100: items of one put share a Seq
				items := make([]state.NewItem, 100)
				for j := range items {
					items[j] = tc.item(r, i+j)
				}
				tp.put(t0-sec, items...)
			}
			s := roundTrip(t, tp.s)
			now := t0 + 10*n // every item is due
			s.Promote(now)
			var doomed []uint64
			for id := uint64(1); id <= n; id++ {
				if r.IntN(4) == 0 {
					doomed = append(doomed, id)
				}
			}
			if err := s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Delete{Time: now, IDs: doomed}, 4096); err != nil {
				t.Fatal(err)
			}
			var want []*state.Item
			for id := uint64(1); id <= n; id++ {
				if !slices.Contains(doomed, id) {
					want = append(want, s.Item(id))
				}
			}
			slices.SortFunc(want, func(a, b *state.Item) int {
				return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Due, b.Due),
					cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
			})
			got := drain(t, s, now)
			if len(got) != len(want) {
				t.Fatalf("%d items leased, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i].ID {
					t.Fatalf("lease %d took item %d, want %d", i, got[i], want[i].ID)
				}
			}
		})
	}
}

// TestPromoteSomeDue: with some of the delayed items due (a few, half,
// nearly all; after a snapshot load, whose heap is unordered, and in a
// live state, where Promote counts the due items to choose how to move
// them), GaugesAt counts the due ones ready before anything moves, Promote
// moves exactly those, and leases take them, then the rest once due, in
// priority, due time, Seq, ID order, with items deleted from the middle of
// both heaps in between (which needs every item's place in its heap).
func TestPromoteSomeDue(t *testing.T) {
	const n = 3000
	for _, dueShare := range []int{1, 50, 99} {
		for _, loaded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d%%_due/loaded_%v", dueShare, loaded), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dueShare), 7))
				tp := newTape(t)
				now := t0 + 1000*sec
				due := map[uint64]bool{}
				for i := 0; i < n; i += 100 {
					items := make([]state.NewItem, 100)
					for j := range items {
						at := now + 1 + r.Int64N(1000)*sec // not due at now
						if r.IntN(100) < dueShare {
							at = now - r.Int64N(1000)*sec
						}
						items[j] = state.NewItem{Due: at, Priority: r.Int64N(2)}
					}
					for j, id := range tp.put(t0, items...) {
						due[id] = items[j].Due <= now
					}
				}
				s := tp.s
				if loaded {
					s = roundTrip(t, s)
				}
				ndue := 0
				for _, d := range due {
					if d {
						ndue++
					}
				}
				if g := s.Default().GaugesAt(now); g.Ready != ndue || g.Delayed != n-ndue {
					t.Fatalf("GaugesAt before Promote: ready %d delayed %d, want %d and %d", g.Ready, g.Delayed, ndue, n-ndue)
				}
				if g := s.Gauges(); g.Ready+g.Delayed != n {
					t.Fatalf("Gauges: ready %d + delayed %d, want %d in all", g.Ready, g.Delayed, n)
				}
				s.Promote(now)
				if g := s.Gauges(); g.Ready != ndue || g.Delayed != n-ndue {
					t.Fatalf("after Promote: ready %d delayed %d, want %d and %d", g.Ready, g.Delayed, ndue, n-ndue)
				}
				var doomed []uint64
				for id := uint64(1); id <= n; id++ {
					if r.IntN(5) == 0 {
						doomed = append(doomed, id)
					}
				}
				if err := s.ApplyAt(s.LastLSN()+1, state.DefaultQueue, &state.Delete{Time: now, IDs: doomed}, 4096); err != nil {
					t.Fatal(err)
				}
				order := func(ids []uint64) []uint64 {
					items := make([]*state.Item, len(ids))
					for i, id := range ids {
						items[i] = s.Item(id)
					}
					slices.SortFunc(items, func(a, b *state.Item) int {
						return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Due, b.Due),
							cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
					})
					out := make([]uint64, len(items))
					for i, it := range items {
						out[i] = it.ID
					}
					return out
				}
				var wantNow, wantLater []uint64
				for id := uint64(1); id <= n; id++ {
					switch {
					case slices.Contains(doomed, id):
					case due[id]:
						wantNow = append(wantNow, id)
					default:
						wantLater = append(wantLater, id)
					}
				}
				wantNow, wantLater = order(wantNow), order(wantLater) // before leases change the items
				if got, want := drain(t, s, now), wantNow; !slices.Equal(got, want) {
					t.Fatalf("leases at now took %d items, want %d in order", len(got), len(want))
				}
				if got, want := drain(t, s, now+2000*sec), wantLater; !slices.Equal(got, want) {
					t.Fatalf("leases later took %d items, want %d in order", len(got), len(want))
				}
			})
		}
	}
}
