package walqtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
)

// The durations in the Configs below are in units (see newEnv): written
// as seconds, scaled to ten seconds on a manual clock and a quarter of a
// second in real time.

// baseConfig has no backoff: an engine applies the backoff from the moment
// it ends a lease, which on a manual clock is after the clock moved past
// the lease's end, so a wait for a redelivery after an expiry would need a
// second step of the clock that only the engine knows when to take.
func baseConfig() Config {
	return Config{Visibility: 4 * time.Second, MaxAttempts: 5, Backoff: noBackoff, KeyWindow: 40 * time.Second}
}

// testAckEndsItem: an acked item is gone: it never comes back, not even
// after its visibility would have run out, and a second ack is stale.
func testAckEndsItem(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m := e.getID("lease", id)
	mustOK(t, "ack", e.q.Ack(m.Receipt))
	e.advance(e.units(10))
	e.none("after the ack and twice the visibility")
	mustLost(t, "a second ack with the same receipt", e.q.Ack(m.Receipt))
}

// testExtendHoldsLease: Extend pushes the lease's end, so an item kept past
// its first visibility is not delivered again, and its ack is on time.
func testExtendHoldsLease(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m := e.getID("lease", id)
	for i := range 3 {
		e.advance(e.units(2.5))
		mustOK(t, fmt.Sprintf("extend %d", i+1), e.q.Extend(m.Receipt, e.cfg.Visibility))
	}
	// 7.5 units since the lease began, 2.5 since the last extension: past
	// the first visibility (4), within the extended one.
	e.advance(e.units(2.5))
	e.none("during the extended lease")
	mustOK(t, "ack after the extensions", e.q.Ack(m.Receipt))
	e.advance(e.units(10))
	e.none("after the ack")
}

// testStaleAfterExpiry: once a lease expires and the item is leased again,
// every call with the first receipt returns ErrLeaseLost and changes
// nothing; the second lease goes on as if those calls never came.
func testStaleAfterExpiry(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m1 := e.getID("first lease", id)
	e.advance(e.units(5.5)) // past the visibility
	m2 := e.getID("second lease, after the first expired", id)
	if m2.Receipt == m1.Receipt {
		t.Fatalf("the second lease has the first one's receipt %v", m1.Receipt)
	}
	if m2.Attempt != 2 {
		t.Fatalf("second lease: attempt %d, want 2", m2.Attempt)
	}
	mustLost(t, "Extend with the expired receipt", e.q.Extend(m1.Receipt, e.cfg.Visibility))
	mustLost(t, "Ack with the expired receipt", e.q.Ack(m1.Receipt))
	mustLost(t, "Nack with the expired receipt", e.q.Nack(m1.Receipt, errors.New("stale")))
	mustLost(t, "DeadLetter with the expired receipt", e.q.DeadLetter(m1.Receipt, errors.New("stale")))
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("stale calls made %d dead letters", len(dl))
	}
	e.none("while the second lease runs, after the stale calls")
	// The stale Extend did not extend the second lease either: it ends at
	// its own visibility, and the item comes back as attempt 3.
	e.advance(e.units(5.5))
	m3 := e.getID("third lease, after the second expired", id)
	if m3.Attempt != 3 {
		t.Fatalf("third lease: attempt %d, want 3", m3.Attempt)
	}
	mustLost(t, "Ack with the second, expired receipt", e.q.Ack(m2.Receipt))
	mustOK(t, "Ack with the current receipt", e.q.Ack(m3.Receipt))
	e.advance(e.units(10))
	e.none("after the ack")
}

// testStaleAfterRedrive: a receipt from before an item was dead-lettered
// and redriven does not act on the new lease.
func testStaleAfterRedrive(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m1 := e.getID("first lease", id)
	mustOK(t, "dead-letter", e.q.DeadLetter(m1.Receipt, errors.New("poison")))
	mustOK(t, "redrive", e.q.Redrive(id))
	m2 := e.getID("lease after the redrive", id)
	mustLost(t, "Ack with the receipt from before the redrive", e.q.Ack(m1.Receipt))
	mustLost(t, "Extend with the receipt from before the redrive", e.q.Extend(m1.Receipt, e.cfg.Visibility))
	mustLost(t, "DeadLetter with the receipt from before the redrive", e.q.DeadLetter(m1.Receipt, errors.New("stale")))
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("the stale DeadLetter made %d dead letters", len(dl))
	}
	mustOK(t, "Ack with the current receipt", e.q.Ack(m2.Receipt))
	e.advance(e.units(10))
	e.none("after the ack")
}

// testNackBackoff: a nacked item comes back after the engine's backoff for
// the attempt, never before.
func testNackBackoff(t *testing.T, tg Target) {
	cfg := baseConfig()
	cfg.Backoff = func(attempt int) time.Duration { return time.Duration(attempt) * 2 * time.Second }
	e := newEnv(t, tg, cfg)
	id := e.put("a")
	m := e.getID("first lease", id)
	for attempt := 1; attempt <= 3; attempt++ {
		wait := e.cfg.Backoff(attempt)
		start := e.now()
		mustOK(t, fmt.Sprintf("nack %d", attempt), e.q.Nack(m.Receipt, errors.New("transient")))
		if e.clock != nil {
			e.advance(wait - time.Millisecond)
			e.noneNow(fmt.Sprintf("1ms before the backoff of attempt %d (%v) ends", attempt, wait))
			e.advance(time.Millisecond)
		}
		m = e.getID(fmt.Sprintf("lease after the backoff of attempt %d", attempt), id)
		if got := e.now().Sub(start); got < wait {
			t.Fatalf("attempt %d: delivered %v after the nack, before its backoff of %v", attempt+1, got, wait)
		}
		if m.Attempt != attempt+1 {
			t.Fatalf("after %d nacks: attempt %d", attempt, m.Attempt)
		}
	}
	mustOK(t, "ack", e.q.Ack(m.Receipt))
}

// testAttemptsAtLease: an attempt is counted when its lease starts, so a
// lease that ends by expiry, with no nack, counts as much as one that is
// nacked.
func testAttemptsAtLease(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m := e.getID("first lease", id)
	if m.Attempt != 1 {
		t.Fatalf("first lease: attempt %d", m.Attempt)
	}
	e.advance(e.units(5.5))
	m = e.getID("lease after an expiry", id)
	if m.Attempt != 2 {
		t.Fatalf("after an expired lease: attempt %d, want 2", m.Attempt)
	}
	mustOK(t, "nack", e.q.Nack(m.Receipt, errors.New("transient")))
	e.advance(e.units(1))
	m = e.getID("lease after a nack", id)
	if m.Attempt != 3 {
		t.Fatalf("after an expiry and a nack: attempt %d, want 3", m.Attempt)
	}
	mustOK(t, "ack", e.q.Ack(m.Receipt))
}

// testAttemptsAcrossReopen: a lease open when the queue closes counted its
// attempt; the item comes back after the reopen with the next one.
func testAttemptsAcrossReopen(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m := e.getID("first lease", id)
	e.reopen()
	e.advance(e.units(5.5)) // the lease's end and the backoff, for engines that keep leases across a reopen
	m2 := e.getID("lease after the reopen", id)
	if m2.Attempt != 2 {
		t.Fatalf("after a lease open at the close: attempt %d, want 2", m2.Attempt)
	}
	mustLost(t, "Ack with the receipt from before the reopen", e.q.Ack(m.Receipt))
	mustOK(t, "ack", e.q.Ack(m2.Receipt))
}

// testDeadLetters: an item out of attempts goes to the dead letters with
// its last error and its attempts; DeadLetter sends one at once; neither
// is delivered again.
func testDeadLetters(t *testing.T, tg Target) {
	cfg := baseConfig()
	cfg.MaxAttempts = 3
	e := newEnv(t, tg, cfg)
	a := e.put("out of attempts")
	for attempt := 1; attempt <= 3; attempt++ {
		m := e.getID(fmt.Sprintf("attempt %d", attempt), a)
		mustOK(t, "nack", e.q.Nack(m.Receipt, fmt.Errorf("boom %d", attempt)))
		e.advance(e.units(1))
	}
	b := e.put("poison")
	m := e.getID("lease of the poison item", b)
	mustOK(t, "dead-letter", e.q.DeadLetter(m.Receipt, errors.New("cannot parse")))
	c := e.put("expired on its last attempt")
	for attempt := 1; attempt <= 3; attempt++ {
		e.getID(fmt.Sprintf("attempt %d of the item whose leases expire", attempt), c)
		e.advance(e.units(5.5))
	}
	var dl map[uint64]walq.DeadLetter
	eventually(t, "three dead letters", func() (bool, error) {
		dl = e.deadLetters()
		return len(dl) == 3, nil
	})
	check := func(id uint64, body string, attempts int, cause string) {
		t.Helper()
		d, ok := dl[id]
		switch {
		case !ok:
			t.Fatalf("item %d (%q) is not a dead letter", id, body)
		case string(d.Body) != body:
			t.Fatalf("dead letter %d: body %q, want %q", id, d.Body, body)
		case d.Attempts != attempts:
			t.Fatalf("dead letter %d (%q): %d attempts, want %d", id, body, d.Attempts, attempts)
		case !strings.Contains(d.LastError, cause):
			t.Fatalf("dead letter %d (%q): last error %q, want it to say %q", id, body, d.LastError, cause)
		}
	}
	check(a, "out of attempts", 3, "boom 3")
	check(b, "poison", 1, "cannot parse")
	check(c, "expired on its last attempt", 3, "")
	e.advance(e.units(10))
	e.none("with only dead letters stored")
}

// testRedrive: a redriven dead letter is ready again with its ID and body,
// its attempts counted from 1; redriving what is not a dead letter is
// ErrNotFound.
func testRedrive(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	m := e.getID("lease", id)
	mustOK(t, "dead-letter", e.q.DeadLetter(m.Receipt, errors.New("poison")))
	e.none("a dead letter")
	if err := e.q.Redrive(id + 1000); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("redrive of an ID that is no dead letter: got %v, want ErrNotFound", err)
	}
	mustOK(t, "redrive", e.q.Redrive(id))
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("after the redrive: %d dead letters, want 0", len(dl))
	}
	m = e.getID("lease after the redrive", id)
	if string(m.Body) != "a" || m.Attempt != 1 {
		t.Fatalf("after the redrive: %s, want body \"a\" and attempt 1", describe(m))
	}
	if err := e.q.Redrive(id); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("redrive of a leased item: got %v, want ErrNotFound", err)
	}
	mustOK(t, "ack", e.q.Ack(m.Receipt))
}

// testPurge: a purged dead letter is gone for good.
func testPurge(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	id := e.put("a")
	keep := e.put("b")
	for range 2 {
		m := e.get("lease")
		mustOK(t, "dead-letter", e.q.DeadLetter(m.Receipt, errors.New("poison")))
	}
	if err := e.q.PurgeDeadLetters(id + 1000); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("purge of an ID that is no dead letter: got %v, want ErrNotFound", err)
	}
	mustOK(t, "purge", e.q.PurgeDeadLetters(id))
	dl := e.deadLetters()
	if _, ok := dl[id]; ok || len(dl) != 1 {
		t.Fatalf("after purging %d: dead letters %v, want only %d", id, keys(dl), keep)
	}
	if err := e.q.Redrive(id); !errors.Is(err, walq.ErrNotFound) {
		t.Fatalf("redrive of a purged item: got %v, want ErrNotFound", err)
	}
	e.advance(e.units(10))
	e.none("after the purge")
}

func keys(m map[uint64]walq.DeadLetter) []uint64 {
	var out []uint64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testDelayNeverEarly: a delayed item is delivered at its delay, never
// before; items of several delays come in the order they become ready.
func testDelayNeverEarly(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	start := e.now()
	delays := []float64{3, 1, 2}
	ids := make(map[uint64]time.Duration)
	for _, d := range delays {
		ids[e.put(fmt.Sprintf("delay %v", d), walq.WithDelay(e.units(d)))] = e.units(d)
	}
	for i := 1; i <= 3; i++ {
		if e.clock != nil {
			e.advance(e.units(1) - time.Millisecond)
			e.noneNow(fmt.Sprintf("1ms before the delay of %d units ends", i))
			e.advance(time.Millisecond)
		}
		m := e.get(fmt.Sprintf("the item delayed %d units", i))
		got := e.now().Sub(start)
		if want, ok := ids[m.ID]; !ok || want != e.units(float64(i)) {
			t.Fatalf("%v after the puts: got %s, want the item delayed %v", got, describe(m), e.units(float64(i)))
		}
		if got < e.units(float64(i)) {
			t.Fatalf("%s delayed %v was delivered %v after its put: early", describe(m), e.units(float64(i)), got)
		}
		mustOK(t, "ack", e.q.Ack(m.Receipt))
	}
}

// testEarlierInsertWakes: a consumer blocked with only a far-off item
// stored is woken by a put that is due sooner.
func testEarlierInsertWakes(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	far := e.put("far", walq.WithDelay(e.units(1000)))
	got := make(chan walq.Message, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	go func() {
		m, err := e.q.Get(ctx)
		if err != nil {
			t.Errorf("blocked Get: %v", err)
		}
		got <- m
	}()
	// Give the Get the time to block; whether it has or not, the item
	// below must wake it.
	time.Sleep(quietFor)
	start := e.now()
	near := e.put("near", walq.WithDelay(e.units(2)))
	if e.clock != nil {
		e.advance(e.units(2) - time.Millisecond)
		select {
		case m := <-got:
			t.Fatalf("the blocked Get returned %s 1ms before the near item was due", describe(m))
		case <-time.After(quietFor):
		}
		e.advance(time.Millisecond)
	}
	m := <-got
	if m.ID != near {
		t.Fatalf("the woken Get returned item %d, want %d (the far one is %d)", m.ID, near, far)
	}
	if d := e.now().Sub(start); d < e.units(2) {
		t.Fatalf("the near item was delivered %v after its put, before its delay of %v", d, e.units(2))
	}
	mustOK(t, "ack", e.q.Ack(m.Receipt))
}

// testDeadlineAfterDelay: an item whose deadline passes after its delay but
// before anyone takes it is discarded, never delivered; one whose deadline
// is not after its due time is refused.
func testDeadlineAfterDelay(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	now := e.now()
	if _, err := e.q.Put(context.Background(), []byte("bad"), walq.WithDelay(e.units(2)), walq.WithDeadline(now.Add(e.units(1)))); !errors.Is(err, walq.ErrInvalidDeadline) {
		t.Fatalf("put with its deadline before its due time: got %v, want ErrInvalidDeadline", err)
	}
	gone := e.put("missed", walq.WithDelay(e.units(2)), walq.WithDeadline(now.Add(e.units(3))))
	kept := e.put("in time", walq.WithDelay(e.units(2)), walq.WithDeadline(now.Add(e.units(100))))
	e.advance(e.units(4))
	m := e.get("the item whose deadline has not passed")
	if m.ID != kept {
		t.Fatalf("got %s, want item %d; item %d's deadline had passed", describe(m), kept, gone)
	}
	mustOK(t, "ack", e.q.Ack(m.Receipt))
	e.none("after the deadline of the other item")
	if _, ok := e.deadLetters()[gone]; ok {
		t.Fatalf("the discarded item %d is a dead letter", gone)
	}
}

// testPriorityOrder: ready items come smallest priority first, and within
// a priority in the order they became ready (not the order of their puts).
func testPriorityOrder(t *testing.T, tg Target) {
	e := newEnv(t, tg, baseConfig())
	a := e.put("p0 ready at 3", walq.WithDelay(e.units(3)))
	b := e.put("p0 ready at 2", walq.WithDelay(e.units(2)))
	c := e.put("p0 ready at once")
	d := e.put("p-1 ready at 4", walq.WithPriority(-1), walq.WithDelay(e.units(4)))
	f := e.put("p1 ready at once", walq.WithPriority(1))
	e.advance(e.units(5))
	for _, want := range []uint64{d, c, b, a, f} {
		m := e.getID("priority then ready order", want)
		mustOK(t, "ack", e.q.Ack(m.Receipt))
	}
}

// testKeysAcrossReopen: a key holds its item's ID across a reopen, and for
// the key window after the ack; after the window it is free.
func testKeysAcrossReopen(t *testing.T, tg Target) {
	cfg := baseConfig()
	cfg.KeyWindow = 8 * time.Second
	e := newEnv(t, tg, cfg)
	put := func(body string) (uint64, error) {
		return e.q.Put(context.Background(), []byte(body), walq.WithKey("order-17"))
	}
	id, err := put("first")
	mustOK(t, "put with a key", err)
	dup := func(when string) {
		t.Helper()
		got, err := put("again")
		if !errors.Is(err, walq.ErrDuplicate) || got != id {
			t.Fatalf("put with a held key %s: got %d, %v; want %d and ErrDuplicate", when, got, err, id)
		}
	}
	dup("while its item waits")
	e.reopen()
	dup("after a reopen")
	m := e.getID("lease", id)
	mustOK(t, "ack", e.q.Ack(m.Receipt))
	dup("after the ack")
	e.reopen()
	dup("after the ack and a reopen")
	e.advance(e.units(9))
	id2, err := put("after the window")
	mustOK(t, "put after the key window", err)
	if id2 == id {
		t.Fatalf("the put after the key window returned the old ID %d", id)
	}
	m = e.getID("lease of the new item", id2)
	if string(m.Body) != "after the window" {
		t.Fatalf("new item: %s", describe(m))
	}
	mustOK(t, "ack", e.q.Ack(m.Receipt))
}
