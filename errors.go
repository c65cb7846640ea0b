package walq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walq/walq/wal"
)

// Errors returned by the queue. Test for them with errors.Is: most are
// returned wrapped, with the detail of what and where.
var (
	// ErrClosed is returned by every call after Close whose arguments
	// pass their checks (a bad or empty argument is answered as it would
	// be before Close), and by a Get that was blocked when Close began.
	ErrClosed = errors.New("walq: queue closed")

	// ErrLeaseLost is returned by Extend, Ack, Nack and DeadLetter when the
	// receipt does not name the item's current lease: the lease ran out (even
	// if the queue has not yet redelivered the item), it was already ended,
	// or the item was redelivered, dead-lettered or redriven since. The work
	// may have been handed to someone else; it is counted as a late ack.
	ErrLeaseLost = errors.New("walq: lease lost")

	// ErrTooLarge is returned by Put for a body over Options.MaxBodySize,
	// and by PutBatch for a batch whose record would pass MaxBatchBytes.
	ErrTooLarge = errors.New("walq: body too large")

	// ErrFull is returned by Put and PutBatch when the items would go
	// beyond the queue's MaxItems or MaxBytes (nothing is stored), and for
	// the items of a RedriveTo that would (in a *BatchError).
	ErrFull = errors.New("walq: queue full")

	// ErrDiskFull is returned, wrapped together with ErrFull, by Put and
	// PutBatch when the disk that holds the directory has less free space
	// than Options.DiskWatermark once the items are counted: nothing is
	// stored, and the queue goes on (leases, acks, nacks and deletes keep
	// the room under the watermark; compaction frees what they end).
	ErrDiskFull = errors.New("walq: disk nearly full")

	// ErrDuplicate is returned by Put with the ID of the item that holds the
	// key (see Options.KeyWindow).
	ErrDuplicate = errors.New("walq: duplicate key")

	// ErrInvalidDeadline is returned by Put for a deadline at or before the
	// time the item would first be due: such an item could never run.
	ErrInvalidDeadline = errors.New("walq: deadline not after the item is due")

	// ErrInvalid is returned for arguments and options that make no sense:
	// negative durations, a zero lease extension, unknown option values, a
	// receipt text that does not parse. Extend, Ack, Nack and DeadLetter
	// return it for a receipt this queue did not issue (the zero Receipt,
	// or one of another directory), and change nothing.
	ErrInvalid = errors.New("walq: invalid argument")

	// ErrNotFound is returned by Redrive, RedriveTo and PurgeDeadLetters for
	// an ID that is not a dead letter of the queue; nothing is changed.
	ErrNotFound = errors.New("walq: no such dead letter")

	// ErrLocked is returned by Open when another Queue, in this process or
	// another, holds the directory.
	ErrLocked = errors.New("walq: directory locked by another queue")

	// ErrNewerFormat is returned by Open, wrapped with the file's path, when
	// the directory holds a name in walq's own naming scheme that this build
	// does not know: a file of a newer walq, which this build must neither
	// ignore nor remove. Nothing is changed on disk; open the directory with
	// the walq that wrote it.
	ErrNewerFormat = wal.ErrNewerFormat

	// ErrNotQueue is returned by Open for a directory that is not empty and
	// holds no walq file (lost+found and dotfiles aside): walq creates a
	// queue only in an empty directory, so that a wrong path never mixes a
	// queue into other data. The error lists what was found. Nothing is
	// created.
	ErrNotQueue = errors.New("walq: not a queue directory, and not empty")

	// ErrCorrupt is returned by Open, wrapped in a *CorruptionError, when the
	// directory holds data that does not verify and cannot be a torn tail.
	// Nothing is changed on disk; see walq-inspect verify.
	ErrCorrupt = wal.ErrCorrupt

	// ErrFailed is returned by every call once a write or fsync of the log
	// has failed, compaction's copies included (a failed snapshot fails
	// only its compaction).
	// The outcome of the calls in flight is unknown (a failed fsync cannot
	// be retried safely); Close and Open again to recover from disk.
	ErrFailed = wal.ErrFailed
)

// CorruptionError says which file of the queue directory is corrupt and
// where. errors.Is(err, ErrCorrupt) holds for it.
type CorruptionError = wal.CorruptionError

// BatchError reports the items of a PutBatch that were not stored, or of a
// RedriveTo that were not moved. Errors has one entry per item: nil for an
// item stored or moved, ErrDuplicate (wrapped) for an item whose key is
// held, and, for RedriveTo, ErrFull (wrapped) for one that would pass the
// target's MaxItems or MaxBytes.
type BatchError struct {
	Errors []error
}

func (e *BatchError) Error() string {
	var parts []string
	for i, err := range e.Errors {
		if err != nil {
			parts = append(parts, fmt.Sprintf("item %d: %v", i, err))
		}
	}
	return "walq: batch: " + strings.Join(parts, "; ")
}

// Unwrap gives errors.Is access to the per-item errors.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errors {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
