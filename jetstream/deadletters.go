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

// deadLetterLocked moves l's item to the dead letters with cause, then
// ends its delivery (Term).
func (q *Queue) deadLetterLocked(l *lease, cause error, how string) error {
	now := time.Now()
	text := errText(cause)
	ctx, cancel := context.WithDeadline(context.Background(), l.end)
	defer cancel()
	err := q.moveToDead(ctx, l.msg, l.meta, l.id, l.prio, l.attempt, l.deliv, l.hist,
		attempt{Start: l.start.UnixNano(), End: now.UnixNano(), How: how, Error: text}, text, l.end)
	if err != nil {
		return q.failedSettle(l, "dead-letter", err)
	}
	q.endLocked(l)
	return nil
}

// moveToDead publishes the dead letter of the delivery m (deduplicated by
// the item's ID and the message's stream sequence, one message per ID in
// the dead-letter stream), then terminates the delivery: in this order, so
// that a crash between the two leaves the item in both places (its next
// delivery moves it again, deduplicated) and never in neither. The
// history is the item's recorded attempts and last.
func (q *Queue) moveToDead(ctx context.Context, m *nats.Msg, meta ackMeta, id uint64, prio, attempts, deliveries int, carried []attempt, last attempt, cause string, until time.Time) error {
	hist := append(carried, q.readHistory(ctx, id)...)
	hist = trimHistory(append(hist, last))
	h := deadHeader(q.name, m.Header, id, prio, attempts, deliveries, meta.sseq, hist, cutError(cause))
	if err := q.d.fitDeadLetter(h, len(m.Data)); err != nil {
		return err
	}
	pctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	if _, err := q.d.js.PublishMsg(pctx, &nats.Msg{Subject: q.d.dlqSubject(q.name, id), Header: h, Data: m.Data}); err != nil {
		return unavailable("dead-letter", err)
	}
	if err := q.replyUntil(m.Reply, "+TERM walq: dead-lettered", until); err != nil {
		return unavailable("dead-letter (Term after the move)", err)
	}
	q.dropHistory(ctx, id)
	return nil
}

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

// Redrive puts dead letters back as ready items, under their IDs, with
// their attempts reset and their history kept. Every ID must be a dead
// letter, or nothing is changed and the error is ErrNotFound naming those
// that are not. It publishes the item
// (deduplicated by the dead letter's sequence) before it deletes the dead
// letter, so a crash between the two leaves it in both, never in neither.
func (q *Queue) Redrive(ids ...uint64) error {
	if err := q.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := q.deadMsgs(ctx, ids)
	if err != nil {
		return err
	}
	var errs []error
	for i, id := range ids {
		m := msgs[i]
		prio, _ := strconv.Atoi(m.Header.Get(HeaderPriority))
		if q.level(prio) == nil {
			prio = q.opt().Priorities[0]
		}
		it := walq.Item{Body: m.Data, Priority: prio}
		c := &carry{id: id, msgID: fmt.Sprintf("walq-r-%d-%d", id, m.Sequence), redrive: true}
		c.deliveries, _ = strconv.Atoi(m.Header.Get(HeaderDeliveriesBefore))
		c.history, _ = decodeHistory(m.Header.Get(HeaderHistory))
		if v, ok, _ := intHeader(m.Header, HeaderPut); ok {
			c.put = time.Unix(0, v)
		}
		it.Key = text(m.Header, HeaderKey)
		if v, ok, _ := intHeader(m.Header, HeaderDeadline); ok {
			it.Deadline = time.Unix(0, v)
		}
		if _, err := q.put(ctx, it, c); err != nil {
			errs = append(errs, fmt.Errorf("redrive %d: %w", id, err))
			continue
		}
		if err := q.d.dlq.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			errs = append(errs, unavailable(fmt.Sprintf("redrive %d: delete the dead letter", id), err))
		}
	}
	return errors.Join(errs...)
}

// PurgeDeadLetters deletes the named dead letters for good; with no IDs,
// all of the queue's. Every ID must be a dead letter, or nothing is
// deleted and the error is ErrNotFound naming those that are not.
func (q *Queue) PurgeDeadLetters(ids ...uint64) error {
	if err := q.check(); err != nil {
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
	var errs []error
	for i, id := range ids {
		m := msgs[i]
		if err := q.d.dlq.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			errs = append(errs, unavailable(fmt.Sprintf("purge %d", id), err))
		}
	}
	return errors.Join(errs...)
}

// History: the attempts of a live item that did not end in an ack, kept in
// the Dir's bucket under <queue>.<id> while the item lives (the message
// itself cannot change), and moved into the dead letter's headers.

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

func (q *Queue) addHistory(ctx context.Context, id uint64, a attempt) error {
	h := trimHistory(append(q.readHistory(ctx, id), a))
	b, _ := json.Marshal(h)
	_, err := q.d.hist.Put(ctx, histKey(q.name, id), b)
	return err
}

func (q *Queue) dropHistory(ctx context.Context, id uint64) {
	// A purge of the bucket stream's subject, not a KV Delete or Purge:
	// those keep a marker per key, one per item that ever failed.
	if err := q.d.histStream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+histBucket(q.d.name)+"."+histKey(q.name, id))); err != nil {
		q.d.log.Debug("walq/jetstream: could not drop a history", "id", id, "err", err)
	}
}
