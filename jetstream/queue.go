package jetstream

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
)

// QueueOptions configure one queue of a Dir: walq's QueueOptions. Each
// field's default is in brackets.
type QueueOptions struct {
	// Visibility is how long a lease lasts unless extended: the
	// consumers' AckWait [30s]. Extend cannot go past it: JetStream's
	// InProgress resets a delivery to the full AckWait.
	Visibility time.Duration
	// MaxAttempts is how many leases an item gets before a failure
	// dead-letters it [5].
	MaxAttempts int
	// Backoff gives the wait before attempt+1 after attempt ended in a
	// nack [walq.DefaultBackoff]. It is sent with the Nak (NakWithDelay);
	// the consumers have no BackOff list, which would skew the delay. An
	// expired lease comes back after the AckWait alone.
	Backoff func(attempt int) time.Duration
	// Priorities are the priority levels the queue takes, one subject and
	// one consumer each [0]. A Put with another priority is ErrInvalid.
	Priorities []int
	// Fence is how long before the server's AckWait runs out that the
	// client already counts a lease as ended [Visibility/10, at most 1s]:
	// an Ack, Nack, Extend or DeadLetter is only sent while the lease
	// holds by that margin, so that it reaches the server before the
	// server can deliver the item again. See the README.
	Fence time.Duration
	// PollInterval is no longer used: a Get that waits, and a Watch,
	// hold a pull request on every level instead of polling. It is kept
	// so that code setting it still builds.
	PollInterval time.Duration
}

// Queue is one named queue of a Dir: a walq.Engine, a walq.Source and a
// walqtest.Queue on JetStream. It is safe for concurrent use.
type Queue struct {
	d      *Dir
	name   string
	set    atomic.Pointer[QueueOptions]
	recSeq atomic.Uint64 // the stream sequence of the settings record set was read from (0: none)
	levels []*level
	issuer [16]byte
	qnum   uint64

	// ctx ends at Close: Gets blocked on the server and background work
	// stop with it.
	ctx    context.Context
	cancel context.CancelFunc

	away atomic.Bool // TryGet found the server away (logged once)

	mu       sync.Mutex
	leases   map[uint64]*lease
	watchers map[*watcher]struct{}
	stash    *stash // a delivery a watch kept for the next TryGet
	next     uint64
	closed   bool
	done     chan struct{}
	bg       sync.WaitGroup
}

type level struct {
	prio     int
	subject  string
	consumer string
	nextSubj string // the pull request subject
	// putAt is when this handle last stored an item ready at the level
	// (Unix ns; 0: none not yet looked for). The server answers a put
	// before it tells the consumer, so a TryGet right after it may be
	// told "no messages": it waits a little for the level then.
	putAt  atomic.Int64
	putSeq atomic.Uint64 // the stream sequence of that item
}

// stored notes that this handle stored an item ready at the level, at
// stream sequence seq.
func (lv *level) stored(seq uint64) {
	for {
		cur := lv.putSeq.Load()
		if seq <= cur || lv.putSeq.CompareAndSwap(cur, seq) {
			break
		}
	}
	lv.putAt.Store(time.Now().UnixNano())
}

// seen notes a delivery of the message at seq from the level's consumer:
// once it has sent the last item this handle stored, a TryGet that finds
// nothing need not wait for one.
func (lv *level) seen(seq uint64) {
	if seq >= lv.putSeq.Load() {
		lv.putAt.Store(0)
	}
}

// lease is one delivery handed to a caller.
type lease struct {
	n       uint64
	q       *Queue
	msg     *nats.Msg
	meta    ackMeta
	id      uint64
	prio    int
	attempt int
	deliv   int
	start   time.Time // when the pull that brought it was requested
	// srvEnd is when the server may deliver the item again: the last
	// pull or InProgress sent, plus the Visibility (the AckWait).
	srvEnd time.Time
	// The record: the lease is the record rec at revision rev, written
	// with the token tok.
	rec     record
	rev     uint64
	tok     uint64
	oldHist bool // a history an older adapter kept under the item's ID, to drop with the item

	mu    sync.Mutex // held by the call that settles or extends the lease
	end   time.Time  // the client's end of the lease (the fence)
	ended bool
	timer *time.Timer
}

// OpenQueue opens the queue called name ("" is the default queue) in d.
// A queue that exists keeps the settings recorded for it on the work stream
// (Visibility, MaxAttempts, Priorities): a zero field of opts takes what is
// recorded, a field that differs is ErrInvalid, and Priorities may name
// some of the queue's levels (the handle serves them all). A queue that
// does not exist is created with opts, defaults filled in (ErrInvalid if
// the Dir holds items of it, moved by MoveFrom, at a level opts.Priorities
// leaves out). Backoff, Fence and PollInterval are the handle's own.
// Opening never changes what is recorded; SetSettings does.
func (d *Dir) OpenQueue(ctx context.Context, name string, opts QueueOptions) (*Queue, error) {
	if err := checkQueueName(name); err != nil {
		return nil, err
	}
	if opts.Visibility < 0 || opts.MaxAttempts < 0 {
		// A negative field would be taken for "differs" where the queue
		// exists: say what it is wherever it is.
		return nil, fillQueueOptions(opts).check()
	}
	o, seq, names, err := d.settle(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	q := &Queue{d: d, name: name, leases: make(map[uint64]*lease), watchers: make(map[*watcher]struct{}), done: make(chan struct{}), qnum: 1}
	q.set.Store(&o)
	q.recSeq.Store(seq)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	sum := sha256.Sum256([]byte("walq/jetstream\x00" + d.name + "\x00" + name))
	copy(q.issuer[:], sum[:16])
	var seed [8]byte
	rand.Read(seed[:])
	q.next = binary.LittleEndian.Uint64(seed[:]) >> 1
	for _, p := range o.Priorities {
		cname := names[p]
		if cname == "" {
			cname = consumerName(name, p)
		}
		lv := &level{prio: p, subject: d.readySubject(name, p), consumer: cname}
		lv.nextSubj = d.apiPrefix + "CONSUMER.MSG.NEXT." + workStream(d.name) + "." + lv.consumer
		q.levels = append(q.levels, lv)
	}
	return q, nil
}

// opt is the handle's settings; SetSettings replaces them.
func (q *Queue) opt() *QueueOptions { return q.set.Load() }

// pull is how long a lease waits at most on the server for an item: the
// lease is timed from the request, so it must leave most of the visibility
// to the handler.
func (o *QueueOptions) pull() time.Duration {
	return min(o.Visibility/2-o.Fence, 5*time.Second)
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Visibility implements walq.Engine: the consumers' AckWait.
func (q *Queue) Visibility() time.Duration { return q.opt().Visibility }

// Clock implements walq.Engine: the system clock (JetStream's timers run
// on the servers' clocks).
func (q *Queue) Clock() walq.Clock { return systemClock{} }

func (q *Queue) level(p int) *level {
	for _, lv := range q.levels {
		if lv.prio == p {
			return lv
		}
	}
	return nil
}

// Put stores an item and returns its ID: the stream sequence of its put.
// A key held (within the Dir's KeyWindow of the put that stored the item
// that holds it) returns that item's ID and an error wrapping
// walq.ErrDuplicate; a put that failed holds no key (a delayed item's key
// is claimed in one atomic batch with its schedule). A key over
// walq.MaxKeySize is ErrInvalid, as on walq.
func (q *Queue) Put(ctx context.Context, body []byte, opts ...walq.PutOption) (uint64, error) {
	if err := q.check(); err != nil {
		return 0, err
	}
	var it walq.Item
	for _, o := range opts {
		o(&it)
	}
	it.Body = body
	if len(it.Key) > walq.MaxKeySize {
		return 0, fmt.Errorf("%w: key of %d bytes, at most %d (walq.MaxKeySize)", walq.ErrInvalid, len(it.Key), walq.MaxKeySize)
	}
	if err := q.d.connected("put"); err != nil {
		return 0, err
	}
	return q.put(ctx, it, nil)
}

// carry is what a message moved into the queue brings along: an ID given
// elsewhere, the attempts and deliveries before, a history.
type carry struct {
	id             uint64
	attemptsBefore int
	deliveries     int
	history        []attempt
	put            time.Time
	due            time.Time // absolute due time (Delay is ignored when set)
	msgID          string    // the Nats-Msg-Id that makes the publish idempotent
	// redrive: a dead letter put back keeps its deadline, passed or not
	// (one that has passed is discarded at its delivery, as on walq).
	redrive bool
}

// moveMsg is the message that stores an item with its ID given (c.id):
// on the ready subject, or a schedule when it is due later. It publishes
// nothing.
func (q *Queue) moveMsg(it walq.Item, c *carry) (*nats.Msg, error) {
	lv := q.level(it.Priority)
	if lv == nil {
		return nil, fmt.Errorf("%w: priority %d is not one of the queue's levels %v", walq.ErrInvalid, it.Priority, q.opt().Priorities)
	}
	h := moveHeader(it, c, lv.subject, time.Now())
	if h.Get(HeaderDue) == "" {
		return &nats.Msg{Subject: lv.subject, Header: h, Data: it.Body}, nil
	}
	return &nats.Msg{Subject: q.d.scheduleSubject(q.name, c.id), Header: h, Data: it.Body}, nil
}

// moveHeader is the headers of the message that stores a moved item whose
// ready subject is target: the item's, or a schedule's when it is due
// after now.
func moveHeader(it walq.Item, c *carry, target string, now time.Time) nats.Header {
	h := itemHeader(it, c)
	if !c.due.After(now) {
		if !it.Deadline.IsZero() {
			h.Set(jetstream.MsgTTLHeader, ttl(it.Deadline.Sub(now)))
		}
		return h
	}
	setSchedule(h, c.id, c.due, target, it.Deadline)
	return h
}

// setSchedule makes h the headers of a schedule that fires a copy of the
// item id onto target at due. The time is written to the nanosecond (the
// server parses RFC 3339 with a fraction and fires when its clock reaches
// it); nats.go's WithScheduleAt would cut it to the second, early.
func setSchedule(h nats.Header, id uint64, due time.Time, target string, deadline time.Time) {
	h.Set(HeaderID, strconv.FormatUint(id, 10))
	h.Set(HeaderDue, nanos(due))
	h.Set("Nats-Schedule", "@at "+due.UTC().Format(time.RFC3339Nano))
	h.Set("Nats-Schedule-Target", target)
	if !deadline.IsZero() {
		h.Set("Nats-Schedule-TTL", ttl(deadline.Sub(due)))
	}
}

// itemHeader is the walq headers of an item.
func itemHeader(it walq.Item, c *carry) nats.Header {
	h := nats.Header{}
	h.Set(HeaderVersion, formatVersion)
	putAt := time.Now()
	if c != nil && !c.put.IsZero() {
		putAt = c.put
	}
	h.Set(HeaderPut, nanos(putAt))
	setText(h, HeaderKey, it.Key)
	if !it.Deadline.IsZero() {
		h.Set(HeaderDeadline, nanos(it.Deadline))
	}
	if c != nil {
		if c.id != 0 {
			h.Set(HeaderID, strconv.FormatUint(c.id, 10))
		}
		if c.attemptsBefore > 0 {
			h.Set(HeaderAttemptsBefore, strconv.Itoa(c.attemptsBefore))
		}
		if c.deliveries > 0 {
			h.Set(HeaderDeliveriesBefore, strconv.Itoa(c.deliveries))
		}
		if s := encodeHistory(c.history); s != "" {
			h.Set(HeaderHistory, s)
		}
	}
	return h
}

func (q *Queue) put(ctx context.Context, it walq.Item, c *carry) (uint64, error) {
	if it.Delay < 0 {
		return 0, fmt.Errorf("%w: negative delay %v", walq.ErrInvalid, it.Delay)
	}
	lv := q.level(it.Priority)
	if lv == nil {
		return 0, fmt.Errorf("%w: priority %d is not one of the queue's levels %v (QueueOptions.Priorities: one subject per level)", walq.ErrInvalid, it.Priority, q.opt().Priorities)
	}
	now := time.Now()
	due := now.Add(it.Delay)
	if c != nil && !c.due.IsZero() {
		due = c.due
	}
	if !it.Deadline.IsZero() && !it.Deadline.After(due) && (c == nil || !c.redrive) {
		return 0, fmt.Errorf("%w: deadline %v is not after the item is due (%v)", walq.ErrInvalidDeadline, it.Deadline, due)
	}
	h := itemHeader(it, c)
	delayed := due.After(now)
	if !delayed && it.Key != "" && c == nil {
		return q.putKeyed(ctx, it, lv, h, now)
	}
	if !delayed {
		if c != nil && c.msgID != "" {
			h.Set(jetstream.MsgIDHeader, c.msgID)
		}
		if !it.Deadline.IsZero() {
			// Storage only: the deadline itself is checked on receipt.
			h.Set(jetstream.MsgTTLHeader, ttl(it.Deadline.Sub(now)))
		}
		if err := q.d.tooLarge("put", q.name, h, len(it.Body)); err != nil {
			return 0, err
		}
		pa, err := q.d.js.PublishMsg(ctx, &nats.Msg{Subject: lv.subject, Header: h, Data: it.Body})
		if err != nil {
			return 0, unavailable("put", err)
		}
		lv.stored(pa.Sequence)
		id := pa.Sequence
		if c != nil && c.id != 0 {
			id = c.id
		}
		if pa.Duplicate && (c == nil || c.msgID == "") {
			return q.duplicate(ctx, it.Key, pa.Sequence)
		}
		return id, nil
	}
	// A delayed item is a schedule that fires a copy at its due time. Its
	// ID must be in that copy, so it is reserved first: the sequence of a
	// small message that expires, which holds no key. A key is held by a
	// claim (walq.<dir>.k.<queue>.<id>, carrying the key's Nats-Msg-Id and
	// the item's ID) stored in one atomic batch with the schedule: the
	// key is held from the put that stored the item, and only by an item
	// that was stored; a put that failed holds nothing. The claim lives
	// the KeyWindow, so a restarted server, which rebuilds its duplicate
	// window from the messages it holds, still holds the key after the
	// schedule fired and its item was acked.
	// Its size, counted with the widest ID before one is reserved.
	setSchedule(h, math.MaxUint64, due, lv.subject, it.Deadline)
	h.Set(jetstream.MsgIDHeader, "walq-s-"+strconv.FormatUint(math.MaxUint64, 10))
	if err := q.d.tooLarge("put", q.name, h, len(it.Body)); err != nil {
		return 0, err
	}
	var id uint64
	if c != nil && c.id != 0 {
		id = c.id
	} else {
		var err error
		if id, err = q.reserveID(ctx, "put (reserving the ID of a delayed item)"); err != nil {
			return 0, err
		}
	}
	setSchedule(h, id, due, lv.subject, it.Deadline)
	h.Set(jetstream.MsgIDHeader, "walq-s-"+strconv.FormatUint(id, 10))
	if c != nil && c.msgID != "" {
		h.Set(jetstream.MsgIDHeader, c.msgID)
	}
	sched := &nats.Msg{Subject: q.d.scheduleSubject(q.name, id), Header: h, Data: it.Body}
	if it.Key == "" || c != nil {
		if _, err := q.d.js.PublishMsg(ctx, sched); err != nil {
			return 0, unavailable("put (the schedule of a delayed item)", err)
		}
		return id, nil
	}
	claim := q.keyClaim(id, it.Key)
	inBatch := &nats.Msg{Subject: sched.Subject, Header: nats.Header{}, Data: sched.Data}
	for k, v := range h {
		if k != jetstream.MsgIDHeader {
			inBatch.Header[k] = v
		}
	}
	_, err := q.putBatch(ctx, "put (a delayed item and its key)", claim, inBatch)
	if err == nil {
		return id, nil
	}
	if !duplicateInBatch(err) {
		return 0, err
	}
	if _, held, err := q.claimAlone(ctx, it.Key, claim, sched, "put (the key of a delayed item)", "put (the schedule of a delayed item)"); err != nil {
		return held, err
	}
	return id, nil
}

// claimAlone follows a batch of claim and m refused as a duplicate: the
// claim alone says who holds the key (a duplicate stores nothing: the
// holder's ID and ErrDuplicate); if it is no longer held (its window
// ended meanwhile), the claim now holds it for this item, and m follows.
func (q *Queue) claimAlone(ctx context.Context, key string, claim, m *nats.Msg, keyWhat, what string) (*jetstream.PubAck, uint64, error) {
	pa, err := q.d.js.PublishMsg(ctx, claim)
	if err != nil {
		return nil, 0, unavailable(keyWhat, err)
	}
	if pa.Duplicate {
		held, err := q.duplicate(ctx, key, pa.Sequence)
		return nil, held, err
	}
	if pa, err = q.d.js.PublishMsg(ctx, m); err != nil {
		return nil, 0, unavailable(what, err)
	}
	return pa, 0, nil
}

// reserveID reserves an item's ID before its item is stored: the
// sequence of a small message that expires, which holds no key.
func (q *Queue) reserveID(ctx context.Context, what string) (uint64, error) {
	rh := nats.Header{}
	rh.Set(HeaderVersion, formatVersion)
	rh.Set(jetstream.MsgTTLHeader, "1s")
	pa, err := q.d.js.PublishMsg(ctx, &nats.Msg{Subject: q.d.reserveSubject(q.name), Header: rh})
	if err != nil {
		return 0, unavailable(what, err)
	}
	return pa.Sequence, nil
}

// putKeyed stores a ready item with a key: as a delayed one's, the key is
// held by a claim that lives the KeyWindow, stored in one atomic batch
// with the item, which carries the reserved ID. The item's own message
// holds no key: JetStream rebuilds its duplicate window at a restart from
// the messages the stream holds, and an item acked (removed) would take
// its key with it.
func (q *Queue) putKeyed(ctx context.Context, it walq.Item, lv *level, h nats.Header, now time.Time) (uint64, error) {
	if !it.Deadline.IsZero() {
		// Storage only: the deadline itself is checked on receipt.
		h.Set(jetstream.MsgTTLHeader, ttl(it.Deadline.Sub(now)))
	}
	h.Set(HeaderID, strconv.FormatUint(math.MaxUint64, 10))
	if err := q.d.tooLarge("put", q.name, h, len(it.Body)); err != nil {
		return 0, err
	}
	id, err := q.reserveID(ctx, "put (reserving the ID of an item with a key)")
	if err != nil {
		return 0, err
	}
	h.Set(HeaderID, strconv.FormatUint(id, 10))
	claim := q.keyClaim(id, it.Key)
	item := &nats.Msg{Subject: lv.subject, Header: h, Data: it.Body}
	seq, err := q.putBatch(ctx, "put (an item and its key)", claim, item)
	if err == nil {
		// The batch's answer is its last message's: the item's.
		lv.stored(seq)
		return id, nil
	}
	if !duplicateInBatch(err) {
		return 0, err
	}
	pa, held, err := q.claimAlone(ctx, it.Key, claim, item, "put (the key of an item)", "put")
	if err != nil {
		return held, err
	}
	lv.stored(pa.Sequence)
	return id, nil
}

// keyClaim is the message that holds key for the delayed item id: the
// key's Nats-Msg-Id, the item's ID, living the KeyWindow.
func (q *Queue) keyClaim(id uint64, key string) *nats.Msg {
	h := nats.Header{}
	h.Set(HeaderVersion, formatVersion)
	h.Set(HeaderID, strconv.FormatUint(id, 10))
	h.Set(jetstream.MsgIDHeader, q.keyID(key))
	h.Set(jetstream.MsgTTLHeader, ttl(max(q.d.Settings().KeyWindow, time.Second)))
	return &nats.Msg{Subject: q.d.claimSubject(q.name, id), Header: h}
}

// putBatch stores a key's claim and its item (or a delayed item's
// schedule) in one atomic batch, trying again while the server turns the batch away for other
// batches in flight (nothing of it is stored then).
func (q *Queue) putBatch(ctx context.Context, what string, claim, sched *nats.Msg) (uint64, error) {
	for try := 0; ; try++ {
		seq, err := q.d.publishBatchSeq(ctx, what, []*nats.Msg{claim, sched})
		var b *batchError
		if err == nil || try >= 50 || !errors.As(err, &b) || (b.errCode != errCodeBatchIncomplete && b.errCode != errCodeBatchTooManyInflight) {
			return seq, err
		}
		select {
		case <-ctx.Done():
			return 0, unavailable(what, ctx.Err())
		case <-time.After(time.Duration(1+try) * time.Millisecond):
		}
	}
}

// duplicate is Put's answer for key, held by the message at seq of the
// work stream: the ID of the item that holds it. A key claim names its
// item; any other message (a ready item, gone or not, or the reservation
// of a delayed put by an older adapter, which may have stored its item)
// is the item itself.
func (q *Queue) duplicate(ctx context.Context, key string, seq uint64) (uint64, error) {
	id := seq
	held, err := q.d.work.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return 0, unavailable("put (reading the item that holds the key)", err)
	case strings.HasPrefix(held.Subject, q.d.claimPrefix(q.name)):
		if v, err := strconv.ParseUint(held.Header.Get(HeaderID), 10, 64); err == nil && v != 0 {
			id = v
		}
	}
	return id, fmt.Errorf("%w: key %q is held by item %d (JetStream's duplicate window)", walq.ErrDuplicate, key, id)
}

// keyID is the Nats-Msg-Id of a put with key: the stream's duplicate
// window is one for all its subjects, so the queue's name keeps the keys
// of two queues apart.
// A key that header handling would change travels in base64 under a
// prefix of its own, "walq-kb-", which no plain key's ID starts with:
// "walq-k-" has a '-' where it has a 'b'.
func (q *Queue) keyID(key string) string {
	if plainSafe(key) {
		return "walq-k-" + token(q.name) + "/" + key
	}
	return "walq-kb-" + token(q.name) + "/" + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// Watch implements walq.Source, for WorkQueues. JetStream tells no one
// when an item becomes ready, except a pull request that waits: so the
// watch, once a TryGet found nothing, holds one waiting pull request on
// every level (each lives watchWait, then is asked again), and the first
// message any of them is sent is kept for the next TryGet and signalled.
// An idle queue costs one request per level every watchWait; a
// reconnection asks again at once. The channel also receives a value when
// the queue closes.
func (q *Queue) Watch() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	stop := make(chan struct{})
	w := &watcher{arm: make(chan struct{}, 1)}
	w.arm <- struct{}{}
	q.mu.Lock()
	q.watchers[w] = struct{}{}
	q.mu.Unlock()
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	// A connection lost and found again: requests asked before are gone,
	// and a pool should look (a TryGet meeting the server away logs it).
	status := q.d.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED)
	q.bg.Add(1)
	go func() {
		defer q.bg.Done()
		defer q.d.nc.RemoveStatusListener(status)
		ctx, cancel := context.WithCancel(q.ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for {
			select {
			case <-w.arm:
			case <-status:
				signal()
				continue
			case <-ctx.Done():
				q.watchEnded(w)
				if q.ctx.Err() != nil {
					signal()
				}
				return
			}
			if q.stashed() {
				continue
			}
			if !q.watchOnce(ctx, status) {
				if ctx.Err() == nil {
					// The server is away: ask again in a second, or once
					// the connection is back.
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					case <-status:
						signal()
					}
					w.rearm()
				}
				continue
			}
			signal()
		}
	}()
	return ch, sync.OnceFunc(func() { close(stop) })
}

// watchWait is how long a watch's pull request waits.
const watchWait = 10 * time.Second

// watcher is one Watch of a queue: arm says a TryGet found nothing.
type watcher struct{ arm chan struct{} }

func (w *watcher) rearm() {
	select {
	case w.arm <- struct{}{}:
	default:
	}
}

// stash is a delivery a watch was sent, kept for the next TryGet.
type stash struct {
	m  *nats.Msg
	lv *level
	at time.Time // when it came: its lease is timed from then
}

// watchOnce waits for a message on any level, up to watchWait, and keeps
// it: true when one was kept (or the queue closes), false when the server
// is away. Requests that expire are asked again.
func (q *Queue) watchOnce(ctx context.Context, status <-chan nats.Status) bool {
	for {
		p := q.newPull(len(q.levels))
		for _, lv := range q.levels {
			if err := p.ask(lv, false, watchWait); err != nil {
				p.close()
				return false
			}
		}
		pctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-status:
				cancel()
			case <-pctx.Done():
			}
		}()
		m, r, err := p.next(pctx, watchWait+time.Second)
		reconnected := pctx.Err() != nil && ctx.Err() == nil
		cancel()
		p.close()
		switch {
		case m != nil:
			q.mu.Lock()
			if q.closed || q.stash != nil {
				q.mu.Unlock()
				q.release(m)
				return true
			}
			q.stash = &stash{m: m, lv: r.lv, at: time.Now()}
			q.mu.Unlock()
			return true
		case ctx.Err() != nil:
			return true
		case reconnected:
			return true // the pool looks, and a miss asks again
		case err != nil:
			return false
		}
	}
}

// stashed says whether a watch's delivery waits for a TryGet; one kept
// longer than the lease it could give is sent back.
func (q *Queue) stashed() bool {
	q.mu.Lock()
	s := q.stash
	if s != nil && q.stale(s) {
		q.stash = nil
		q.mu.Unlock()
		q.release(s.m)
		return false
	}
	q.mu.Unlock()
	return s != nil
}

// stale says whether s was kept longer than the lease it could give.
func (q *Queue) stale(s *stash) bool { return time.Since(s.at) > q.opt().pull() }

// takeStash takes the delivery a watch kept, if any.
func (q *Queue) takeStash() *stash {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stash
	q.stash = nil
	return s
}

// missed tells the watches that a TryGet found nothing: each asks the
// server to tell it of the next item.
func (q *Queue) missed() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for w := range q.watchers {
		w.rearm()
	}
}

// watchEnded drops w; the last watch sends back what it kept.
func (q *Queue) watchEnded(w *watcher) {
	q.mu.Lock()
	delete(q.watchers, w)
	var s *stash
	if len(q.watchers) == 0 {
		s, q.stash = q.stash, nil
	}
	q.mu.Unlock()
	if s != nil {
		q.release(s.m)
	}
}

// ttl is a Nats-TTL value of at least d, in whole seconds, at least 1s.
func ttl(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(int64(s), 10) + "s"
}

func (q *Queue) check() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return walq.ErrClosed
	}
	return nil
}

// Get blocks until an item is ready or ctx ends, and leases it. While the
// server cannot be reached it goes on waiting (so that Work resumes when
// the server is back), logging to the Dir's Logger.
func (q *Queue) Get(ctx context.Context) (walq.Message, error) {
	caller := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(q.ctx, cancel)()
	warned := false
	for {
		if err := q.check(); err != nil {
			return walq.Message{}, err
		}
		if err := caller.Err(); err != nil {
			return walq.Message{}, err
		}
		m, ok, err := q.take(ctx, true)
		if err != nil {
			if caller.Err() != nil {
				return walq.Message{}, caller.Err()
			}
			if q.ctx.Err() != nil {
				return walq.Message{}, walq.ErrClosed
			}
			if !isUnavailable(err) {
				return walq.Message{}, err
			}
			if !warned {
				q.d.log.Warn("walq/jetstream: Get: the server cannot be reached; waiting for it", "queue", q.name, "err", err)
				warned = true
			}
			select {
			case <-ctx.Done():
				return walq.Message{}, ctx.Err()
			case <-q.done:
				return walq.Message{}, walq.ErrClosed
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if warned {
			q.d.log.Info("walq/jetstream: Get: the server answers again", "queue", q.name)
			warned = false
		}
		if ok {
			return m, nil
		}
	}
}

// TryGet leases the next ready item if there is one, without waiting
// (but for a moment after this handle's own Put, which the server answers
// before its consumer knows of it). While the server cannot be reached it
// finds nothing (and logs it to the Dir's Logger), as Get waits.
func (q *Queue) TryGet() (walq.Message, bool, error) {
	if err := q.check(); err != nil {
		return walq.Message{}, false, err
	}
	for {
		m, ok, again, err := q.tryLevels(q.ctx)
		if err != nil && q.ctx.Err() != nil {
			return walq.Message{}, false, walq.ErrClosed
		}
		if err != nil && isUnavailable(err) {
			// As Get waits for the server, TryGet finds nothing while it
			// is away: a WorkQueues pool goes on, and its Watch brings it
			// back once the server answers.
			if q.away.CompareAndSwap(false, true) {
				q.d.log.Warn("walq/jetstream: TryGet: the server cannot be reached; nothing to lease until it answers", "queue", q.name, "err", err)
			}
			q.missed()
			return walq.Message{}, false, nil
		}
		if err == nil && q.away.CompareAndSwap(true, false) {
			q.d.log.Info("walq/jetstream: TryGet: the server answers again", "queue", q.name)
		}
		if err == nil && !ok && !again {
			q.missed()
		}
		if err != nil || ok || !again {
			return m, ok, err
		}
	}
}

// tryLevels asks each level, smallest priority first, for one item
// without waiting; a delivery a watch kept is taken once no level before
// its own has one. again says a message came that was not an item to
// hand out (dead-lettered, discarded, sent back): look again.
func (q *Queue) tryLevels(ctx context.Context) (m walq.Message, ok, again bool, err error) {
	var s *stash
	defer func() {
		if s != nil {
			// Not taken (an item of a level before it was, or an error):
			// kept for the next TryGet.
			q.mu.Lock()
			if q.stash == nil && !q.closed {
				q.stash, s = s, nil
			}
			q.mu.Unlock()
			if s != nil {
				q.release(s.m)
			}
		}
	}()
	// fromStash takes s if it is of a level at or before i: the watch's
	// request, asked earlier, may have been sent the item a TryGet's own
	// request was asked for. One kept longer than the lease it could give
	// goes back.
	fromStash := func(i int) (walq.Message, bool, bool) {
		if s == nil {
			s = q.takeStash()
		}
		if s != nil && q.stale(s) {
			// Sent back, and the server's answer awaited, so that the
			// pulls below may be sent it again, timed anew.
			if err := q.replyUntil(s.m.Reply, "-NAK", time.Now().Add(time.Second)); err != nil {
				q.release(s.m)
			}
			s = nil
		}
		if s == nil || q.levelIndex(s.lv) > i {
			return walq.Message{}, false, false
		}
		msg, at, lv := s.m, s.at, s.lv
		s = nil
		m, ok := q.accept(msg, at, lv)
		return m, ok, true
	}
	for i, lv := range q.levels {
		if m, ok, took := fromStash(i); took {
			return m, ok, !ok, nil
		}
		msg, t0, err := q.pullOne(ctx, lv, true, 0)
		if err != nil {
			return walq.Message{}, false, false, err
		}
		if msg == nil {
			put := lv.putAt.Load()
			if put == 0 || time.Since(time.Unix(0, put)) > time.Second {
				continue
			}
			// This handle put an item at the level a moment ago, which
			// the consumer may not know of yet: a short wait for it.
			msg, t0, err = q.pullOne(ctx, lv, false, freshWait)
			if err != nil {
				return walq.Message{}, false, false, err
			}
			if msg == nil {
				if m, ok, took := fromStash(i); took {
					return m, ok, !ok, nil
				}
				lv.putAt.CompareAndSwap(put, 0)
				continue
			}
		}
		m, ok := q.accept(msg, t0, lv)
		return m, ok, !ok, nil
	}
	return walq.Message{}, false, false, nil
}

// levelIndex is lv's place in q.levels, most urgent first.
func (q *Queue) levelIndex(lv *level) int {
	for i, l := range q.levels {
		if l == lv {
			return i
		}
	}
	return len(q.levels)
}

// freshWait is how long TryGet waits at a level this handle just put an
// item at.
const freshWait = 100 * time.Millisecond

// take makes one round: with several levels, each without waiting, then a
// wait on all of them at once, the first message taken; with one, a wait
// on the server.
func (q *Queue) take(ctx context.Context, wait bool) (walq.Message, bool, error) {
	if len(q.levels) > 1 {
		m, ok, again, err := q.tryLevels(ctx)
		if err != nil || ok || again {
			return m, ok, err
		}
	}
	expires := q.opt().pull()
	p := q.newPull(len(q.levels))
	for _, lv := range q.levels {
		if err := p.ask(lv, false, expires); err != nil {
			p.close()
			return walq.Message{}, false, err
		}
	}
	msg, r, err := p.next(ctx, expires+time.Second)
	p.close()
	if err != nil || msg == nil {
		return walq.Message{}, false, err
	}
	m, ok := q.accept(msg, r.t0, r.lv)
	return m, ok, nil
}

// Receipts.

func (q *Queue) receipt(n uint64) walq.Receipt { return walq.NewReceipt(q.issuer, q.qnum, n) }

// lookup finds r's lease: ErrInvalid for a receipt of another queue,
// ErrLeaseLost for one of this queue whose lease is not open here.
func (q *Queue) lookup(r walq.Receipt, call string) (*lease, error) {
	issuer, qn, n := r.Fields()
	if issuer != q.issuer || qn != q.qnum || n == 0 {
		return nil, fmt.Errorf("%w: %s with a receipt this queue did not issue", walq.ErrInvalid, call)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, walq.ErrClosed
	}
	l := q.leases[n]
	if l == nil {
		return nil, fmt.Errorf("%w: %s: the lease has ended (or was another process's)", walq.ErrLeaseLost, call)
	}
	return l, nil
}

// hold locks r's lease for call and checks it is still open on the
// client's clock.
func (q *Queue) hold(r walq.Receipt, call string) (*lease, error) {
	l, err := q.lookup(r, call)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: the lease has ended", walq.ErrLeaseLost, call)
	}
	if !time.Now().Before(l.end) {
		l.mu.Unlock()
		q.expire(l)
		return nil, fmt.Errorf("%w: %s: the lease ran out", walq.ErrLeaseLost, call)
	}
	return l, nil
}

// endLocked ends l, held, and forgets it.
func (q *Queue) endLocked(l *lease) {
	l.ended = true
	if l.timer != nil {
		l.timer.Stop()
	}
	q.mu.Lock()
	delete(q.leases, l.n)
	q.mu.Unlock()
}

// Extend moves the end of r's lease to d from now. d may not pass the
// Visibility: JetStream's InProgress restarts the full AckWait, no more.
func (q *Queue) Extend(r walq.Receipt, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: Extend by %v", walq.ErrInvalid, d)
	}
	o := q.opt()
	if d > o.Visibility {
		return fmt.Errorf("%w: Extend by %v: past the Visibility %v (InProgress restarts the consumer's AckWait, it cannot extend by a chosen duration)", walq.ErrInvalid, d, o.Visibility)
	}
	l, err := q.hold(r, "extend")
	if err != nil {
		return err
	}
	defer l.mu.Unlock()
	sent := time.Now()
	end := sent.Add(d)
	if d > o.Visibility-o.Fence {
		end = sent.Add(o.Visibility - o.Fence)
	}
	ctx, cancel := context.WithDeadline(context.Background(), l.end)
	defer cancel()
	ext := l.rec
	// The record holds it a Fence past the holder's end, as at the lease's
	// start: a process whose clock is ahead by less finds it held.
	ext.End = end.Add(o.Fence).UnixNano()
	if err := q.settleRecord(ctx, l, &ext, "extend"); err != nil {
		return err
	}
	// The record holds the lease to its new end; InProgress restarts
	// the server's AckWait. Were it lost, a delivery the server sends
	// before the end finds the record held, and goes back.
	if err := q.ackRequest(l, "+WPI"); err != nil {
		q.d.log.Debug("walq/jetstream: extend: InProgress not confirmed; the record holds the lease", "id", l.id, "err", err)
	} else {
		l.srvEnd = sent.Add(o.Visibility)
	}
	// As walq's Extend: the lease ends d from now, sooner or later than
	// before. Sooner only makes the client give it up before the server
	// would deliver it again.
	l.end = end
	l.timer.Reset(time.Until(end))
	return nil
}

// settleRecord writes r, the next state of l's record, with the revision
// the lease holds: the fence of every call on a lease. A record another
// delivery took (the lease ran out on the servers' clock, or the server
// delivered the item again and the record was taken) ends the lease with
// walq.ErrLeaseLost; so does a write that could not be confirmed before the
// lease's end.
func (q *Queue) settleRecord(ctx context.Context, l *lease, r *record, call string) error {
	r.Tok = l.tok
	rev, err := q.d.writeItem(ctx, r, l.rev)
	if errors.Is(err, errRecordMoved) {
		q.endLocked(l)
		return fmt.Errorf("%w: %s: another delivery holds the item (its record was taken: the lease ran out on the servers' clock)", walq.ErrLeaseLost, call)
	}
	if err != nil {
		return q.failedSettle(l, call, err)
	}
	l.rev, l.rec = rev, *r
	return nil
}

// failedSettle is the error of a settling call whose request did not
// complete before the lease's end: the lease is lost (the outcome at the
// server is not known), and the error says why.
func (q *Queue) failedSettle(l *lease, call string, err error) error {
	if !time.Now().Before(l.end) {
		q.endLocked(l)
		return fmt.Errorf("%w: %s: the server did not confirm before the lease's end: %w", walq.ErrLeaseLost, call, err)
	}
	return unavailable(call, err)
}

// Ack ends r's lease and removes its item.
func (q *Queue) Ack(r walq.Receipt) error {
	l, err := q.hold(r, "ack")
	if err != nil {
		return err
	}
	defer l.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), l.end)
	defer cancel()
	done := record{Seq: l.rec.Seq, ID: l.id, St: recDone, Att: l.rec.Att}
	if err := q.settleRecord(ctx, l, &done, "ack"); err != nil {
		return err
	}
	q.endLocked(l)
	// The record says acked: the item never runs again. The Ack removes
	// the message; were it lost, the message's next delivery finds the
	// record and acks it.
	q.finishAsync(l, "+ACK")
	return nil
}

// finishAsync ends the message of l, whose record is finished, with body
// (an Ack or a Term), and drops the record, on a goroutine of its own.
func (q *Queue) finishAsync(l *lease, body string) {
	q.background(func(ctx context.Context) {
		if err := q.replyUntil(l.msg.Reply, body, time.Now().Add(10*time.Second)); err != nil {
			q.d.log.Warn("walq/jetstream: the record says finished, the message is not yet; its next delivery finishes it", "id", l.id, "err", err)
			return
		}
		q.d.dropItem(ctx, l.rec.Seq)
		if l.oldHist {
			q.dropHistory(ctx, l.id)
		}
	})
}

// Nack ends r's lease with cause: the item comes back after Backoff, or
// goes to the dead letters when it has had its attempts.
func (q *Queue) Nack(r walq.Receipt, cause error) error {
	l, err := q.hold(r, "nack")
	if err != nil {
		return err
	}
	defer l.mu.Unlock()
	if l.attempt >= q.opt().MaxAttempts {
		return q.deadLetterLocked(l, cause, "nack")
	}
	ctx, cancel := context.WithDeadline(context.Background(), l.end)
	defer cancel()
	free := l.rec
	free.St, free.End, free.Start = recFree, 0, 0
	free.Hist = trimHistory(append(append([]attempt(nil), l.rec.Hist...), attempt{Start: l.start.UnixNano(), End: time.Now().UnixNano(), How: "nack", Error: errText(cause)}))
	if err := q.settleRecord(ctx, l, &free, "nack"); err != nil {
		return err
	}
	q.endLocked(l)
	// The record says the lease ended. The Nak brings the item back after
	// its backoff; were it lost, after the AckWait. A Nak that arrives
	// late acts on whatever delivery the server has then, whose record
	// decides: a lease that holds is not disturbed.
	body := "-NAK"
	if delay := q.opt().Backoff(l.attempt); delay > 0 {
		body = fmt.Sprintf(`-NAK {"delay":%d}`, delay.Nanoseconds())
	}
	if err := q.ackRequest(l, body); err != nil {
		q.d.log.Debug("walq/jetstream: nack: the Nak was not confirmed; the item comes back after the AckWait", "id", l.id, "err", err)
	}
	return nil
}

// DeadLetter ends r's lease and moves its item to the dead letters.
func (q *Queue) DeadLetter(r walq.Receipt, cause error) error {
	l, err := q.hold(r, "dead-letter")
	if err != nil {
		return err
	}
	defer l.mu.Unlock()
	return q.deadLetterLocked(l, cause, "deadletter")
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return cutError(err.Error())
}

// ackRequest sends body on l's reply subject and waits for the server's
// answer, trying again until the lease's end while the server cannot be
// reached.
func (q *Queue) ackRequest(l *lease, body string) error {
	return q.replyUntil(l.msg.Reply, body, l.end)
}

func (q *Queue) replyUntil(reply, body string, until time.Time) error {
	var last error
	for {
		left := time.Until(until)
		if left <= 0 {
			if last == nil {
				last = context.DeadlineExceeded
			}
			return last
		}
		if err := q.d.connected("settle"); err != nil {
			if errors.Is(err, nats.ErrConnectionClosed) {
				return err
			}
			last = err
			if !q.pause(until) {
				return last
			}
			continue
		}
		_, err := q.d.nc.Request(reply, []byte(body), min(left, 2*time.Second))
		if err == nil {
			return nil
		}
		last = err
		if !isUnavailable(err) {
			return err
		}
		if !q.pause(until) {
			return last
		}
	}
}

// pause waits a little before a request is tried again, at most until
// until; false once the queue is closed (what is left is left to the
// message's next delivery, as after a crash).
func (q *Queue) pause(until time.Time) bool {
	t := time.NewTimer(min(20*time.Millisecond, time.Until(until)))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-q.done:
		return false
	}
}

// expire ends l if its time has passed: on its last attempt the item goes
// to the dead letters (nobody else will: the consumers have no
// MaxDeliver), otherwise the expiry goes into its history.
func (q *Queue) expire(l *lease) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.end); left > 0 {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	o := q.opt()
	if l.attempt < o.MaxAttempts {
		// Its record holds the lease to its end on the servers' clock;
		// the delivery that takes it then records the expiry.
		q.endLocked(l)
		l.mu.Unlock()
		return
	}
	// The last attempt: to the dead letters (nobody else will at once: the
	// consumers have no MaxDeliver), with the revision the lease holds, so
	// nothing that took the record since is disturbed. Were this not done,
	// the next delivery would find the attempts spent and do it.
	now := time.Now()
	cause := fmt.Sprintf("walq/jetstream: the lease expired on the last attempt (%d of %d)", l.attempt, o.MaxAttempts)
	dead := l.rec
	dead.St, dead.Cause = recDead, cause
	dead.Hist = trimHistory(append(append([]attempt(nil), l.rec.Hist...), attempt{Start: l.start.UnixNano(), End: now.UnixNano(), How: "expire"}))
	rev := l.rev
	q.endLocked(l)
	l.mu.Unlock()
	q.background(func(ctx context.Context) {
		// The record still holds the lease by the fence: time enough to
		// write it.
		wctx, cancel := context.WithDeadline(ctx, time.Unix(0, l.rec.End))
		defer cancel()
		dead.Tok = l.tok
		if _, err := q.d.writeItem(wctx, &dead, rev); err != nil {
			q.d.log.Debug("walq/jetstream: could not dead-letter an item whose last lease expired; its next delivery will", "id", l.id, "err", err)
			return
		}
		if err := q.moveToDead(ctx, l.msg, l.meta, l.id, l.prio, dead.Att, dead.Deliv, dead.Hist, cause, time.Now().Add(10*time.Second)); err != nil {
			q.d.log.Warn("walq/jetstream: the record says dead, the dead letter or the Term is not stored yet; the message's next delivery finishes it", "id", l.id, "err", err)
		}
	})
}

// background runs f on its own goroutine, with a context that ends at
// Close (after a bound).
func (q *Queue) background(f func(ctx context.Context)) {
	q.bg.Add(1)
	go func() {
		defer q.bg.Done()
		ctx, cancel := context.WithTimeout(q.ctx, 30*time.Second)
		defer cancel()
		f(ctx)
	}()
}

// Close releases the queue: receipts it issued return walq.ErrClosed, and
// the items of the leases it held come back when their visibility runs
// out, as after a crash. They are not sent back at once: a handler that
// holds one may still be running (Close does not stop handlers), and
// another consumer would run the item beside it. Items stay in the
// stream.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return walq.ErrClosed
	}
	q.closed = true
	close(q.done)
	q.cancel()
	if s := q.stash; s != nil {
		q.stash = nil
		q.release(s.m)
	}
	open := make([]*lease, 0, len(q.leases))
	for _, l := range q.leases {
		open = append(open, l)
	}
	q.mu.Unlock()
	for _, l := range open {
		l.mu.Lock()
		l.ended = true
		l.timer.Stop()
		l.mu.Unlock()
	}
	q.d.nc.FlushTimeout(time.Second)
	q.bg.Wait()
	return nil
}

var errForeign = errors.New("walq/jetstream: a message walq did not write")

var (
	_ walq.Engine = (*Queue)(nil)
	_ walq.Source = (*Queue)(nil)
)
