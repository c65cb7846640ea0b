package walq

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/walq/walq/wal"
)

// SyncPolicy says when a call's record is durable enough for the call to
// return. The zero value is SyncAlways.
type SyncPolicy = wal.SyncPolicy

var (
	// SyncAlways returns from a call only after its record is fsynced.
	// Concurrent calls share one fsync (group commit). What a call reported
	// done survives kill -9 and power loss.
	SyncAlways = wal.SyncAlways

	// SyncNever returns once the record is written to the operating system:
	// it survives kill -9 of the process but not a power loss or kernel
	// crash, where everything since the last compaction or segment roll may
	// be lost. The log stays consistent either way.
	SyncNever = wal.SyncNever
)

// SyncInterval returns once the record is written to the operating system
// and fsyncs every d: like SyncNever, but a power loss loses at most the
// last d of calls.
func SyncInterval(d time.Duration) SyncPolicy { return wal.SyncInterval(d) }

// Options configure a queue. The zero value is a sane production default;
// each field's default is given in brackets.
type Options struct {
	// Visibility is how long a lease lasts unless extended [30s].
	Visibility time.Duration
	// MaxAttempts is how many leases an item gets before a failure
	// dead-letters it [5].
	MaxAttempts int
	// Backoff gives the wait before attempt+1 after attempt ended in a
	// failure or a lost lease [exponential from 1s, factor 2, capped at 5m,
	// with up to 20% jitter]. It must not return a negative duration.
	Backoff func(attempt int) time.Duration
	// SegmentSize is the size at which a log segment is sealed [4 MiB].
	SegmentSize int64
	// Sync is the durability policy [SyncAlways].
	Sync SyncPolicy
	// KeyWindow is how long a key stays held after its item is acked,
	// discarded or purged [10m].
	KeyWindow time.Duration
	// MaxItems and MaxBytes bound the stored items and the sum of their
	// bodies, dead letters included [0: no bound].
	MaxItems int
	MaxBytes int64
	// MaxInFlight caps the default queue's open leases [0: no cap]; see
	// QueueOptions.MaxInFlight for named queues. MaxItems, MaxBytes and
	// MaxInFlight are the default queue's: each named queue has its own.
	MaxInFlight int
	// MaxBodySize is the largest body Put accepts [1 MiB].
	MaxBodySize int
	// CompactMinBytes is the log size below which compaction does not run
	// by itself [64 MiB]; CompactRatio is how many times the live data the
	// log may grow before it does [4]. DisableAutoCompact leaves compaction
	// to Compact.
	CompactMinBytes    int64
	CompactRatio       float64
	DisableAutoCompact bool
	// DiskWatermark is the free space of the directory's disk below which
	// Put and PutBatch are refused with ErrDiskFull (and ErrFull) instead
	// of growing the log, so that the records that free space (leases,
	// acks, nacks, deletes) and compaction keep room: a full disk then
	// stops the producers, not the queue [16 MiB; -1: no watermark, a put
	// that meets a full disk fails the queue]. Compaction copies bodies
	// forward only while half of it stays free. Where the free space
	// cannot be read (not Unix), there is none.
	DiskWatermark int64
	// BodyCacheBytes bounds the bodies kept in memory after their put
	// until they are delivered, so that an item consumed soon after its
	// put is delivered without a read [16 MiB]; older bodies are read from
	// the log when delivered. -1 keeps none.
	BodyCacheBytes int64
	// FileMode and DirMode are the permissions of the files and directories
	// the queue creates [0600, 0700].
	FileMode os.FileMode
	DirMode  os.FileMode
	// Clock is the source of time [the system clock].
	Clock Clock
	// Logger receives recovery reports, discards and failures [discarded].
	Logger *slog.Logger

	// fs is the seam for the queue's own file operations (fault injection in
	// tests).
	fs wal.FS
	// onCompact, when set, is called after each compaction with its result
	// (tests wait on it instead of sleeping).
	onCompact func(error)
	// onReserve, when set, is called after each refill of the reserve
	// that puts asked the compaction loop for (tests).
	onReserve func()
	// noCloseSnapshot keeps Close from writing a snapshot (tests of
	// replay after a clean close).
	noCloseSnapshot bool
}

const (
	defaultVisibility      = 30 * time.Second
	defaultMaxAttempts     = 5
	defaultSegmentSize     = 4 << 20
	defaultKeyWindow       = 10 * time.Minute
	defaultMaxBodySize     = 1 << 20
	defaultCompactMinBytes = 64 << 20
	defaultCompactRatio    = 4
	defaultBodyCacheBytes  = 16 << 20
	defaultDiskWatermark   = 16 << 20
	minSegmentSize         = 4 << 10

	// MaxDuration bounds every duration the queue adds to the time (delays,
	// leases, extensions, backoffs, the key window), so no time in the log
	// can overflow.
	MaxDuration = 100 * 365 * 24 * time.Hour
)

// DefaultBackoff is the default Options.Backoff: 1s after the first attempt,
// doubling up to 5m, each stretched by a random 0-20% so that items failing
// together do not come back together.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < 5*time.Minute; i++ {
		d *= 2
	}
	d = min(d, 5*time.Minute)
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// withDefaults checks the options and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	bad := func(field string, v any, why string) (Options, error) {
		return o, fmt.Errorf("%w: Options.%s = %v: %s", ErrInvalid, field, v, why)
	}
	switch {
	case o.Visibility < 0 || o.Visibility > MaxDuration:
		return bad("Visibility", o.Visibility, "negative or over MaxDuration")
	case o.MaxAttempts < 0:
		return bad("MaxAttempts", o.MaxAttempts, "negative")
	case o.SegmentSize < 0 || (o.SegmentSize > 0 && o.SegmentSize < minSegmentSize):
		return bad("SegmentSize", o.SegmentSize, fmt.Sprintf("must be 0 or at least %d", minSegmentSize))
	case o.KeyWindow < 0 || o.KeyWindow > MaxDuration:
		return bad("KeyWindow", o.KeyWindow, "negative or over MaxDuration")
	case o.MaxItems < 0:
		return bad("MaxItems", o.MaxItems, "negative")
	case o.MaxBytes < 0:
		return bad("MaxBytes", o.MaxBytes, "negative")
	case o.MaxInFlight < 0:
		return bad("MaxInFlight", o.MaxInFlight, "negative")
	case o.MaxBodySize < 0:
		return bad("MaxBodySize", o.MaxBodySize, "negative")
	case o.CompactMinBytes < 0:
		return bad("CompactMinBytes", o.CompactMinBytes, "negative")
	case o.CompactRatio < 0 || (o.CompactRatio > 0 && o.CompactRatio < 1.5):
		return bad("CompactRatio", o.CompactRatio, "must be 0 or at least 1.5")
	case o.BodyCacheBytes < -1:
		return bad("BodyCacheBytes", o.BodyCacheBytes, "must be -1 (none), 0 (the default) or positive")
	case o.DiskWatermark < -1:
		return bad("DiskWatermark", o.DiskWatermark, "must be -1 (none), 0 (the default) or positive")
	case o.Sync.Check() != nil:
		return bad("Sync", o.Sync, o.Sync.Check().Error())
	}
	if o.BodyCacheBytes == 0 {
		o.BodyCacheBytes = defaultBodyCacheBytes
	}
	if o.DiskWatermark == 0 {
		o.DiskWatermark = defaultDiskWatermark
	}
	if o.Visibility == 0 {
		o.Visibility = defaultVisibility
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = defaultSegmentSize
	}
	if o.KeyWindow == 0 {
		o.KeyWindow = defaultKeyWindow
	}
	if o.MaxBodySize == 0 {
		o.MaxBodySize = defaultMaxBodySize
	}
	if o.CompactMinBytes == 0 {
		o.CompactMinBytes = defaultCompactMinBytes
	}
	if o.CompactRatio == 0 {
		o.CompactRatio = defaultCompactRatio
	}
	if o.FileMode == 0 {
		o.FileMode = 0o600
	}
	if o.DirMode == 0 {
		o.DirMode = 0o700
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.fs == nil {
		o.fs = wal.OSFS()
	}
	return o, nil
}

// PutOption sets a property of one item at Put.
type PutOption func(*Item)

// WithDelay makes the item ready only after d (d >= 0).
func WithDelay(d time.Duration) PutOption { return func(it *Item) { it.Delay = d } }

// WithDeadline discards the item, instead of delivering it, from t on.
func WithDeadline(t time.Time) PutOption { return func(it *Item) { it.Deadline = t } }

// WithPriority orders the item among ready items: smaller first [0].
func WithPriority(p int) PutOption { return func(it *Item) { it.Priority = p } }

// WithKey makes the put idempotent: while the key is held (see
// Options.KeyWindow) another Put with it returns ErrDuplicate and the ID of
// the item that holds it.
func WithKey(k string) PutOption { return func(it *Item) { it.Key = k } }

// Item is one item of a PutBatch; the fields are those of the PutOptions.
type Item struct {
	Body     []byte
	Delay    time.Duration
	Deadline time.Time
	Priority int
	Key      string
}
