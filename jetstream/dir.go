package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
)

// Options configure a Dir: what walq's Options are to a queue directory.
// Each field's default is in brackets.
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
	// queue of the Dir.
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
	opts      Options
	log       *slog.Logger
	apiPrefix string

	work jetstream.Stream
	dlq  jetstream.Stream
	hist jetstream.KeyValue
	// histStream is the bucket's stream, for purges that leave no marker.
	histStream jetstream.Stream
}

// Stream names of a Dir.
func workStream(dir string) string { return "WALQ_" + dir }
func dlqStream(dir string) string  { return "WALQ_" + dir + "_DLQ" }
func histBucket(dir string) string { return "WALQ_" + dir + "_HIST" }

// OpenDir opens the Dir called name on js, creating its streams and bucket
// or updating them to opts. A name is 1 to 64 ASCII letters, digits, '_'
// and '-'.
func OpenDir(ctx context.Context, js jetstream.JetStream, name string, opts Options) (*Dir, error) {
	if err := checkDirName(name); err != nil {
		return nil, err
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas < 0 {
		return nil, fmt.Errorf("%w: Options.Replicas = %d", walq.ErrInvalid, opts.Replicas)
	}
	if opts.KeyWindow == 0 {
		opts.KeyWindow = 2 * time.Minute
	}
	if opts.KeyWindow < 100*time.Millisecond {
		return nil, fmt.Errorf("%w: Options.KeyWindow = %v: JetStream's duplicate window is at least 100ms", walq.ErrInvalid, opts.KeyWindow)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dir{js: js, nc: js.Conn(), name: name, opts: opts, log: opts.Logger, apiPrefix: apiPrefix(js.Options())}
	var err error
	firstSeq := opts.FirstSeq
	if st, err := js.Stream(ctx, workStream(name)); err == nil {
		firstSeq = st.CachedInfo().Config.FirstSeq
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, unavailable("look up the work stream", err)
	}
	d.work, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		FirstSeq:    firstSeq,
		Name:        workStream(name),
		Description: "walq work stream: items by queue and priority, schedules of delayed items",
		Subjects:    []string{"walq." + name + ".>"},
		// WorkQueue: an acked (or terminated) message is removed; the
		// schedules and the ID reservations, which no consumer reads,
		// stay until they fire or expire.
		Retention:         jetstream.WorkQueuePolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          opts.Replicas,
		Duplicates:        opts.KeyWindow,
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
		AllowDirect:       true,
		// For walq-to-jetstream: its progress is one message (rolled up)
		// committed in one atomic batch with the items it moved.
		AllowRollup:        true,
		AllowAtomicPublish: true,
	})
	if err != nil {
		return nil, unavailable("create the work stream", err)
	}
	d.dlq, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        dlqStream(name),
		Description: "walq dead letters: one message per dead item, subject walqdlq.<dir>.<queue>.<id>",
		Subjects:    []string{"walqdlq." + name + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
		// One message per item: a second move of the same item (after a
		// crash between the move and the Term, past the duplicate window)
		// replaces the first.
		MaxMsgsPerSubject: 1,
		Duplicates:        2 * time.Minute,
		AllowDirect:       true,
	})
	if err != nil {
		return nil, unavailable("create the dead-letter stream", err)
	}
	d.hist, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      histBucket(name),
		Description: "walq attempt histories of live items that failed an attempt",
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	})
	if err != nil {
		return nil, unavailable("create the history bucket", err)
	}
	d.histStream, err = js.Stream(ctx, "KV_"+histBucket(name))
	if err != nil {
		return nil, unavailable("open the history bucket's stream", err)
	}
	return d, nil
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
func (d *Dir) dlqSubject(queue string, id uint64) string {
	return fmt.Sprintf("walqdlq.%s.%s.%d", d.name, token(queue), id)
}
func (d *Dir) dlqFilter(queue string) string {
	return "walqdlq." + d.name + "." + token(queue) + ".*"
}
func histKey(queue string, id uint64) string { return fmt.Sprintf("%s.%d", token(queue), id) }

// consumerName is a durable name for a queue's level: consumer names may
// not hold '.', so the queue's name is sanitised and a hash keeps two
// names apart.
func consumerName(queue string, prio int) string {
	h := fnv.New32a()
	h.Write([]byte(queue))
	return fmt.Sprintf("walq_%s_%s_%08x", strings.ReplaceAll(token(queue), ".", "_"), levelToken(prio), h.Sum32())
}

// ErrUnavailable is wrapped by the errors of calls that could not reach
// JetStream: no server answers, a request timed out, the connection is
// closed or reconnecting.
var ErrUnavailable = errors.New("walq/jetstream: JetStream unavailable")

// unavailable wraps err with ErrUnavailable when it says the server could
// not be reached, and says what was being done.
func unavailable(what string, err error) error {
	if err == nil {
		return nil
	}
	var u *unavailableError
	if errors.As(err, &u) {
		return err
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

// connected fails fast, with an error wrapping ErrUnavailable, while the
// connection is not up (nats.go buffers what is sent while it reconnects,
// and a request would only time out).
func (d *Dir) connected(what string) error {
	switch st := d.nc.Status(); st {
	case nats.CONNECTED:
		return nil
	case nats.CLOSED:
		return &unavailableError{what: what, err: nats.ErrConnectionClosed}
	default:
		return &unavailableError{what: what, err: fmt.Errorf("the connection is %v", st)}
	}
}

func isUnavailable(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, nats.ErrConnectionDraining) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// ConsumerName is the durable name of the consumer of queue's priority
// level prio.
func ConsumerName(queue string, prio int) string { return consumerName(queue, prio) }
