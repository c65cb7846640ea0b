package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
)

// deadLetterLocked moves l's item to the dead letters with cause: its
// record says so first (with the revision the lease holds), then the dead
// letter is stored and the delivery terminated. A crash or a lost answer
// after the record leaves the rest to the message's next delivery, which
// finds the record dead and does it again (the dead letter deduplicated by
// the item's ID and the message's sequence, one message per ID), and never
// runs the item.
func (q *Queue) deadLetterLocked(l *lease, cause error, how string) error {
	now := time.Now()
	text := errText(cause)
	ctx, cancel := context.WithDeadline(context.Background(), l.end)
	defer cancel()
	dead := l.rec
	dead.St, dead.Cause, dead.Tok = recDead, text, l.tok
	dead.Hist = trimHistory(append(append([]attempt(nil), l.rec.Hist...), attempt{Start: l.start.UnixNano(), End: now.UnixNano(), How: how, Error: text}))
	if err := q.settleRecord(ctx, l, &dead, "dead-letter"); err != nil {
		return err
	}
	q.endLocked(l)
	// The record holds it now: the rest may outlive the lease.
	mctx, mcancel := context.WithTimeout(q.ctx, 10*time.Second)
	defer mcancel()
	if err := q.moveToDead(mctx, l.msg, l.meta, l.id, l.prio, dead.Att, dead.Deliv, dead.Hist, text, time.Now().Add(10*time.Second)); err != nil {
		q.d.log.Warn("walq/jetstream: dead-letter: the record says dead, the dead letter or the Term is not stored yet; the message's next delivery finishes it", "id", l.id, "err", err)
	}
	if l.oldHist {
		q.background(func(ctx context.Context) { q.dropHistory(ctx, l.id) })
	}
	return nil
}

// moveToDead publishes the dead letter of the delivery m (deduplicated by
// the item's ID and the message's stream sequence, one message per ID in
// the dead-letter stream), then terminates the delivery and drops its
// record: in this order, so that a crash between the two leaves the item
// in both places, its record dead (its next delivery moves it again,
// deduplicated, and does not run it), and never in neither. hist is the
// item's history, its last attempt included.
func (q *Queue) moveToDead(ctx context.Context, m *nats.Msg, meta ackMeta, id uint64, prio, attempts, deliveries int, hist []attempt, cause string, until time.Time) error {
	hist = trimHistory(hist)
	h := deadHeader(q.name, m.Header, id, prio, attempts, deliveries, meta.sseq, hist, cutError(cause))
	body := m.Data
	if err := q.d.fitDeadLetter(h, len(body)); err != nil {
		// Too large to keep even cut (a message another publisher wrote,
		// near the server's max_payload): a dead letter without the body,
		// whose cause says so, rather than a message that comes back
		// after every visibility for good.
		note := fmt.Sprintf("walq/jetstream: the body of %d B was too large to keep in a dead letter under the server's max_payload of %d B: dropped (stream sequence %d); ",
			len(body), q.d.maxPayload(), meta.sseq)
		body = nil
		h = deadHeader(q.name, m.Header, id, prio, attempts, deliveries, meta.sseq, hist, cutError(note+cause))
		h.Set(HeaderBodyDropped, strconv.Itoa(len(m.Data)))
		if err := q.d.fitDeadLetter(h, 0); err != nil {
			// Not even that: the message is terminated, never to come
			// back, and the log is all that is left of it.
			q.d.log.Error("walq/jetstream: a message too large to dead-letter even without its body: terminated, its body lost",
				"queue", q.name, "id", id, "subject", m.Subject, "seq", meta.sseq, "size", len(m.Data), "cause", cause, "err", err)
			if err := q.replyUntil(m.Reply, "+TERM walq: too large to dead-letter", until); err != nil {
				return unavailable("dead-letter (Term of a message too large to keep)", err)
			}
			q.d.dropItem(ctx, meta.sseq)
			return nil
		}
	}
	pctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	if _, err := q.d.js.PublishMsg(pctx, &nats.Msg{Subject: q.d.dlqSubject(q.name, id), Header: h, Data: body}); err != nil {
		return unavailable("dead-letter", err)
	}
	if deadLetterStored != nil {
		deadLetterStored()
	}
	if err := q.replyUntil(m.Reply, "+TERM walq: dead-lettered", until); err != nil {
		return unavailable("dead-letter (Term after the move)", err)
	}
	q.d.dropItem(ctx, meta.sseq)
	return nil
}

// deadLetterStored, when set (by a test), runs between a dead letter's
// publish and the Term of its message: where a crash leaves both.
var deadLetterStored func()

// deadHeader is the headers of the dead letter of an item of queue whose
// message had the headers item.
func deadHeader(queue string, item nats.Header, id uint64, prio, attempts, deliveries int, seq uint64, hist []attempt, cause string) nats.Header {
	h := nats.Header{}
	h.Set(HeaderVersion, formatVersion)
	h.Set(HeaderID, strconv.FormatUint(id, 10))
	h.Set(HeaderQueue, queue)
	h.Set(HeaderPriority, strconv.Itoa(prio))
	setText(h, HeaderError, cause)
	h.Set(HeaderAttempts, strconv.Itoa(attempts))
	h.Set(HeaderDeliveriesBefore, strconv.Itoa(deliveries))
	h.Set(HeaderDeadAt, nanos(time.Now()))
	h.Set(HeaderSeq, strconv.FormatUint(seq, 10))
	if s := encodeHistory(hist); s != "" {
		h.Set(HeaderHistory, s)
	}
	copyText(h, item, HeaderKey)
	for _, k := range []string{HeaderPut, HeaderDeadline} {
		if v := item.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("walq-dl-%d-%d", id, seq))
	return h
}

// DeadLetters returns up to limit dead letters of the queue (limit <= 0:
// all), oldest first.
func (q *Queue) DeadLetters(limit int) ([]walq.DeadLetter, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	if err := q.d.connected("dead letters"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []walq.DeadLetter
	seq := uint64(1)
	for limit <= 0 || len(out) < limit {
		m, err := q.d.dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(q.d.dlqFilter(q.name)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, unavailable("dead letters", err)
		}
		out = append(out, deadLetterOf(m))
		seq = m.Sequence + 1
	}
	return out, nil
}

func deadLetterOf(m *jetstream.RawStreamMsg) walq.DeadLetter {
	h := m.Header
	d := walq.DeadLetter{Body: m.Data, Key: text(h, HeaderKey), LastError: text(h, HeaderError)}
	d.ID, _ = strconv.ParseUint(h.Get(HeaderID), 10, 64)
	d.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	d.Deliveries, _ = strconv.Atoi(h.Get(HeaderDeliveriesBefore))
	if v, ok, _ := intHeader(h, HeaderDeadAt); ok {
		d.DeadAt = time.Unix(0, v)
	} else {
		d.DeadAt = m.Time
	}
	if v, ok, _ := intHeader(h, HeaderPut); ok {
		d.EnqueuedAt = time.Unix(0, v)
	}
	if hist, err := decodeHistory(h.Get(HeaderHistory)); err == nil {
		for _, a := range hist {
			d.History = append(d.History, a.walq())
		}
	}
	return d
}

// deadMsg finds the dead letter id: ErrNotFound when there is none.
func (q *Queue) deadMsg(ctx context.Context, id uint64) (*jetstream.RawStreamMsg, error) {
	m, err := q.d.dlq.GetLastMsgForSubject(ctx, q.d.dlqSubject(q.name, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %d", walq.ErrNotFound, id)
	}
	if err != nil {
		return nil, unavailable("find a dead letter", err)
	}
	return m, nil
}

// deadMsgs finds the dead letter of every ID, or none: an error wrapping
// ErrNotFound names every ID that is not a dead letter of the queue.
func (q *Queue) deadMsgs(ctx context.Context, ids []uint64) ([]*jetstream.RawStreamMsg, error) {
	msgs := make([]*jetstream.RawStreamMsg, len(ids))
	var missing []uint64
	for i, id := range ids {
		m, err := q.deadMsg(ctx, id)
		switch {
		case errors.Is(err, walq.ErrNotFound):
			missing = append(missing, id)
		case err != nil:
			return nil, err
		}
		msgs[i] = m
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: no dead letter %v in queue %q: nothing changed", walq.ErrNotFound, missing, q.name)
	}
	return msgs, nil
}

// named refuses IDs that name an item twice, as walq does: nothing is
// changed.
func named(call string, ids []uint64) error {
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return fmt.Errorf("%w: %s: item %d named twice: nothing changed", walq.ErrInvalid, call, id)
		}
		seen[id] = true
	}
	return nil
}

// Redrive puts dead letters back as ready items, under their IDs, with
// their attempts reset and their history kept. Every ID must be a dead
// letter, or nothing is changed and the error is ErrNotFound naming those
// that are not; an ID named twice is ErrInvalid, nothing changed. The
// items are put back in one atomic batch (JetStream's AllowAtomicPublish:
// all of them are stored or none, so a put the server refuses changes
// nothing), each deduplicated by its dead letter's sequence, and then the
// dead letters are deleted: a crash between the two leaves the items in
// both, never in neither. More IDs than the server's atomic batch limit
// (1000 by default; a server's max_batch_size may set it lower, and its
// refusal names it) go in batches of that limit, each all or nothing; an
// error then names the IDs put back and those not. A batch refused because some of its items were
// put back already (a Redrive that stopped before it deleted their dead
// letters, or one running at the same time) is put back one item at a
// time, each deduplicated.
func (q *Queue) Redrive(ids ...uint64) error {
	if err := q.check(); err != nil {
		return err
	}
	if err := named("redrive", ids); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead, err := q.deadMsgs(ctx, ids)
	if err != nil {
		return err
	}
	msgs := make([]*nats.Msg, len(ids))
	for i, id := range ids {
		if msgs[i], err = q.redriveMsg(id, dead[i]); err != nil {
			return fmt.Errorf("redrive %d: %w: nothing changed", id, err)
		}
	}
	var done []uint64 // put back, their dead letters deleted
	for start := 0; start < len(ids); {
		end := min(start+q.d.batchLimit(), len(ids))
		n, err := q.redriveBatch(ctx, msgs[start:end])
		if n == 0 && q.d.smallerBatch(err, end-start) {
			continue // the server's max_batch_size is lower: the same items, in smaller batches
		}
		var errs []error
		for i := start; i < start+n; i++ {
			if derr := q.d.deleteDead(ctx, dead[i].Sequence); derr != nil {
				errs = append(errs, fmt.Errorf("redrive %d: delete the dead letter (the item is back; its dead letter stays): %w", ids[i], derr))
			}
		}
		done = append(done, ids[start:start+n]...)
		switch {
		case err != nil && len(done) == 0:
			return fmt.Errorf("walq/jetstream: redrive: nothing changed: %w", err)
		case err != nil:
			errs = append(errs, fmt.Errorf("walq/jetstream: redrive: items %v are back, items %v are not (still dead letters): %w", done, ids[start+n:], err))
		case len(errs) > 0 && end < len(ids):
			errs = append(errs, fmt.Errorf("walq/jetstream: redrive: items %v are back, items %v are not (still dead letters)", done, ids[end:]))
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		start = end
	}
	return nil
}

// redriveBatch publishes msgs, the items of a Redrive, as one atomic
// batch, and says how many of them, from the first, are stored: all or
// none, except when some were stored before (the batch is refused as a
// duplicate), where they are published one at a time.
func (q *Queue) redriveBatch(ctx context.Context, msgs []*nats.Msg) (int, error) {
	err := q.d.publishBatch(ctx, "redrive", msgs)
	if err == nil {
		return len(msgs), nil
	}
	if !duplicateInBatch(err) {
		return 0, err
	}
	for i, m := range msgs {
		if _, err := q.d.js.PublishMsg(ctx, m); err != nil {
			return i, unavailable("redrive", err)
		}
	}
	return len(msgs), nil
}

// redriveMsg is the message that puts the dead letter m (of the item id)
// back as a ready item: its ID, key, deadline (one that has passed is
// discarded at its delivery, as on walq), put time, deliveries and history,
// deduplicated by the dead letter's sequence. It checks the size; it
// publishes nothing.
func (q *Queue) redriveMsg(id uint64, m *jetstream.RawStreamMsg) (*nats.Msg, error) {
	if n := m.Header.Get(HeaderBodyDropped); n != "" {
		return nil, fmt.Errorf("%w: its body (%s B) was too large to keep in the dead letter, which holds none: purge it", walq.ErrInvalid, n)
	}
	prio, _ := strconv.Atoi(m.Header.Get(HeaderPriority))
	lv := q.level(prio)
	if lv == nil {
		lv = q.levels[0]
	}
	it := walq.Item{Body: m.Data, Priority: lv.prio, Key: text(m.Header, HeaderKey)}
	if v, ok, _ := intHeader(m.Header, HeaderDeadline); ok {
		it.Deadline = time.Unix(0, v)
	}
	c := &carry{id: id, redrive: true}
	c.deliveries, _ = strconv.Atoi(m.Header.Get(HeaderDeliveriesBefore))
	c.history, _ = decodeHistory(m.Header.Get(HeaderHistory))
	if v, ok, _ := intHeader(m.Header, HeaderPut); ok {
		c.put = time.Unix(0, v)
	}
	h := itemHeader(it, c)
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("walq-r-%d-%d", id, m.Sequence))
	if !it.Deadline.IsZero() {
		// Storage only: the deadline itself is checked on receipt.
		h.Set(jetstream.MsgTTLHeader, ttl(time.Until(it.Deadline)))
	}
	if err := q.d.tooLarge("redrive", q.name, h, len(it.Body)); err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: lv.subject, Header: h, Data: it.Body}, nil
}

// PurgeDeadLetters deletes the named dead letters for good; with no IDs,
// all of the queue's. Every ID must be a dead letter, or nothing is
// deleted and the error is ErrNotFound naming those that are not; an ID
// named twice is ErrInvalid, nothing deleted. JetStream deletes one
// message at a time: a server that stops answering midway leaves the rest,
// and the error names the IDs deleted and those not. A dead letter that
// another process deleted meanwhile counts as deleted.
func (q *Queue) PurgeDeadLetters(ids ...uint64) error {
	if err := q.check(); err != nil {
		return err
	}
	if err := named("purge dead letters", ids); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(ids) == 0 {
		if err := q.d.connected("purge dead letters"); err != nil {
			return err
		}
		if err := q.d.dlq.Purge(ctx, jetstream.WithPurgeSubject(q.d.dlqFilter(q.name))); err != nil {
			return unavailable("purge dead letters", err)
		}
		return nil
	}
	msgs, err := q.deadMsgs(ctx, ids)
	if err != nil {
		return err
	}
	for i, id := range ids {
		if err := q.d.deleteDead(ctx, msgs[i].Sequence); err != nil {
			if i == 0 {
				return fmt.Errorf("walq/jetstream: purge %d: nothing changed: %w", id, err)
			}
			return fmt.Errorf("walq/jetstream: purge: dead letters %v deleted, %v not: %w", ids[:i], ids[i:], err)
		}
	}
	return nil
}

// errCodeMsgDeleteFailed is nats-server's error code of a failed message
// delete (JSStreamMsgDeleteFailedF), whose description is the store's
// error: errNoMessage when the message is gone.
const (
	errCodeMsgDeleteFailed jetstream.ErrorCode = 10057
	errNoMessage                               = "no message found" // the store's ErrStoreMsgNotFound
)

// deleteDead deletes the message at seq of the dead-letter stream. One
// that is gone already (another process redrove or purged it meanwhile)
// is no error. The request is the JetStream API's own, read here: nats.go's
// DeleteMsg answers that case with the server's error flattened to text.
func (d *Dir) deleteDead(ctx context.Context, seq uint64) error {
	if err := d.connected("delete a dead letter"); err != nil {
		return err
	}
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true})
	r, err := d.nc.RequestWithContext(ctx, d.apiPrefix+"STREAM.MSG.DELETE."+dlqStream(d.name), req)
	if err != nil {
		return unavailable("delete a dead letter", err)
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return fmt.Errorf("walq/jetstream: delete dead letter at sequence %d: the server answered %q", seq, r.Data)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == errCodeMsgDeleteFailed && resp.Error.Description == errNoMessage:
		return nil
	case resp.Error != nil:
		return fmt.Errorf("walq/jetstream: delete dead letter at sequence %d: %w", seq, resp.Error)
	case !resp.Success:
		return fmt.Errorf("walq/jetstream: delete dead letter at sequence %d: the server answered %q", seq, r.Data)
	}
	return nil
}

// History an older adapter kept: the attempts of a live item that did not
// end in an ack, in the Dir's bucket under <queue>.<id>. This one keeps
// them in the item's record; an item delivered without a record reads the
// old one, and drops it with the item.

func (q *Queue) readHistory(ctx context.Context, id uint64) []attempt {
	e, err := q.d.hist.Get(ctx, histKey(q.name, id))
	if err != nil {
		return nil
	}
	var h []attempt
	if json.Unmarshal(e.Value(), &h) != nil {
		return nil
	}
	return h
}

func (q *Queue) dropHistory(ctx context.Context, id uint64) {
	// A purge of the bucket stream's subject, not a KV Delete or Purge:
	// those keep a marker per key, one per item that ever failed.
	if err := q.d.histStream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+histBucket(q.d.name)+"."+histKey(q.name, id))); err != nil {
		q.d.log.Debug("walq/jetstream: could not drop a history", "id", id, "err", err)
	}
}
