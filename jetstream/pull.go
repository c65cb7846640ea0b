package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/walq/walq"
)

// A pull is one pull request per level asked (batch 1, no prefetch: the
// server sends a message only to a caller that waits for it), whose answers
// come on one small channel: a waiting Get asks every level at once and
// takes the first message any of them sends, so it polls nothing. Each
// request has a subscription of its own on that channel (the server checks
// the interest of a waiting request before it sends to it); a pull given up
// unsubscribes what is still open and sends back (Nak) what the server sent
// before it saw that. The channel holds a few messages per request, so a
// waiting pull holds a few hundred bytes, not the 64K-slot channel of a
// synchronous subscription.
type pull struct {
	q    *Queue
	ch   chan *nats.Msg
	reqs map[string]*pullReq // by reply inbox
	open int
}

// pullReq is one request of a pull.
type pullReq struct {
	sub *nats.Subscription
	lv  *level
	// t0 is when the request was sent: a lease is timed from it, since
	// the server's AckWait starts when it sends and runs while the
	// message travels.
	t0   time.Time
	done bool
}

func (q *Queue) newPull(n int) *pull {
	return &pull{q: q, ch: make(chan *nats.Msg, 4*n+4), reqs: make(map[string]*pullReq, n)}
}

// ask sends a pull request to lv's consumer: no_wait, or waiting up to
// expires.
func (p *pull) ask(lv *level, noWait bool, expires time.Duration) error {
	d := p.q.d
	if err := d.connected("get"); err != nil {
		return err
	}
	inbox := d.nc.NewInbox()
	sub, err := d.nc.ChanSubscribe(inbox, p.ch)
	if err != nil {
		return unavailable("get", err)
	}
	req := `{"batch":1,"no_wait":true}`
	if !noWait {
		req = `{"batch":1,"expires":` + strconv.FormatInt(expires.Nanoseconds(), 10) + `}`
	}
	r := &pullReq{sub: sub, lv: lv, t0: time.Now()}
	if err := d.nc.PublishRequest(lv.nextSubj, inbox, []byte(req)); err != nil {
		sub.Unsubscribe()
		return unavailable("get", err)
	}
	p.reqs[inbox] = r
	p.open++
	return nil
}

// end ends r: it has its message or its final status.
func (p *pull) end(r *pullReq) {
	if !r.done {
		r.done = true
		p.open--
		r.sub.Unsubscribe()
	}
}

// next waits for the first message any open request is sent: nil when
// every request ended without one (no message, expired, a status to ask
// again on). A request that has no answer at all in wait means the
// server is away. The request that brought the message has ended; the
// others stay open until close.
func (p *pull) next(ctx context.Context, wait time.Duration) (*nats.Msg, *pullReq, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	busy := false
	for p.open > 0 {
		var m *nats.Msg
		select {
		case m = <-p.ch:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-p.q.d.gone:
			return nil, nil, &closedError{what: "get"}
		case <-t.C:
			return nil, nil, &unavailableError{what: "get", err: fmt.Errorf("no answer to a pull request in %v", wait)}
		}
		var r *pullReq
		if m.Sub != nil {
			// A delivery's subject is its message's: the request is
			// told by the subscription (its inbox).
			r = p.reqs[m.Sub.Subject]
		}
		if r == nil || r.done {
			p.q.release(m)
			continue
		}
		if m.Reply == "" && len(m.Data) == 0 && m.Header.Get("Status") != "" {
			status := m.Header.Get("Status")
			switch status {
			case "100": // idle heartbeat
				continue
			case "404", "408": // no messages; the request expired
				p.end(r)
				continue
			case "503":
				p.end(r)
				return nil, nil, &unavailableError{what: "get", err: nats.ErrNoResponders}
			case "409":
				p.end(r)
				desc := m.Header.Get("Description")
				if desc == "Consumer Deleted" || desc == "Consumer is push based" {
					return nil, nil, fmt.Errorf("walq/jetstream: get: the consumer of queue %q (priority %d): %s", p.q.name, r.lv.prio, desc)
				}
				// Leadership change, too many waiting requests: ask again,
				// after a little (not in a tight loop).
				busy = true
				continue
			default:
				p.end(r)
				return nil, nil, fmt.Errorf("walq/jetstream: get: status %s %s", status, m.Header.Get("Description"))
			}
		}
		p.end(r)
		return m, r, nil
	}
	if busy {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, nil, nil
}

// close gives up the requests still open: they are unsubscribed, and
// what the server sent them before it saw that is sent back. That takes
// a round trip to the server, so it is done in the background.
func (p *pull) close() {
	var open []*nats.Subscription
	for _, r := range p.reqs {
		if !r.done {
			r.done = true
			open = append(open, r.sub)
		}
	}
	p.open = 0
	if len(open) == 0 && len(p.ch) == 0 {
		return
	}
	p.q.bg.Add(1)
	go func() {
		defer p.q.bg.Done()
		for _, s := range open {
			// Drain sends the unsubscribe and keeps the subscription until
			// a flush: what the server sent before it goes on arriving on
			// the channel.
			if s.Drain() != nil {
				s.Unsubscribe()
			}
		}
		// The server answers a flush after every message it sent before
		// the unsubscribes it read first.
		p.q.d.nc.FlushTimeout(2 * time.Second)
		for {
			select {
			case m := <-p.ch:
				p.q.release(m)
			default:
				return
			}
		}
	}()
}

// release sends back a delivery nobody takes. Its record, if it has one,
// is untouched: the delivery was no attempt.
func (q *Queue) release(m *nats.Msg) {
	if _, ok := parseAck(m.Reply); ok {
		q.d.nc.Publish(m.Reply, []byte("-NAK"))
	}
}

// pullOne asks lv's consumer for one message, without waiting or waiting
// up to expires. A nil message means none came.
func (q *Queue) pullOne(ctx context.Context, lv *level, noWait bool, expires time.Duration) (*nats.Msg, time.Time, error) {
	p := q.newPull(1)
	if err := p.ask(lv, noWait, expires); err != nil {
		return nil, time.Time{}, err
	}
	// A live server answers a no_wait request at once; one that went away
	// as it was sent never does, and TryGet must not block a WorkQueues
	// pool for long (it finds nothing, and is asked again).
	wait := time.Second
	if !noWait {
		wait = expires + time.Second
	}
	m, r, err := p.next(ctx, wait)
	p.close()
	if m == nil {
		return nil, time.Time{}, err
	}
	return m, r.t0, nil
}

// accept turns a delivery into a lease, or settles it itself: a message
// walq did not write goes to the dead letters, one past its deadline is
// discarded, one that came before its due time goes back for the rest of
// its delay, one past its attempts (its last lease expired with nobody to
// see it) goes to the dead letters.
func (q *Queue) accept(m *nats.Msg, t0 time.Time, lv *level) (walq.Message, bool) {
	meta, ok := parseAck(m.Reply)
	if !ok {
		q.d.log.Warn("walq/jetstream: a delivery without JetStream's ack subject; ignored", "subject", m.Subject, "reply", m.Reply)
		return walq.Message{}, false
	}
	lv.seen(meta.sseq)
	o := q.opt()
	until := t0.Add(o.Visibility)
	foreign := func(why string) (walq.Message, bool) {
		cause := fmt.Sprintf("%v: %s (subject %s, stream sequence %d)", errForeign, why, m.Subject, meta.sseq)
		q.d.log.Warn("walq/jetstream: dead-lettering a message walq did not write", "cause", cause)
		if err := q.moveToDead(context.Background(), m, meta, meta.sseq, lv.prio, int(meta.delivered), int(meta.delivered),
			[]attempt{{How: "deadletter", Error: cutError(cause)}}, cause, until); err != nil {
			q.d.log.Warn("walq/jetstream: could not dead-letter a foreign message; it comes back after the visibility", "seq", meta.sseq, "err", err)
		}
		return walq.Message{}, false
	}
	h := m.Header
	if h == nil || h.Get(HeaderVersion) == "" {
		return foreign("no " + HeaderVersion + " header")
	}
	if v := h.Get(HeaderVersion); v != formatVersion {
		return foreign(fmt.Sprintf("%s %q is not a version this build knows", HeaderVersion, v))
	}
	id := meta.sseq
	if s := h.Get(HeaderID); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v == 0 {
			return foreign(fmt.Sprintf("header %s %q", HeaderID, s))
		}
		id = v
	}
	due, hasDue, err1 := intHeader(h, HeaderDue)
	deadline, hasDeadline, err2 := intHeader(h, HeaderDeadline)
	before, _, err3 := intHeader(h, HeaderAttemptsBefore)
	delivBefore, _, err4 := intHeader(h, HeaderDeliveriesBefore)
	putAt, hasPut, err5 := intHeader(h, HeaderPut)
	hist, err6 := decodeHistory(h.Get(HeaderHistory))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return foreign("malformed walq header: " + err.Error())
	}
	now := time.Now()
	expired := hasDeadline && !now.Before(time.Unix(0, deadline))
	early := hasDue && now.Before(time.Unix(0, due))
	l := &lease{q: q, msg: m, meta: meta, id: id, prio: lv.prio, start: t0, end: t0.Add(o.Visibility - o.Fence),
		srvEnd: t0.Add(o.Visibility), tok: newToken()}
	if !now.Before(l.end) {
		// The request waited so long that no lease is left: back at once.
		q.sendBack(m, "-NAK")
		return walq.Message{}, false
	}
	ctx, cancel := context.WithDeadline(context.Background(), l.end)
	defer cancel()
	lr := &record{Seq: meta.sseq, ID: id, St: recLease, Tok: l.tok, Start: t0.UnixNano(),
		End: t0.Add(o.Visibility).UnixNano(), Hist: hist}
	if meta.delivered == 1 && !expired && !early && int(before) < o.MaxAttempts {
		// The first delivery of a message: its record is made, unless
		// one is there (the server lost its memory of a delivery).
		lr.Att, lr.Deliv = int(before)+1, int(delivBefore)+1
		rev, err := q.d.writeItem(ctx, lr, 0)
		if err == nil {
			return q.hand(l, lr, rev, h, hasPut, putAt)
		}
		if !errors.Is(err, errRecordMoved) {
			q.d.log.Warn("walq/jetstream: could not write the record of a delivery; sent back", "id", id, "err", err)
			q.sendBack(m, `-NAK {"delay":1000000000}`)
			return walq.Message{}, false
		}
	}
	for try := 0; try < 3; try++ {
		cur, rev, err := q.d.readItem(ctx, meta.sseq)
		if err != nil {
			q.d.log.Warn("walq/jetstream: could not read the record of a delivery; sent back", "id", id, "err", err)
			q.sendBack(m, `-NAK {"delay":1000000000}`)
			return walq.Message{}, false
		}
		next := *lr
		if cur != nil {
			switch cur.St {
			case recDone:
				// Acked or discarded, the message not yet: finished
				// without running it.
				q.finish(m, meta.sseq, "+ACK", until)
				return walq.Message{}, false
			case recDead:
				// Dead-lettered, the dead letter perhaps not stored and
				// the message not terminated: both, again.
				if err := q.moveToDead(ctx, m, meta, id, lv.prio, cur.Att, cur.Deliv, cur.Hist, cur.Cause, until); err != nil {
					q.d.log.Warn("walq/jetstream: could not finish dead-lettering an item", "id", id, "err", err)
				}
				return walq.Message{}, false
			case recLease:
				if left := cur.End - now.UnixNano(); left > 0 {
					// Held by a lease that has not ended: the server
					// forgot it (a restart, a new consumer leader) or
					// was told to deliver again by a call that came
					// late (a stale Nak). Back until that lease's end.
					q.sendBack(m, fmt.Sprintf(`-NAK {"delay":%d}`, left+int64(50*time.Millisecond)))
					return walq.Message{}, false
				}
				cur.Hist = trimHistory(append(cur.Hist, attempt{Start: cur.Start, End: time.Unix(0, cur.End).UnixNano(), How: "expire"}))
			}
			next.Att, next.Deliv, next.Hist = cur.Att+1, cur.Deliv+1, cur.Hist
		} else {
			// No record: no lease of this adapter's ran it. Deliveries
			// nobody took (a pull given up, sent back) are no attempts.
			next.Att, next.Deliv = int(before)+1, int(delivBefore)+int(meta.delivered)
			if meta.delivered > 1 {
				// Perhaps delivered before by an older adapter, which kept
				// no record, counted the server's deliveries as attempts
				// and kept a history under the item's ID.
				if old := q.readHistory(ctx, id); len(old) > 0 {
					next.Hist = trimHistory(append(next.Hist, old...))
					next.Att = int(before) + int(meta.delivered)
					l.oldHist = true
				}
			}
		}
		switch {
		case expired:
			// Discarded, never delivered: its deadline passed while it
			// waited.
			done := record{Seq: meta.sseq, ID: id, St: recDone, Tok: l.tok, Att: next.Att - 1}
			if _, err := q.d.writeItem(ctx, &done, rev); errors.Is(err, errRecordMoved) {
				continue
			} else if err != nil {
				q.d.log.Warn("walq/jetstream: could not discard an item past its deadline", "id", id, "err", err)
				return walq.Message{}, false
			}
			q.finish(m, meta.sseq, "+TERM walq: deadline passed", until)
			if l.oldHist {
				q.background(func(ctx context.Context) { q.dropHistory(ctx, id) })
			}
			return walq.Message{}, false
		case early:
			// Early: the server's clock is behind this one. Back for the
			// rest of the delay; the delivery is no attempt.
			q.sendBack(m, fmt.Sprintf(`-NAK {"delay":%d}`, time.Unix(0, due).Sub(now).Nanoseconds()))
			return walq.Message{}, false
		case next.Att > o.MaxAttempts:
			// Its last lease ended with nobody to see it (the holder
			// went away): to the dead letters.
			cause := fmt.Sprintf("walq/jetstream: the lease expired on the last attempt (%d of %d)", next.Att-1, o.MaxAttempts)
			dead := record{Seq: meta.sseq, ID: id, St: recDead, Tok: l.tok, Att: next.Att - 1, Deliv: next.Deliv - 1, Hist: next.Hist, Cause: cause}
			if _, err := q.d.writeItem(ctx, &dead, rev); errors.Is(err, errRecordMoved) {
				continue
			} else if err != nil {
				q.d.log.Warn("walq/jetstream: could not dead-letter an item past its attempts", "id", id, "err", err)
				return walq.Message{}, false
			}
			if err := q.moveToDead(ctx, m, meta, id, lv.prio, dead.Att, dead.Deliv, dead.Hist, cause, until); err != nil {
				q.d.log.Warn("walq/jetstream: could not dead-letter an item past its attempts; its next delivery will", "id", id, "err", err)
			}
			return walq.Message{}, false
		}
		nrev, err := q.d.writeItem(ctx, &next, rev)
		if errors.Is(err, errRecordMoved) {
			continue
		}
		if err != nil {
			q.d.log.Warn("walq/jetstream: could not write the record of a delivery; sent back", "id", id, "err", err)
			q.sendBack(m, `-NAK {"delay":1000000000}`)
			return walq.Message{}, false
		}
		return q.hand(l, &next, nrev, h, hasPut, putAt)
	}
	// Taken by other deliveries three times over: back, for a little.
	q.sendBack(m, `-NAK {"delay":100000000}`)
	return walq.Message{}, false
}

// sendBack answers a delivery with body (a Nak) without waiting: a Nak
// that is lost leaves the message to come back after the AckWait.
func (q *Queue) sendBack(m *nats.Msg, body string) { q.d.nc.Publish(m.Reply, []byte(body)) }

// finish ends the message of a finished item (its record says acked or
// discarded) with body, an Ack or a Term, then drops the record.
func (q *Queue) finish(m *nats.Msg, seq uint64, body string, until time.Time) {
	if err := q.replyUntil(m.Reply, body, until); err != nil {
		q.d.log.Warn("walq/jetstream: could not finish the message of a finished item; its next delivery will", "seq", seq, "err", err)
		return
	}
	q.background(func(ctx context.Context) { q.d.dropItem(ctx, seq) })
}

// hand makes l, whose record r is stored at rev, a lease of the queue, and
// returns its message.
func (q *Queue) hand(l *lease, r *record, rev uint64, h nats.Header, hasPut bool, putAt int64) (walq.Message, bool) {
	l.rev, l.rec = rev, *r
	l.attempt, l.deliv = r.Att, r.Deliv
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		// Its record holds the lease until its end: the item comes back
		// then, as after a crash.
		return walq.Message{}, false
	}
	q.next++
	if q.next == 0 {
		q.next++
	}
	l.n = q.next
	q.leases[l.n] = l
	q.mu.Unlock()
	// Under the lease's lock, which expire takes first: the timer may fire
	// at once. No one has the receipt before accept returns.
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.end), func() { q.expire(l) })
	l.mu.Unlock()
	m := l.msg
	msg := walq.Message{
		ID:         l.id,
		Queue:      q.name,
		Receipt:    q.receipt(l.n),
		Body:       m.Data,
		Attempt:    l.attempt,
		Deliveries: l.deliv,
		Priority:   l.prio,
		Key:        text(h, HeaderKey),
		LeaseEnd:   l.end,
	}
	if hasPut {
		msg.EnqueuedAt = time.Unix(0, putAt)
	}
	return msg, true
}
