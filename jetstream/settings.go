package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
)

// A queue's settings live in its consumers, one per priority level: the
// Visibility is their AckWait, and the metadata below records the rest
// that every process must agree on. Backoff, Fence and PollInterval are
// each handle's own.
const (
	metaQueue       = "walq.queue"
	metaMaxAttempts = "walq.max_attempts"
	metaPriorities  = "walq.priorities"
)

// recorded is what a queue's consumers say of its settings.
type recorded struct {
	visibility time.Duration
	// maxAttempts is 0 for a queue whose consumers were created before
	// the adapter recorded it: each handle then brings its own.
	maxAttempts int
	priorities  []int
	// configs are the consumers found, by priority level.
	configs map[int]jetstream.ConsumerConfig
}

// findQueue reads the settings of queue name from its consumers; it
// returns nil when the queue has none (it does not exist yet). want are
// the levels to look at first (those a caller asked for).
func (d *Dir) findQueue(ctx context.Context, name string, want []int) (*recorded, error) {
	r := &recorded{configs: map[int]jetstream.ConsumerConfig{}}
	var base *jetstream.ConsumerConfig
	for _, p := range append(slices.Clone(want), 0) {
		cfg, err := d.consumerConfig(ctx, name, p)
		if err != nil {
			return nil, err
		}
		if cfg != nil {
			base = cfg
			r.configs[p] = *cfg
			break
		}
	}
	var listed []int // the levels found by the consumers' names, once listed
	if base == nil {
		// Found by its name: a level other than those asked for and 0.
		levels, err := d.listLevels(ctx, name)
		if err != nil || len(levels) == 0 {
			return nil, err
		}
		cfg, err := d.consumerConfig(ctx, name, levels[0])
		if err != nil {
			return nil, err
		}
		if cfg == nil {
			return nil, unavailable(fmt.Sprintf("read the consumer of queue %q, priority %d", name, levels[0]), jetstream.ErrConsumerNotFound)
		}
		base, listed = cfg, levels
		r.configs[levels[0]] = *cfg
	}
	if rec := base.Metadata[metaPriorities]; rec != "" {
		levels, err := parseLevels(rec)
		if err != nil {
			return nil, fmt.Errorf("%w: queue %q: the consumer %s records priorities %q: %v", walq.ErrInvalid, name, base.Durable, rec, err)
		}
		r.priorities = levels
	} else {
		// Created before the levels were recorded: its consumers are
		// found by name.
		if listed == nil {
			levels, err := d.listLevels(ctx, name)
			if err != nil {
				return nil, err
			}
			listed = levels
		}
		r.priorities = listed
	}
	r.visibility = base.AckWait
	if s := base.Metadata[metaMaxAttempts]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: queue %q: the consumer %s records MaxAttempts %q", walq.ErrInvalid, name, base.Durable, s)
		}
		r.maxAttempts = n
	}
	return r, nil
}

// consumerConfig is the configuration of the consumer of queue name's
// level p, or nil when there is none; its Durable is the consumer's name.
// A consumer an older adapter made has the legacy name, which two queue
// names can share: it is the queue's only if its filter subject is the
// level's subject and its metadata, where it has any, names the queue.
func (d *Dir) consumerConfig(ctx context.Context, name string, p int) (*jetstream.ConsumerConfig, error) {
	for i, cname := range []string{consumerName(name, p), legacyConsumerName(name, p)} {
		c, err := d.work.Consumer(ctx, cname)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return nil, unavailable(fmt.Sprintf("read the consumer of queue %q, priority %d", name, p), err)
		}
		cfg := c.CachedInfo().Config
		if cfg.Durable == "" {
			cfg.Durable = cname
		}
		if !d.consumerOf(cfg, name, p) {
			if i == 0 {
				return nil, fmt.Errorf("%w: queue %q, priority %d: the consumer %s filters %q (queue %q), not the level's subject %q",
					walq.ErrInvalid, name, p, cname, cfg.FilterSubject, cfg.Metadata[metaQueue], d.readySubject(name, p))
			}
			continue // another queue's, whose legacy name is the same
		}
		return &cfg, nil
	}
	return nil, nil
}

// consumerOf says whether the consumer cfg serves queue name's level p:
// its filter subject is the level's, and its metadata, where it records a
// queue, names this one.
func (d *Dir) consumerOf(cfg jetstream.ConsumerConfig, name string, p int) bool {
	if cfg.FilterSubject != d.readySubject(name, p) || len(cfg.FilterSubjects) > 0 {
		return false
	}
	q, ok := cfg.Metadata[metaQueue]
	return !ok || q == name
}

// listLevels finds the priority levels of queue name by its consumers'
// names.
func (d *Dir) listLevels(ctx context.Context, name string) ([]int, error) {
	prefix := "walq." + d.name + ".q." + token(name) + "."
	var levels []int
	l := d.work.ListConsumers(ctx)
	for info := range l.Info() {
		lt, ok := strings.CutPrefix(info.Config.FilterSubject, prefix)
		if !ok {
			continue
		}
		p, err := parseLevel(lt)
		if err != nil || info.Name != consumerName(name, p) && info.Name != legacyConsumerName(name, p) || !d.consumerOf(info.Config, name, p) {
			continue
		}
		levels = append(levels, p)
	}
	if err := l.Err(); err != nil {
		return nil, unavailable(fmt.Sprintf("list the consumers of queue %q", name), err)
	}
	slices.Sort(levels)
	return levels, nil
}

// parseLevel reads a level token: p0, p1, m1 (for -1).
func parseLevel(s string) (int, error) {
	if len(s) < 2 || (s[0] != 'p' && s[0] != 'm') {
		return 0, fmt.Errorf("level token %q", s)
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil || n < 0 || strconv.Itoa(n) != s[1:] || (s[0] == 'm' && n == 0) {
		return 0, fmt.Errorf("level token %q", s)
	}
	if s[0] == 'm' {
		n = -n
	}
	return n, nil
}

// formatLevels and parseLevels write and read the recorded priorities:
// "-1,0,1".
func formatLevels(levels []int) string {
	s := make([]string, len(levels))
	for i, p := range levels {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func parseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if !slices.IsSorted(out) || len(slices.Compact(slices.Clone(out))) != len(out) {
		return nil, fmt.Errorf("not sorted without repeats")
	}
	return out, nil
}

// levelConfig is the consumer of queue name's level p under the settings
// o (defaults filled in).
func (d *Dir) levelConfig(name string, p int, o QueueOptions) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       consumerName(name, p),
		Description:   fmt.Sprintf("walq queue %q, priority %d", name, p),
		FilterSubject: d.readySubject(name, p),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.Visibility,
		// walq counts the attempts and dead-letters; the server's
		// MaxDeliver would leave the item in the stream with one advisory
		// nobody may hear.
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: -1,
		MaxWaiting:    4096,
		Metadata: map[string]string{
			metaQueue:       name,
			metaMaxAttempts: strconv.Itoa(o.MaxAttempts),
			metaPriorities:  formatLevels(o.Priorities),
		},
	}
}

// queueRecord is a queue's settings as the Dir records them: the last
// message on the work stream's subject walq.<dir>.cfg.<queue> (no
// consumer reads it). The first is published only if the subject holds
// none and each change only if it holds the one its writer read, so
// creators and changers that race agree on one record. The consumers
// follow it (AckWait, metadata).
type queueRecord struct {
	Visibility  time.Duration `json:"visibility"`
	MaxAttempts int           `json:"max_attempts"`
	Priorities  []int         `json:"priorities"`
}

// errRecordChanged: the record is not the one the writer read.
var errRecordChanged = errors.New("the queue's settings changed meanwhile")

func (d *Dir) recordSubject(queue string) string {
	return "walq." + d.name + ".cfg." + token(queue)
}

// readRecord returns queue name's record and its stream sequence, or nil
// when it has none (a new queue, or one an older adapter made).
func (d *Dir) readRecord(ctx context.Context, name string) (*queueRecord, uint64, error) {
	m, err := d.work.GetLastMsgForSubject(ctx, d.recordSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, unavailable(fmt.Sprintf("read the settings of queue %q", name), err)
	}
	var r queueRecord
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Visibility <= 0 || r.MaxAttempts < 0 || len(r.Priorities) == 0 ||
		!slices.Equal(sortedLevels(r.Priorities), r.Priorities) {
		return nil, 0, fmt.Errorf("%w: queue %q: its settings record (stream sequence %d on %s) does not parse: %q",
			walq.ErrInvalid, name, m.Sequence, m.Subject, m.Data)
	}
	return &r, m.Sequence, nil
}

// writeRecord publishes r as queue name's record if the last one is still
// the one at sequence expect (0: none), and returns its sequence; it
// returns errRecordChanged if another came first.
func (d *Dir) writeRecord(ctx context.Context, name string, r queueRecord, expect uint64) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	m := &nats.Msg{Subject: d.recordSubject(name), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	ack, err := d.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect))
	if err != nil {
		if wrongLastSequence(err) {
			return 0, errRecordChanged
		}
		return 0, unavailable(fmt.Sprintf("record the settings of queue %q", name), err)
	}
	return ack.Sequence, nil
}

// wrongLastSequence says whether err is the server's refusal of a publish
// whose expected last sequence was not the subject's.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func recordOf(o QueueOptions) queueRecord {
	return queueRecord{Visibility: o.Visibility, MaxAttempts: o.MaxAttempts, Priorities: o.Priorities}
}

// fromRecord is r as recorded settings, with the configurations of its
// levels' consumers (nil where one is missing).
func (d *Dir) fromRecord(ctx context.Context, name string, r *queueRecord) (*recorded, error) {
	rec := &recorded{visibility: r.Visibility, maxAttempts: r.MaxAttempts, priorities: r.Priorities, configs: map[int]jetstream.ConsumerConfig{}}
	for _, p := range r.Priorities {
		cfg, err := d.consumerConfig(ctx, name, p)
		if err != nil {
			return nil, err
		}
		if cfg != nil {
			rec.configs[p] = *cfg
		}
	}
	return rec, nil
}

// settle gives the settings a handle of queue name opens with, and the
// sequence of the record they come from (0: a queue an older adapter
// made, which has none): those recorded, where the queue exists (a zero
// field of opts keeps what is recorded, a field that differs is refused),
// or opts with the defaults filled in, recorded and its consumers
// created. Opening never changes what is recorded; SetSettings does.
func (d *Dir) settle(ctx context.Context, name string, opts QueueOptions) (QueueOptions, uint64, map[int]string, error) {
	o := opts
	o.Priorities = sortedLevels(opts.Priorities)
	for try := 0; ; try++ {
		rec, seq, err := d.readRecord(ctx, name)
		if err != nil {
			return o, 0, nil, err
		}
		if rec != nil {
			r, err := d.fromRecord(ctx, name, rec)
			if err != nil {
				return o, 0, nil, err
			}
			o, names, err := d.keep(ctx, name, o, r)
			return o, seq, names, err
		}
		// No record: a queue an older adapter made keeps what its
		// consumers hold, unrecorded.
		r, err := d.findQueue(ctx, name, o.Priorities)
		if err != nil {
			return o, 0, nil, err
		}
		if r != nil {
			o, names, err := d.keep(ctx, name, o, r)
			return o, 0, names, err
		}
		c := fillQueueOptions(o)
		if err := c.check(); err != nil {
			return o, 0, nil, err
		}
		if err := d.strandedLevels(ctx, name, c.Priorities); err != nil {
			return o, 0, nil, err
		}
		seq, err = d.writeRecord(ctx, name, recordOf(c), 0)
		if errors.Is(err, errRecordChanged) && try < 3 {
			continue // another creator came first: its settings are the queue's
		}
		if err != nil {
			return o, 0, nil, err
		}
		if _, err := d.createLevels(ctx, name, c, c.Priorities); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return o, 0, nil, err
		}
		names := map[int]string{}
		for _, p := range c.Priorities {
			names[p] = consumerName(name, p)
		}
		return c, seq, names, nil
	}
}

// strandedLevels refuses to create queue name with the levels levels when
// the work stream holds ready items of it at another level, or schedules
// (delayed items) that fire onto one (items moved into the Dir by
// MoveFrom, which records no settings): no consumer would ever deliver
// them.
func (d *Dir) strandedLevels(ctx context.Context, name string, levels []int) error {
	prefix := "walq." + d.name + ".q." + token(name) + "."
	info, err := d.work.Info(ctx, jetstream.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return unavailable(fmt.Sprintf("read the items of queue %q", name), err)
	}
	var other []int
	add := func(subj string) {
		if !strings.HasPrefix(subj, prefix) {
			return
		}
		p, err := parseLevel(strings.TrimPrefix(subj, prefix))
		if err == nil && !slices.Contains(levels, p) && !slices.Contains(other, p) {
			other = append(other, p)
		}
	}
	for subj, n := range info.State.Subjects {
		if n > 0 {
			add(subj)
		}
	}
	// And the levels the queue's schedules fire onto (delayed items, moved
	// or put by a handle that recorded no settings): one read a schedule.
	filter := "walq." + d.name + ".s." + token(name) + ".*"
	for seq := uint64(1); ; {
		m, err := d.work.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return unavailable(fmt.Sprintf("read the delayed items of queue %q", name), err)
		}
		add(m.Header.Get("Nats-Schedule-Target"))
		seq = m.Sequence + 1
	}
	if len(other) > 0 {
		slices.Sort(other)
		return fmt.Errorf("%w: queue %q: QueueOptions.Priorities %v: the Dir holds items of the queue at priorities %v (moved into it?), which no level would deliver: declare them",
			walq.ErrInvalid, name, levels, other)
	}
	return nil
}

// keep checks opts against the recorded settings r and gives the handle's
// settings; it creates the consumers of recorded levels that are missing
// (a creation that stopped half-way). The handle's Visibility is the
// shortest of the record's and its consumers' AckWaits: a change that
// stopped half-way leaves some consumers behind the record, and the server
// redelivers by theirs.
func (d *Dir) keep(ctx context.Context, name string, opts QueueOptions, r *recorded) (QueueOptions, map[int]string, error) {
	o := opts
	names := map[int]string{}
	how := "; opening never changes a queue's recorded settings: Queue.SetSettings does"
	if o.Visibility != 0 && o.Visibility != r.visibility {
		return o, nil, fmt.Errorf("%w: queue %q: QueueOptions.Visibility = %v differs from the queue's %v%s", walq.ErrInvalid, name, o.Visibility, r.visibility, how)
	}
	o.Visibility = r.visibility
	if r.maxAttempts != 0 {
		if o.MaxAttempts != 0 && o.MaxAttempts != r.maxAttempts {
			return o, nil, fmt.Errorf("%w: queue %q: QueueOptions.MaxAttempts = %d differs from the queue's %d%s", walq.ErrInvalid, name, o.MaxAttempts, r.maxAttempts, how)
		}
		o.MaxAttempts = r.maxAttempts
	}
	for _, p := range o.Priorities {
		if !slices.Contains(r.priorities, p) {
			return o, nil, fmt.Errorf("%w: queue %q: QueueOptions.Priorities %v holds %d, not one of the queue's levels %v%s", walq.ErrInvalid, name, o.Priorities, p, r.priorities, how)
		}
	}
	o.Priorities = r.priorities
	var missing []int
	for _, p := range r.priorities {
		cfg, ok := r.configs[p]
		if !ok {
			c, err := d.consumerConfig(ctx, name, p)
			if err != nil {
				return o, nil, err
			}
			if c == nil {
				missing = append(missing, p)
				names[p] = consumerName(name, p)
				continue
			}
			cfg = *c
		}
		names[p] = cfg.Durable
		o.Visibility = min(o.Visibility, cfg.AckWait)
	}
	o = fillQueueOptions(o)
	if err := o.check(); err != nil {
		return o, nil, err
	}
	if len(missing) > 0 {
		rec := o
		rec.Visibility = r.visibility
		if r.maxAttempts == 0 {
			// Recorded as it was: not at all.
			rec.MaxAttempts = 0
		}
		if _, err := d.createLevels(ctx, name, rec, missing); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return o, nil, err
		}
	}
	return o, names, nil
}

// createLevels creates the consumers of queue name's levels under the
// settings o, and says how many it created.
func (d *Dir) createLevels(ctx context.Context, name string, o QueueOptions, levels []int) (int, error) {
	for i, p := range levels {
		cfg := d.levelConfig(name, p, o)
		if o.MaxAttempts == 0 {
			delete(cfg.Metadata, metaMaxAttempts)
		}
		if _, err := d.js.CreateConsumer(ctx, workStream(d.name), cfg); err != nil {
			if errors.Is(err, jetstream.ErrConsumerExists) {
				return i, err
			}
			return i, unavailable(fmt.Sprintf("create the consumer of queue %q, priority %d", name, p), err)
		}
	}
	return len(levels), nil
}

func sortedLevels(levels []int) []int {
	if len(levels) == 0 {
		return nil
	}
	out := slices.Clone(levels)
	slices.Sort(out)
	return slices.Compact(out)
}

// fillQueueOptions fills in the defaults of the zero fields of o.
func fillQueueOptions(o QueueOptions) QueueOptions {
	if o.Visibility == 0 {
		o.Visibility = 30 * time.Second
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.Backoff == nil {
		o.Backoff = walq.DefaultBackoff
	}
	if len(o.Priorities) == 0 {
		o.Priorities = []int{0}
	}
	if o.Fence == 0 {
		o.Fence = min(o.Visibility/10, time.Second)
	}
	if o.PollInterval == 0 {
		o.PollInterval = 50 * time.Millisecond
	}
	return o
}

// check refuses settings out of range, defaults filled in.
func (o QueueOptions) check() error {
	switch {
	case o.Visibility < 10*time.Millisecond:
		return fmt.Errorf("%w: QueueOptions.Visibility = %v: under 10ms", walq.ErrInvalid, o.Visibility)
	case o.MaxAttempts < 0:
		return fmt.Errorf("%w: QueueOptions.MaxAttempts = %d", walq.ErrInvalid, o.MaxAttempts)
	case o.Fence < 0 || o.Fence >= o.Visibility/2:
		return fmt.Errorf("%w: QueueOptions.Fence = %v: negative or not under half the visibility %v", walq.ErrInvalid, o.Fence, o.Visibility)
	case o.PollInterval < 0:
		return fmt.Errorf("%w: QueueOptions.PollInterval = %v", walq.ErrInvalid, o.PollInterval)
	}
	return nil
}

// Settings returns the handle's settings: the queue's as recorded when it
// was opened or by its last SetSettings, with the handle's own Backoff,
// Fence and PollInterval.
func (q *Queue) Settings() QueueOptions {
	o := *q.opt()
	o.Priorities = slices.Clone(o.Priorities)
	return o
}

// SetSettings changes the queue's recorded settings to opts, filled as
// OpenQueue fills a new queue's (a nil Backoff keeps the one in use), and
// this handle's own. It returns once the server has them: the Visibility
// (the consumers' AckWait) holds at once for every delivery; other handles
// keep the settings they opened with until they are opened again. To
// change one field, change it in what Settings returns.
//
// The change is refused with ErrInvalid if the queue's record is no longer
// the one this handle read (another handle changed it since): the handle
// then takes the record as it is now, and Settings shows it. The
// Visibility cannot be shortened: a handle open elsewhere would still
// count its leases by the longer one after the server had ended them. The
// priority levels cannot change: Priorities, when given, must be the
// queue's. Both are ErrInvalid.
func (q *Queue) SetSettings(ctx context.Context, opts QueueOptions) error {
	if err := q.check(); err != nil {
		return err
	}
	cur := q.opt()
	if opts.Backoff == nil {
		opts.Backoff = cur.Backoff
	}
	if len(opts.Priorities) == 0 {
		opts.Priorities = cur.Priorities
	}
	o := fillQueueOptions(opts)
	o.Priorities = sortedLevels(o.Priorities)
	if err := o.check(); err != nil {
		return err
	}
	d := q.d
	rec, seq, err := d.readRecord(ctx, q.name)
	if err != nil {
		return err
	}
	var r *recorded
	if rec != nil {
		r, err = d.fromRecord(ctx, q.name, rec)
	} else {
		r, err = d.findQueue(ctx, q.name, nil)
	}
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("%w: queue %q: its consumers are gone", walq.ErrNotFound, q.name)
	}
	if seq != q.recSeq.Load() {
		return q.changedMeanwhile(ctx, q.recSeq.Load())
	}
	switch {
	case !slices.Equal(o.Priorities, r.priorities):
		return fmt.Errorf("%w: queue %q: Priorities %v: the queue's levels are %v and do not change", walq.ErrInvalid, q.name, o.Priorities, r.priorities)
	case o.Visibility < r.visibility:
		return fmt.Errorf("%w: queue %q: Visibility %v is shorter than the queue's %v: a handle open elsewhere would count its leases by the longer one after the server ended them", walq.ErrInvalid, q.name, o.Visibility, r.visibility)
	}
	nseq, err := d.writeRecord(ctx, q.name, recordOf(o), seq)
	if errors.Is(err, errRecordChanged) {
		return q.changedMeanwhile(ctx, q.recSeq.Load())
	}
	if err != nil {
		return err
	}
	// The consumers follow the record, never down: a change recorded
	// after this one owns them.
	for _, p := range r.priorities {
		if _, last, err := d.readRecord(ctx, q.name); err != nil {
			return err
		} else if last != nseq {
			break
		}
		cfg, ok := r.configs[p]
		if !ok {
			c, err := d.consumerConfig(ctx, q.name, p)
			if err != nil {
				return err
			}
			if c == nil {
				if _, err := d.createLevels(ctx, q.name, o, []int{p}); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
					return err
				}
				continue
			}
			cfg = *c
		}
		want := d.levelConfig(q.name, p, o)
		cfg.AckWait = max(cfg.AckWait, want.AckWait)
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		maps.Copy(cfg.Metadata, want.Metadata)
		if _, err := d.js.UpdateConsumer(ctx, workStream(d.name), cfg); err != nil {
			return unavailable(fmt.Sprintf("update the consumer of queue %q, priority %d", q.name, p), err)
		}
	}
	q.set.Store(&o)
	q.recSeq.Store(nseq)
	return nil
}

// changedMeanwhile takes the queue's record as it is now for the handle
// and says that SetSettings changed nothing.
func (q *Queue) changedMeanwhile(ctx context.Context, was uint64) error {
	cur := q.opt()
	o, seq, _, err := q.d.settle(ctx, q.name, QueueOptions{Backoff: cur.Backoff, Fence: cur.Fence, PollInterval: cur.PollInterval})
	if err != nil {
		return err
	}
	if o.Fence >= o.Visibility/2 {
		o.Fence = min(o.Visibility/10, time.Second)
	}
	q.set.Store(&o)
	q.recSeq.Store(seq)
	return fmt.Errorf("%w: queue %q: its settings changed since this handle read them (record %d, now %d); nothing changed: read Settings again", walq.ErrInvalid, q.name, was, seq)
}
