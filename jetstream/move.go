package jetstream

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
)

// MoveOptions configure Dir.MoveFrom.
type MoveOptions struct {
	// Queues gives the QueueOptions of the queues items move into, by walq
	// queue name ("" the default queue): a queue listed is opened with
	// them, as OpenQueue does (one the Dir does not have is created with
	// them, recorded). A queue not listed that the Dir has keeps its
	// settings; one the Dir does not have gets none: its items are stored
	// on the subjects of their levels, and the service's first OpenQueue
	// records its own QueueOptions (whose Priorities must hold those
	// levels: OpenQueue refuses them otherwise).
	Queues map[string]QueueOptions
	// Priorities are the levels the items of the queues not in Queues may
	// have [the priorities the directory's items have].
	Priorities []int
	// Batch is how many items go in one atomic batch with the progress
	// [100]. It is at most the server's atomic batch limit less one, for
	// the progress (999 under nats-server's default of 1000); a larger
	// one is that. A server whose max_batch_size is lower refuses a batch
	// over it (err_code 10199, naming its limit): the move then sends the
	// same items in batches of that limit.
	Batch int
	// Progress, when set, is called after each batch is committed.
	Progress func(MoveReport)
	// Pace is a pause after each batch (for tests that kill a move midway).
	Pace time.Duration
	// KeepIDs refuses the move unless the items can keep their IDs: the
	// work stream starts past them (Options.FirstSeq) and no other
	// directory moved into the Dir took them. Without it, a directory
	// whose IDs cannot be kept moves under IDs of its own (IDOffset).
	KeepIDs bool
}

// MoveReport counts what a move did.
type MoveReport struct {
	Items     int // stored items the directory holds
	Ready     int // moved as ready items (leased ones included)
	Delayed   int // moved as schedules at their due times
	Dead      int // moved to the dead letters
	Discarded int // past their deadline: not moved (walq would discard them)
	Skipped   int // moved by an earlier run (its progress said so)
	Done      bool
	// IDOffset is added to each item's ID in the directory to give its ID
	// in the Dir: 0 when the items kept their IDs, else k<<48 for the
	// k-th namespace of IDs a directory moved into the Dir claimed, which
	// no stream sequence and no other directory's items reach.
	IDOffset uint64
}

// idSpaceShift places a moved directory's namespace of IDs: namespace k
// holds the IDs k<<idSpaceShift + the item's ID in the directory. Stream
// sequences stay below 1<<48 (the work stream would hold 2.8e14
// messages), and so do a walq directory's IDs (its LSNs).
const idSpaceShift = 48

// claimIDs finds the namespace of IDs that the directory src (its ID,
// hex) moves under, claiming one if an earlier run did not: namespace 0
// keeps the directory's IDs (below nextID), and may be claimed only when
// the work stream starts at or past nextID. A claim is one message on
// walq.<dir>.mvns.<k> holding src, published only where none is, so two
// directories never share one, and a rerun finds its own.
func (d *Dir) claimIDs(ctx context.Context, src string, nextID, firstSeq uint64, keep bool) (uint64, error) {
	if nextID >= 1<<idSpaceShift {
		return 0, fmt.Errorf("%w: move: the directory's IDs reach %d, past the %d a Dir can take", walq.ErrInvalid, nextID-1, uint64(1)<<idSpaceShift)
	}
	for k := uint64(0); k < 1<<(64-idSpaceShift); {
		subj := fmt.Sprintf("walq.%s.mvns.%d", d.name, k)
		m, err := d.work.GetLastMsgForSubject(ctx, subj)
		switch {
		case err == nil && string(m.Data) == src:
			return k, nil
		case err == nil && k == 0 && keep:
			return 0, fmt.Errorf("%w: move: the IDs below %d are another directory's (%s), moved into Dir %s before: move without MoveOptions.KeepIDs",
				walq.ErrInvalid, firstSeq, m.Data, d.name)
		case err == nil:
			k++
			continue
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return 0, unavailable("move: read the claims of IDs", err)
		case k == 0 && nextID > 1 && firstSeq < nextID && keep:
			return 0, fmt.Errorf("%w: move: the Dir's work stream starts at sequence %d, below the directory's IDs (up to %d): move into a Dir created with Options.FirstSeq >= %d, or without MoveOptions.KeepIDs",
				walq.ErrInvalid, firstSeq, nextID-1, nextID)
		case k == 0 && nextID > 1 && firstSeq < nextID:
			k++
			continue
		}
		cm := &nats.Msg{Subject: subj, Data: []byte(src), Header: nats.Header{}}
		cm.Header.Set(HeaderVersion, formatVersion)
		if _, err := d.js.PublishMsg(ctx, cm, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
			if wrongLastSequence(err) {
				continue // another directory claimed it meanwhile: look again
			}
			return 0, unavailable("move: claim the IDs", err)
		}
		return k, nil
	}
	return 0, fmt.Errorf("walq/jetstream: move: every namespace of IDs of Dir %s is claimed", d.name)
}

// moveProgress is the durable progress of a move, one message in the work
// stream (subject walq.<dir>.mv.<directory id>, rolled up), committed in
// the same atomic batch as the items it counts.
type moveProgress struct {
	Dir  string `json:"dir"`  // the walq directory's ID, hex
	LSN  uint64 `json:"lsn"`  // the directory's last record when the move began
	Next int    `json:"next"` // index, in ReadDir's order, of the next item to move
	Done bool   `json:"done"`
}

// MoveFrom moves the items of the walq directory dir into d: ready ones
// (and those leased when the directory was closed) as ready items,
// delayed ones as schedules at their due times, dead letters into the
// dead-letter stream, each with its ID, key, deadline, priority, attempts
// (Walq-Attempts-Before), deliveries and history. Items past their
// deadline are not moved.
//
// It reads the directory with walq.ReadDir and changes nothing in it: it
// holds the directory's lock while it runs (so no walq queue opens it
// meanwhile) and refuses one that a queue holds. Its progress is stored in
// JetStream, in the same atomic batch as the items it moved, so a move
// stopped at any point (a SIGKILL) and run again goes on where it stopped:
// nothing is moved twice and nothing is left out. A directory changed
// since a move began is refused.
//
// Items keep their IDs where the Dir's work stream starts past them
// (Options.FirstSeq, for a Dir created for the move) and no other
// directory's items took them; otherwise they move under a namespace of
// IDs of the directory's own, each its ID plus MoveReport.IDOffset, so
// that any number of directories can move into one Dir.
func (d *Dir) MoveFrom(ctx context.Context, dir string, opts MoveOptions) (MoveReport, error) {
	var rep MoveReport
	unlock, err := lockDir(dir)
	if err != nil {
		return rep, err
	}
	defer unlock()
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	// A batch is its items and the progress: at most the server's limit.
	opts.Batch = min(opts.Batch, d.batchLimit()-1)
	// A first pass: what the directory holds, and whether it can move.
	var items []walq.StoredItem
	var tooLarge []error
	now := time.Now()
	info, err := walq.ReadDir(dir, func(it walq.StoredItem) error {
		if err := d.moveTooLarge(it, now); err != nil {
			tooLarge = append(tooLarge, err)
		}
		it.Body = nil // read again, batch by batch
		items = append(items, it)
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("walq/jetstream: move: read %s: %w", dir, err)
	}
	rep.Items = len(items)
	if err := identified(dir, info); err != nil {
		return rep, err
	}
	if len(tooLarge) > 0 {
		return rep, fmt.Errorf("walq/jetstream: move: %d items cannot be stored on this server, the first: %w; raise the server's max_payload (nats-server's max_payload, up to 64 MB) and run the move again: nothing was moved",
			len(tooLarge), tooLarge[0])
	}
	stInfo, err := d.work.Info(ctx)
	if err != nil {
		return rep, unavailable("move: the work stream", err)
	}
	// Moved items keep their IDs, all below NextID, where IDs given on
	// JetStream (stream sequences, all at or past the stream's first) and
	// no other directory's reach them; else they move under a namespace
	// of IDs of the directory's own.
	src := hex.EncodeToString(info.ID[:])
	if len(items) > 0 { // a directory with nothing to move claims no IDs
		ns, err := d.claimIDs(ctx, src, info.NextID, stInfo.Config.FirstSeq, opts.KeepIDs)
		if err != nil {
			return rep, err
		}
		rep.IDOffset = ns << idSpaceShift
	}
	queues := map[string]*Queue{}
	prios := map[int]bool{}
	for _, it := range items {
		prios[it.Priority] = true
	}
	levels := opts.Priorities
	if len(levels) == 0 {
		for p := range prios {
			levels = append(levels, p)
		}
		slices.Sort(levels)
	}
	for _, name := range info.Queues {
		qo, given := opts.Queues[name]
		if !given {
			qo = QueueOptions{Priorities: levels}
		}
		q, err := d.openForMove(ctx, name, qo, given)
		if err != nil {
			return rep, fmt.Errorf("walq/jetstream: move: open queue %q: %w", name, err)
		}
		defer q.Close()
		queues[name] = q
	}
	for _, it := range items {
		if !it.Dead && queues[it.Queue].level(it.Priority) == nil {
			return rep, fmt.Errorf("%w: move: item %d of queue %q has priority %d, not one of the queue's levels %v",
				walq.ErrInvalid, it.ID, it.Queue, it.Priority, queues[it.Queue].opt().Priorities)
		}
	}
	// Where an earlier run stopped.
	progSubj := "walq." + d.name + ".mv." + src
	prog := moveProgress{Dir: src, LSN: info.LastLSN}
	if m, err := d.work.GetLastMsgForSubject(ctx, progSubj); err == nil {
		var p moveProgress
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return rep, fmt.Errorf("walq/jetstream: move: the progress on %s does not parse: %w", progSubj, err)
		}
		if p.LSN != info.LastLSN {
			return rep, fmt.Errorf("%w: move: the directory changed since the move began (its last record was %d, it is %d now); nothing more moved",
				walq.ErrInvalid, p.LSN, info.LastLSN)
		}
		prog = p
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return rep, unavailable("move: read the progress", err)
	}
	rep.Skipped = min(prog.Next, len(items))
	if prog.Done {
		rep.Done = true
		return rep, nil
	}
	// The second pass reads the bodies, a batch at a time.
	var batch []walq.StoredItem
	var batchIdx []int // each item's index in ReadDir's order
	index := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		// The messages to commit, each with the index of the item after
		// it (a batch split to fit the server's limit records its progress
		// up to its last message).
		type entry struct {
			m       *nats.Msg
			next    int
			delayed bool
		}
		var entries []entry
		var counts MoveReport
		for i, it := range batch {
			q := queues[it.Queue]
			switch {
			case it.Dead || it.BodyError != "":
				if err := q.moveDeadLetter(ctx, src, it, rep.IDOffset); err != nil {
					return err
				}
				counts.Dead++
				continue
			case !it.Deadline.IsZero() && !it.Deadline.After(now):
				counts.Discarded++
				continue
			}
			m, err := q.moveMsg(movedItem(it), moveCarry(it, it.ID+rep.IDOffset))
			if err != nil {
				return err
			}
			entries = append(entries, entry{m: m, next: batchIdx[i] + 1, delayed: m.Header.Get(HeaderDue) != ""})
		}
		for {
			n := min(len(entries), d.batchLimit()-1)
			if n < 0 || n == 0 && len(entries) > 0 {
				return fmt.Errorf("walq/jetstream: move: the server takes atomic batches of %d messages, which leaves no room for an item beside the progress", d.batchLimit())
			}
			next := index
			if n < len(entries) {
				next = entries[n-1].next
			}
			msgs := make([]*nats.Msg, n)
			for i := range msgs {
				msgs[i] = entries[i].m
			}
			err := d.commit(ctx, msgs, progSubj, moveProgress{Dir: src, LSN: info.LastLSN, Next: next})
			if err != nil && d.smallerBatch(err, n+1) {
				continue // the server's limit is lower: the same items, in smaller batches
			}
			if err != nil {
				return err
			}
			for _, e := range entries[:n] {
				if e.delayed {
					rep.Delayed++
				} else {
					rep.Ready++
				}
			}
			entries = entries[n:]
			if len(entries) == 0 {
				break
			}
		}
		rep.Dead += counts.Dead
		rep.Discarded += counts.Discarded
		batch, batchIdx = batch[:0], batchIdx[:0]
		if opts.Progress != nil {
			opts.Progress(rep)
		}
		if opts.Pace > 0 {
			time.Sleep(opts.Pace)
		}
		return nil
	}
	_, err = walq.ReadDir(dir, func(it walq.StoredItem) error {
		i := index
		index++
		if i < prog.Next {
			return nil
		}
		batch = append(batch, it)
		batchIdx = append(batchIdx, i)
		if len(batch) == opts.Batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return rep, err
	}
	if err := d.commit(ctx, nil, progSubj, moveProgress{Dir: src, LSN: info.LastLSN, Next: index, Done: true}); err != nil {
		return rep, err
	}
	rep.Done = true
	return rep, nil
}

// identified refuses a walq directory without an ID (DirInfo.ID is zero
// for a directory of format 1, which an older walq wrote, and for one no
// walq has opened): a move tells directories apart by their IDs, and two
// such directories would share one progress and one namespace of IDs.
func identified(dir string, info walq.DirInfo) error {
	if info.ID != ([16]byte{}) {
		return nil
	}
	return fmt.Errorf("%w: move: %s has no directory ID (a directory of format 1, which an older walq wrote, or one no walq has opened), "+
		"which a move needs to tell it from another directory: open it once with this walq (walq.Open carries a directory of format 1 forward to format 2, "+
		"which gives it an ID), close it, and run the move again; nothing was moved or removed", walq.ErrInvalid, dir)
}

// openForMove opens queue name for a move with the settings qo: as
// OpenQueue does when the queue exists in the Dir or its settings were
// given (MoveOptions.Queues: the move records them); otherwise as a handle
// that records no settings and creates no consumers, so that the first
// OpenQueue of the service records its own QueueOptions ("settings are
// QueueOptions in code"). Such a handle only stores items, on the ready
// subjects of qo.Priorities.
func (d *Dir) openForMove(ctx context.Context, name string, qo QueueOptions, given bool) (*Queue, error) {
	if given {
		return d.OpenQueue(ctx, name, qo)
	}
	if err := checkQueueName(name); err != nil {
		return nil, err
	}
	rec, _, err := d.readRecord(ctx, name)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		r, err := d.findQueue(ctx, name, nil)
		if err != nil {
			return nil, err
		}
		if r != nil {
			rec = &queueRecord{}
		}
	}
	if rec != nil {
		return d.OpenQueue(ctx, name, qo)
	}
	o := fillQueueOptions(QueueOptions{Priorities: sortedLevels(qo.Priorities)})
	q := &Queue{d: d, name: name, leases: make(map[uint64]*lease), watchers: make(map[*watcher]struct{}), done: make(chan struct{}), qnum: 1}
	q.set.Store(&o)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	for _, p := range o.Priorities {
		q.levels = append(q.levels, &level{prio: p, subject: d.readySubject(name, p)})
	}
	return q, nil
}

// movedItem and moveCarry are the item it of a walq directory as the move
// stores it, under the ID id.
func movedItem(it walq.StoredItem) walq.Item {
	return walq.Item{Body: it.Body, Priority: it.Priority, Key: it.Key, Deadline: it.Deadline}
}

func moveCarry(it walq.StoredItem, id uint64) *carry {
	c := &carry{id: id, attemptsBefore: it.Attempts, deliveries: it.Deliveries, put: it.EnqueuedAt, due: it.Due}
	for _, a := range it.History {
		c.history = append(c.history, attemptOf(a))
	}
	if it.Leased {
		c.due = time.Time{} // its lease ends: ready now
	}
	return c
}

// moveTooLarge says whether the item it of a walq directory, which a move
// at now would store, passes the server's max_payload (counted with the
// widest ID, and room for its dead letter); nil when it fits or is not
// moved.
func (d *Dir) moveTooLarge(it walq.StoredItem, now time.Time) error {
	what := fmt.Sprintf("item %d of queue %q", it.ID, it.Queue)
	switch {
	case it.Dead || it.BodyError != "":
		return d.tooLarge(what+" (a dead letter)", it.Queue, itemHeader(movedItem(it), moveCarry(it, math.MaxUint64)), len(it.Body))
	case !it.Deadline.IsZero() && !it.Deadline.After(now):
		return nil
	}
	h := moveHeader(movedItem(it), moveCarry(it, math.MaxUint64), d.readySubject(it.Queue, it.Priority), now)
	return d.tooLarge(what, it.Queue, h, len(it.Body))
}

func attemptOf(a walq.Attempt) attempt {
	out := attempt{How: a.How, Error: a.Error}
	if !a.Start.IsZero() {
		out.Start = a.Start.UnixNano()
	}
	if !a.End.IsZero() {
		out.End = a.End.UnixNano()
	}
	return out
}

// moveDeadLetter publishes a moved dead letter under its ID in the
// directory plus offset: idempotent, since the dead-letter stream keeps
// one message per ID's subject.
func (q *Queue) moveDeadLetter(ctx context.Context, src string, it walq.StoredItem, offset uint64) error {
	id := it.ID + offset
	h := nats.Header{}
	h.Set(HeaderVersion, formatVersion)
	h.Set(HeaderID, strconv.FormatUint(id, 10))
	h.Set(HeaderQueue, q.name)
	h.Set(HeaderPriority, strconv.Itoa(it.Priority))
	cause := it.LastError
	if it.BodyError != "" {
		cause = "walq/jetstream: move: the body could not be read from the walq directory: " + it.BodyError
	}
	setText(h, HeaderError, cutError(cause))
	h.Set(HeaderAttempts, strconv.Itoa(it.Attempts))
	h.Set(HeaderDeliveriesBefore, strconv.Itoa(it.Deliveries))
	dead := it.DeadAt
	if dead.IsZero() {
		dead = time.Now()
	}
	h.Set(HeaderDeadAt, nanos(dead))
	var hist []attempt
	for _, a := range it.History {
		hist = append(hist, attemptOf(a))
	}
	if s := encodeHistory(hist); s != "" {
		h.Set(HeaderHistory, s)
	}
	if it.Key != "" {
		setText(h, HeaderKey, it.Key)
	}
	if !it.EnqueuedAt.IsZero() {
		h.Set(HeaderPut, nanos(it.EnqueuedAt))
	}
	if !it.Deadline.IsZero() {
		h.Set(HeaderDeadline, nanos(it.Deadline))
	}
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("walq-mv-dl-%s-%d", src, it.ID))
	if err := q.d.fitDeadLetter(h, len(it.Body)); err != nil {
		return err
	}
	if _, err := q.d.js.PublishMsg(ctx, &nats.Msg{Subject: q.d.dlqSubject(q.name, id), Header: h, Data: it.Body}); err != nil {
		return unavailable("move: a dead letter", err)
	}
	return nil
}

// commit publishes msgs and the progress p as one atomic batch: all of
// them are stored, or none.
func (d *Dir) commit(ctx context.Context, msgs []*nats.Msg, progSubj string, p moveProgress) error {
	body, _ := json.Marshal(p)
	pm := &nats.Msg{Subject: progSubj, Header: nats.Header{}, Data: body}
	pm.Header.Set(HeaderVersion, formatVersion)
	pm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	return d.publishBatch(ctx, "move", append(msgs, pm))
}

// maxAtomicBatch is the most messages the server takes in one atomic
// batch by default (nats-server's streamDefaultMaxAtomicBatchSize; a
// server's max_batch_size may set it lower, and then refuses a larger
// batch with err_code 10199 naming its limit, which is not otherwise
// exposed to a client: see Dir.smallerBatch).
const maxAtomicBatch = 1000

// batchLimit is the most messages the Dir sends in one atomic batch: the
// server's default, or the lower limit a refusal named.
func (d *Dir) batchLimit() int {
	if n := d.batchMax.Load(); n > 0 {
		return int(n)
	}
	return maxAtomicBatch
}

// smallerBatch says whether err refused an atomic batch of sent messages
// as over the server's max_batch_size (nothing of it was stored), and then
// lowers the Dir's limit: to the one the refusal names ("atomic publish
// batch is too large: 100"), or to half of sent where it names none below
// sent. False when no smaller batch is left to try.
func (d *Dir) smallerBatch(err error, sent int) bool {
	var b *batchError
	if !errors.As(err, &b) || b.errCode != errCodeBatchTooLarge || sent <= 1 {
		return false
	}
	limit := sent / 2
	if i := strings.LastIndexByte(b.desc, ' '); i >= 0 {
		if n, err := strconv.Atoi(b.desc[i+1:]); err == nil && n > 0 && n < sent {
			limit = n
		}
	}
	for {
		cur := d.batchMax.Load()
		if cur > 0 && cur <= int64(limit) {
			return true
		}
		if d.batchMax.CompareAndSwap(cur, int64(limit)) {
			d.log.Info("walq/jetstream: the server takes smaller atomic batches; sending batches of its limit", "limit", limit, "err", err)
			return true
		}
	}
}

// batchError is the server's refusal of an atomic batch: nothing of it
// was stored.
type batchError struct {
	what    string
	code    int
	errCode jetstream.ErrorCode
	desc    string
}

func (e *batchError) Error() string {
	return fmt.Sprintf("walq/jetstream: %s: the batch was refused: %s (%d, err_code %d)", e.what, e.desc, e.code, e.errCode)
}

// Error codes of nats-server's refusals of an atomic batch holding a
// Nats-Msg-Id that the stream already has (or is storing).
const (
	errCodeBatchDuplicate    jetstream.ErrorCode = 10201 // JSAtomicPublishContainsDuplicateMessageErr
	errCodeDuplicateInFlight jetstream.ErrorCode = 10158 // JSStreamDuplicateMessageConflict
)

// Error codes of nats-server's refusals of an atomic batch that stored
// nothing and may be sent again as it is: a message of it was turned away
// (too many batches in flight, and the batch is then incomplete at its
// commit), or the batch passes the server's max_batch_size (its
// description names the limit).
const (
	errCodeBatchIncomplete      jetstream.ErrorCode = 10176 // JSAtomicPublishIncompleteBatchErr
	errCodeBatchTooManyInflight jetstream.ErrorCode = 10210 // JSAtomicPublishTooManyInflight
	errCodeBatchTooLarge        jetstream.ErrorCode = 10199 // JSAtomicPublishTooLargeBatchErrF
)

// duplicateInBatch says whether err refused a batch because one of its
// messages' Nats-Msg-Id was stored already.
func duplicateInBatch(err error) bool {
	var b *batchError
	return errors.As(err, &b) && (b.errCode == errCodeBatchDuplicate || b.errCode == errCodeDuplicateInFlight)
}

// publishBatch publishes msgs (1 to maxAtomicBatch, all on the work
// stream) as one atomic batch (AllowAtomicPublish): the server stores all
// of them, or none and the error is a *batchError. It sets the batch's
// headers on copies: msgs are left as they were.
func (d *Dir) publishBatch(ctx context.Context, what string, msgs []*nats.Msg) error {
	_, err := d.publishBatchSeq(ctx, what, msgs)
	return err
}

// publishBatchSeq is publishBatch, and returns the stream sequence of the
// batch's last message.
func (d *Dir) publishBatchSeq(ctx context.Context, what string, msgs []*nats.Msg) (uint64, error) {
	if err := d.connected(what); err != nil {
		return 0, err
	}
	id := nats.NewInbox()[len(nats.InboxPrefix):]
	all := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		c := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for k, v := range m.Header {
			c.Header[k] = append([]string(nil), v...)
		}
		c.Header.Set("Nats-Batch-Id", id)
		c.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		all[i] = c
		if i < len(all)-1 {
			if err := d.nc.PublishMsg(c); err != nil {
				return 0, unavailable(what+": publish a batch", err)
			}
		}
	}
	last := all[len(all)-1]
	last.Header.Set("Nats-Batch-Commit", "1")
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	r, err := d.nc.RequestMsg(last, timeout)
	if err != nil {
		return 0, unavailable(what+": commit a batch", err)
	}
	var ack struct {
		Error *jetstream.APIError `json:"error"`
		Count int                 `json:"count"`
		Seq   uint64              `json:"seq"`
	}
	if err := json.Unmarshal(r.Data, &ack); err != nil {
		return 0, fmt.Errorf("walq/jetstream: %s: the batch's commit answered %q", what, r.Data)
	}
	if ack.Error != nil {
		return 0, &batchError{what: what, code: ack.Error.Code, errCode: ack.Error.ErrorCode, desc: ack.Error.Description}
	}
	if ack.Count != len(all) {
		return 0, fmt.Errorf("walq/jetstream: %s: the batch committed %d messages of %d", what, ack.Count, len(all))
	}
	return ack.Seq, nil
}

// lockDir takes the walq directory's lock, as a walq queue does (flock on
// its LOCK file, which exists in every directory a queue opened), without
// writing anything: a queue that holds it makes the move fail, and no
// queue can open the directory while the move runs.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("walq/jetstream: move: %s: %w (not a walq directory?)", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("walq/jetstream: move: %s is held by a running queue (%v): stop it first", dir, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// RemoveMoved removes the walq directory dir once a move of all its items
// into d has finished, and only if the directory is still as it was when
// the move began (same identity, same last record): so that nothing that
// did not move is removed.
func (d *Dir) RemoveMoved(ctx context.Context, dir string) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	info, err := walq.ReadDir(dir, func(walq.StoredItem) error { return nil })
	if err != nil {
		unlock()
		return err
	}
	if err := identified(dir, info); err != nil {
		unlock()
		return err
	}
	src := hex.EncodeToString(info.ID[:])
	m, err := d.work.GetLastMsgForSubject(ctx, "walq."+d.name+".mv."+src)
	if err != nil {
		unlock()
		return fmt.Errorf("walq/jetstream: remove %s: no finished move of it into Dir %s: %w", dir, d.name, err)
	}
	var p moveProgress
	if err := json.Unmarshal(m.Data, &p); err != nil || !p.Done || p.LSN != info.LastLSN {
		unlock()
		return fmt.Errorf("walq/jetstream: remove %s: the move into Dir %s has not finished, or the directory changed since (progress %s, last record %d)",
			dir, d.name, m.Data, info.LastLSN)
	}
	unlock()
	return os.RemoveAll(dir)
}
