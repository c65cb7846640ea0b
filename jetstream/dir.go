package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
)

// Options configure a Dir: what walq's Options are to a queue directory.
// Each field's default is in brackets. Replicas and KeyWindow are the
// Dir's settings, kept by its streams: they are set when OpenDir creates
// the Dir, opening it again with zero fields keeps them (a field that
// differs is ErrInvalid), and Dir.SetSettings changes them.
type Options struct {
	// Replicas is the replication factor of the Dir's streams and bucket
	// [1]. On R1 an acknowledged write is on the one server's disk (with
	// the server's sync_interval: always); on R3 it is on a majority of
	// three, and each server syncs its file store on flush, not on every
	// write (see the README).
	Replicas int
	// KeyWindow is how long a key is held after its item was put: the
	// work stream's duplicate window [2m]. Unlike walq's KeyWindow it
	// counts from the put, not from the ack, and is one window for every
	// queue of the Dir. A restart of the server forgets the keys of ready
	// items already removed (acked, dead-lettered): JetStream rebuilds the
	// window from the messages it holds (see the README).
	KeyWindow time.Duration
	// Logger receives the adapter's reports: foreign messages
	// dead-lettered, a server that cannot be reached [discarded].
	Logger *slog.Logger
	// FirstSeq is the first stream sequence of a work stream that
	// OpenDir creates [1]: item IDs are stream sequences, so a Dir that a
	// walq directory's items will be moved into (keeping their IDs)
	// starts past them. It changes nothing on a stream that exists.
	FirstSeq uint64
}

// Dir is a set of named queues on one JetStream account, as a walq
// directory holds named queues: one work stream (subjects
// walq.<name>.>), one dead-letter stream (walqdlq.<name>.>) and one
// key-value bucket for attempt histories. Its methods are safe for
// concurrent use.
type Dir struct {
	js        jetstream.JetStream
	nc        *nats.Conn
	name      string
	optsMu    sync.Mutex // guards opts, which SetSettings changes
	opts      Options
	log       *slog.Logger
	apiPrefix string

	work jetstream.Stream
	dlq  jetstream.Stream
	hist jetstream.KeyValue
	// histStream is the bucket's stream, for purges that leave no marker.
	histStream jetstream.Stream
	// batchMax is the server's atomic batch limit where a refusal named
	// one lower than the default (0: the default; see smallerBatch).
	batchMax atomic.Int64
	// gone is closed once the connection is closed for good: pulls that
	// wait end then.
	gone chan struct{}
}

// Stream names of a Dir.
func workStream(dir string) string { return "WALQ_" + dir }
func dlqStream(dir string) string  { return "WALQ_" + dir + "_DLQ" }
func histBucket(dir string) string { return "WALQ_" + dir + "_HIST" }

// OpenDir opens the Dir called name on js. A Dir that exists keeps its
// settings: a zero Replicas or KeyWindow takes what its work stream has, a
// field that differs is ErrInvalid, and FirstSeq is ignored; SetSettings
// changes them. A Dir that does not exist is created with opts, defaults
// filled in (and so are the dead-letter stream and the history bucket of a
// Dir whose creation stopped half-way, with the Dir's replicas). A name is
// 1 to 64 ASCII letters, digits, '_' and '-'; a new Dir's may not end in
// "_DLQ" or "_HIST" (the suffixes of the Dir's other streams' names),
// though a Dir of such a name that an older adapter made opens. A stream found
// under the name of one of the Dir's that does not hold the subjects the
// Dir's layout gives it (another Dir's, or not walq's) is ErrInvalid, and
// left as it is.
func OpenDir(ctx context.Context, js jetstream.JetStream, name string, opts Options) (*Dir, error) {
	if err := checkDirName(name); err != nil {
		return nil, err
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dir{js: js, nc: js.Conn(), name: name, log: opts.Logger, apiPrefix: apiPrefix(js.Options()), gone: make(chan struct{})}
	st := d.nc.StatusChanged(nats.CLOSED)
	go func() {
		<-st
		close(d.gone)
	}()
	if d.nc.IsClosed() {
		d.nc.RemoveStatusListener(st) // closes st
	}
	// The dead-letter stream's name may be held by a stream that is not
	// the Dir's (an older adapter let a Dir be named "<name>_DLQ"):
	// refused before anything is created or changed.
	if st, err := js.Stream(ctx, dlqStream(name)); err == nil {
		if err := d.role(st.CachedInfo().Config, "dead-letter stream", "walqdlq."+name+".>"); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, unavailable("look up the dead-letter stream", err)
	}
	for try := 0; ; try++ {
		work, err := js.Stream(ctx, workStream(name))
		if err == nil {
			cfg := work.CachedInfo().Config
			if err := d.role(cfg, "work stream", "walq."+name+".>"); err != nil {
				return nil, err
			}
			if err := opts.differs(name, cfg); err != nil {
				return nil, err
			}
			opts.Replicas, opts.KeyWindow, opts.FirstSeq = cfg.Replicas, cfg.Duplicates, cfg.FirstSeq
			if d.work, err = d.upgrade(ctx, work); err != nil {
				return nil, err
			}
			break
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, unavailable("look up the work stream", err)
		}
		if err := newDirName(name); err != nil {
			return nil, err
		}
		opts = opts.filled()
		d.work, err = js.CreateStream(ctx, d.workConfig(opts))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && try == 0 {
			// Another process created it meanwhile: its settings are the
			// Dir's.
			continue
		}
		if err != nil {
			return nil, unavailable("create the work stream", err)
		}
		break
	}
	d.opts = opts
	var err error
	if d.dlq, err = d.openStream(ctx, d.dlqConfig(opts)); err != nil {
		return nil, err
	}
	if err := d.role(d.dlq.CachedInfo().Config, "dead-letter stream", "walqdlq."+name+".>"); err != nil {
		return nil, err
	}
	hcfg := d.histConfig(opts)
	d.hist, err = js.KeyValue(ctx, hcfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		d.hist, err = js.CreateKeyValue(ctx, hcfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			d.hist, err = js.KeyValue(ctx, hcfg.Bucket)
		}
	}
	if err != nil {
		return nil, unavailable("open the history bucket", err)
	}
	d.histStream, err = js.Stream(ctx, "KV_"+histBucket(name))
	if err != nil {
		return nil, unavailable("open the history bucket's stream", err)
	}
	if err := d.role(d.histStream.CachedInfo().Config, "history bucket", "$KV."+histBucket(name)+".>"); err != nil {
		return nil, err
	}
	return d, nil
}

// role refuses a stream found under the name of one of the Dir's streams
// that does not hold the subjects the Dir's layout gives it (what: which
// of them): another Dir's, or not walq's. Nothing is changed in it.
func (d *Dir) role(cfg jetstream.StreamConfig, what, subject string) error {
	if slices.Contains(cfg.Subjects, subject) {
		return nil
	}
	return fmt.Errorf("%w: Dir %q: the stream %s is not the Dir's %s: its subjects are %q, not %q (another Dir's stream, or not walq's); it was left as it is",
		walq.ErrInvalid, d.name, cfg.Name, what, cfg.Subjects, subject)
}

// layoutVersion is recorded in the metadata of the work stream: what the
// Dir's streams and subjects are laid out as.
const (
	metaLayout    = "walq.layout"
	layoutVersion = "1"
)

// check refuses options out of range (zero fields are defaults).
func (o Options) check() error {
	if o.Replicas < 0 {
		return fmt.Errorf("%w: Options.Replicas = %d", walq.ErrInvalid, o.Replicas)
	}
	if o.KeyWindow != 0 && o.KeyWindow < 100*time.Millisecond {
		return fmt.Errorf("%w: Options.KeyWindow = %v: JetStream's duplicate window is at least 100ms", walq.ErrInvalid, o.KeyWindow)
	}
	return nil
}

// filled is o with its zero settings at their defaults.
func (o Options) filled() Options {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.KeyWindow == 0 {
		o.KeyWindow = 2 * time.Minute
	}
	return o
}

// differs refuses a setting of o that differs from the work stream's cfg.
func (o Options) differs(name string, cfg jetstream.StreamConfig) error {
	how := "; opening never changes a Dir's settings: Dir.SetSettings does"
	if o.Replicas != 0 && o.Replicas != cfg.Replicas {
		return fmt.Errorf("%w: Dir %q: Options.Replicas = %d differs from the Dir's %d%s", walq.ErrInvalid, name, o.Replicas, cfg.Replicas, how)
	}
	if o.KeyWindow != 0 && o.KeyWindow != cfg.Duplicates {
		return fmt.Errorf("%w: Dir %q: Options.KeyWindow = %v differs from the Dir's %v%s", walq.ErrInvalid, name, o.KeyWindow, cfg.Duplicates, how)
	}
	return nil
}

// workConfig is the work stream of a Dir with the settings o.
func (d *Dir) workConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		FirstSeq:    o.FirstSeq,
		Name:        workStream(d.name),
		Description: "walq work stream: items by queue and priority, schedules of delayed items",
		Subjects:    []string{"walq." + d.name + ".>"},
		// WorkQueue: an acked (or terminated) message is removed; the
		// schedules and the ID reservations, which no consumer reads,
		// stay until they fire or expire.
		Retention:         jetstream.WorkQueuePolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          o.Replicas,
		Duplicates:        o.KeyWindow,
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
		AllowDirect:       true,
		// For walq-to-jetstream: its progress is one message (rolled up)
		// committed in one atomic batch with the items it moved.
		AllowRollup:        true,
		AllowAtomicPublish: true,
		Metadata:           map[string]string{metaLayout: layoutVersion},
	}
}

// upgrade turns on what the adapter needs of a work stream that an older
// adapter created without it, changing none of its settings.
func (d *Dir) upgrade(ctx context.Context, work jetstream.Stream) (jetstream.Stream, error) {
	cfg := work.CachedInfo().Config
	if cfg.AllowMsgSchedules && cfg.AllowMsgTTL && cfg.AllowDirect && cfg.AllowRollup && cfg.AllowAtomicPublish {
		return work, nil
	}
	cfg.AllowMsgSchedules, cfg.AllowMsgTTL, cfg.AllowDirect, cfg.AllowRollup, cfg.AllowAtomicPublish = true, true, true, true, true
	up, err := d.js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, unavailable("turn on what the adapter needs of the work stream", err)
	}
	return up, nil
}

// dlqConfig is the dead-letter stream of a Dir with the settings o.
func (d *Dir) dlqConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        dlqStream(d.name),
		Description: "walq dead letters: one message per dead item, subject walqdlq.<dir>.<queue>.<id>",
		Subjects:    []string{"walqdlq." + d.name + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		// One message per item: a second move of the same item (after a
		// crash between the move and the Term, past the duplicate window)
		// replaces the first.
		MaxMsgsPerSubject: 1,
		Duplicates:        2 * time.Minute,
		AllowDirect:       true,
	}
}

// histConfig is the history bucket of a Dir with the settings o.
func (d *Dir) histConfig(o Options) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      histBucket(d.name),
		Description: "walq attempt histories of live items that failed an attempt",
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
	}
}

// openStream opens the stream of cfg as it is, or creates it with cfg.
func (d *Dir) openStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := d.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = d.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = d.js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return nil, unavailable("open the stream "+cfg.Name, err)
	}
	return st, nil
}

// Settings returns the Dir's settings as this handle holds them: its work
// stream's replicas, key window and first sequence as read at OpenDir or
// by its last SetSettings (another process may have changed them since:
// SetSettings then refuses, and Settings shows them as they are), and the
// Logger it was opened with.
func (d *Dir) Settings() Options {
	d.optsMu.Lock()
	defer d.optsMu.Unlock()
	return d.opts
}

// SetSettings changes the Dir's replicas and key window to those of opts,
// filled as OpenDir fills a new Dir's, on its streams and bucket. It
// returns once the server has them; to change one field, change it in
// what Settings returns. The server decides what it can do (more replicas
// than servers is an error). FirstSeq and Logger are ignored.
//
// The change is refused with ErrInvalid if the work stream's replicas or
// key window are no longer those this handle read (another process changed
// them since): the handle then holds them as they are, and Settings shows
// them. (JetStream updates a stream without a check of what it held, so
// two changes sent at the same moment can still both pass this check: the
// last one the server applies holds.)
func (d *Dir) SetSettings(ctx context.Context, opts Options) error {
	if err := opts.check(); err != nil {
		return err
	}
	o := opts.filled()
	for i, name := range []string{workStream(d.name), dlqStream(d.name), "KV_" + histBucket(d.name)} {
		st, err := d.js.Stream(ctx, name)
		if err != nil {
			return unavailable("read the stream "+name, err)
		}
		cfg := st.CachedInfo().Config
		if i == 0 {
			d.optsMu.Lock()
			held := d.opts
			if cfg.Replicas != held.Replicas || cfg.Duplicates != held.KeyWindow {
				d.opts.Replicas, d.opts.KeyWindow = cfg.Replicas, cfg.Duplicates
				d.optsMu.Unlock()
				return fmt.Errorf("%w: Dir %q: its settings changed since this handle read them (replicas %d, key window %v; now %d, %v); nothing changed: read Settings again",
					walq.ErrInvalid, d.name, held.Replicas, held.KeyWindow, cfg.Replicas, cfg.Duplicates)
			}
			d.optsMu.Unlock()
		}
		cfg.Replicas = o.Replicas
		if name == workStream(d.name) {
			cfg.Duplicates = o.KeyWindow
		}
		if _, err := d.js.UpdateStream(ctx, cfg); err != nil {
			return unavailable("update the stream "+name, err)
		}
	}
	d.optsMu.Lock()
	d.opts.Replicas, d.opts.KeyWindow = o.Replicas, o.KeyWindow
	d.optsMu.Unlock()
	return nil
}

// Name is the Dir's name.
func (d *Dir) Name() string { return d.name }

func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	}
	return jetstream.DefaultAPIPrefix
}

// reservedSuffixes end the names of a Dir's other streams and bucket
// (WALQ_<D>_DLQ, WALQ_<D>_HIST): a Dir named with one would take another
// Dir's dead-letter stream for its work stream, or the other way round.
var reservedSuffixes = []string{"_DLQ", "_HIST"}

func checkDirName(name string) error {
	if len(name) < 1 || len(name) > 64 {
		return fmt.Errorf("%w: Dir name %q: 1 to 64 bytes", walq.ErrInvalid, name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: Dir name %q: only ASCII letters, digits, '_' and '-'", walq.ErrInvalid, name)
		}
	}
	return nil
}

// newDirName refuses to create a Dir whose name ends in one of
// reservedSuffixes. A Dir of such a name that an older adapter made (its
// work stream exists and holds the Dir's subjects) still opens: the
// stream's subjects tell it from another Dir's dead-letter stream, and
// every stream OpenDir uses is checked for its subjects before anything
// is changed (Dir.role), so it takes nothing of another Dir's.
func newDirName(name string) error {
	for _, suf := range reservedSuffixes {
		if strings.HasSuffix(name, suf) {
			return fmt.Errorf("%w: Dir name %q: ends in %q, as the names of a Dir's dead-letter stream and history bucket do (WALQ_<dir>_DLQ, WALQ_<dir>_HIST): a new Dir may not (a Dir of such a name that an older adapter made opens)", walq.ErrInvalid, name, suf)
		}
	}
	return nil
}

// checkQueueName holds queue names to walq's rule: 1 to 100 bytes of ASCII
// letters, digits, '.', '_' and '-', starting with a letter or digit; ""
// is the default queue.
func checkQueueName(name string) error {
	if name == "" {
		return nil
	}
	if len(name) > 100 {
		return fmt.Errorf("%w: queue name %q: over 100 bytes", walq.ErrInvalid, name)
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("%w: queue name %q: must start with a letter or digit", walq.ErrInvalid, name)
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: queue name %q: only ASCII letters, digits, '.', '_' and '-'", walq.ErrInvalid, name)
		}
	}
	if strings.Contains(name, "..") || strings.HasSuffix(name, ".") {
		return fmt.Errorf("%w: queue name %q: a '.' must separate two tokens (it is one in a NATS subject)", walq.ErrInvalid, name)
	}
	return nil
}

// token is the queue's name in subjects and consumer names: "_" for the
// default queue (no walq name starts with '_').
func token(queue string) string {
	if queue == "" {
		return "_"
	}
	return queue
}

// levelToken names a priority level in a subject: p0, p1, m1 (for -1).
func levelToken(p int) string {
	if p < 0 {
		return fmt.Sprintf("m%d", -p)
	}
	return fmt.Sprintf("p%d", p)
}

func (d *Dir) readySubject(queue string, prio int) string {
	return "walq." + d.name + ".q." + token(queue) + "." + levelToken(prio)
}
func (d *Dir) scheduleSubject(queue string, id uint64) string {
	return fmt.Sprintf("walq.%s.s.%s.%d", d.name, token(queue), id)
}
func (d *Dir) reserveSubject(queue string) string {
	return "walq." + d.name + ".ids." + token(queue)
}

// claimSubject is where the key of the delayed item id is claimed (see
// Queue.put); claimPrefix, that of the queue's claims.
func (d *Dir) claimSubject(queue string, id uint64) string {
	return d.claimPrefix(queue) + strconv.FormatUint(id, 10)
}
func (d *Dir) claimPrefix(queue string) string { return "walq." + d.name + ".k." + token(queue) + "." }
func (d *Dir) dlqSubject(queue string, id uint64) string {
	return fmt.Sprintf("walqdlq.%s.%s.%d", d.name, token(queue), id)
}
func (d *Dir) dlqFilter(queue string) string {
	return "walqdlq." + d.name + "." + token(queue) + ".*"
}
func histKey(queue string, id uint64) string { return fmt.Sprintf("%s.%d", token(queue), id) }

// consumerName is the durable name of a queue's level: "walq_" + the
// queue's token with each '.' (which consumer names may not hold) written
// '~' + "~" + the level token. No queue name holds '~' and no level token
// holds '~' or '.', so two queues or two levels never share a name.
func consumerName(queue string, prio int) string {
	return "walq_" + strings.ReplaceAll(token(queue), ".", "~") + "~" + levelToken(prio)
}

// legacyConsumerName is the name the adapter gave a level's consumer
// before consumerName: the queue's name with '.' made '_' and an FNV-32a
// of it, which two names can share. A consumer under it is the queue's
// only if its filter subject is the level's (see Dir.consumerConfig).
func legacyConsumerName(queue string, prio int) string {
	h := fnv.New32a()
	h.Write([]byte(queue))
	return fmt.Sprintf("walq_%s_%s_%08x", strings.ReplaceAll(token(queue), ".", "_"), levelToken(prio), h.Sum32())
}

// ErrUnavailable is wrapped by the errors of calls that could not reach
// JetStream for now: no server answers, a request timed out, the
// connection is reconnecting. A connection that is closed (its reconnects
// ran out, or it was closed) never comes back: calls on it return an error
// wrapping walq.ErrClosed and nats.ErrConnectionClosed instead (see
// closedError).
var ErrUnavailable = errors.New("walq/jetstream: JetStream unavailable")

// unavailable wraps err with ErrUnavailable when it says the server could
// not be reached, and says what was being done.
func unavailable(what string, err error) error {
	if err == nil {
		return nil
	}
	var u *unavailableError
	var c *closedError
	if errors.As(err, &u) || errors.As(err, &c) {
		return err
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		return &closedError{what: what}
	}
	if isUnavailable(err) {
		return &unavailableError{what: what, err: err}
	}
	return fmt.Errorf("walq/jetstream: %s: %w", what, err)
}

// unavailableError says what could not be done, and why: it wraps
// ErrUnavailable and the client's error.
type unavailableError struct {
	what string
	err  error
}

func (e *unavailableError) Error() string {
	return "walq/jetstream: " + e.what + ": JetStream unavailable: " + e.err.Error()
}
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// closedError says that what could not be done because the Dir's NATS
// connection is closed: for good, unlike an outage (ErrUnavailable), so
// Get and TryGet return it rather than wait, and Work returns it. It wraps
// walq.ErrClosed and nats.ErrConnectionClosed.
type closedError struct{ what string }

func (e *closedError) Error() string {
	return "walq/jetstream: " + e.what + ": the NATS connection is closed (its reconnects ran out, or it was closed) and does not come back: open the Dir again on a new connection"
}
func (e *closedError) Unwrap() []error { return []error{walq.ErrClosed, nats.ErrConnectionClosed} }

// connected fails fast, with an error wrapping ErrUnavailable, while the
// connection is not up (nats.go buffers what is sent while it reconnects,
// and a request would only time out).
func (d *Dir) connected(what string) error {
	switch st := d.nc.Status(); st {
	case nats.CONNECTED:
		return nil
	case nats.CLOSED:
		return &closedError{what: what}
	default:
		return &unavailableError{what: what, err: fmt.Errorf("the connection is %v", st)}
	}
}

func isUnavailable(err error) bool {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return false // for good: see closedError
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, nats.ErrConnectionDraining) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// ConsumerName is the durable name of the consumer of queue's priority
// level prio.
func ConsumerName(queue string, prio int) string { return consumerName(queue, prio) }
