package walq

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Receipt names one delivery of an item: the identity of the queue
// directory that made it, the queue in that directory, and the LSN of the
// lease record. An LSN is never reused within a directory, so a receipt from
// an earlier delivery can never end a later one; the directory identity
// means a receipt can never act in another directory, where the same LSN
// names a different lease. A call with a receipt that another directory or
// queue issued returns ErrInvalid and changes nothing.
//
// A Receipt is opaque and comparable. The zero Receipt names no delivery.
// Its text form (String, MarshalText, ParseReceipt) lets a receipt travel to
// another process and come back:
//
//	<directory: 32 hex digits>-<queue: hex>-<lease LSN: hex>
//
// in lowercase, without leading zeros in the last two fields, for example
// 9f86d081884c7d659a2feaa0c55ad015-0-1c. The zero Receipt's text is empty.
type Receipt struct {
	dir   wal.DirID
	queue uint64 // the queue's incarnation ID (0: the directory's default queue)
	lease uint64 // LSN of the lease record; never 0 in a receipt a queue issued
}

// receiptFor is the receipt of the lease whose record has LSN lease.
func (q *Queue) receiptFor(lease uint64) Receipt {
	return Receipt{dir: q.dirID, queue: q.rt.id, lease: lease}
}

// checkReceipt refuses, with ErrInvalid, a receipt this queue did not
// issue: the zero Receipt, or one of another directory or another queue.
// It reads only what Open set, so it needs no lock.
func (q *Queue) checkReceipt(r Receipt, call string) error {
	return q.checkReceiptThen(r, call, func() error {
		q.mu.Lock()
		return q.answerLocked(q.otherQueueLocked(r, call)) // a delete not durable yet, say
	})
}

// checkReceiptLocked is checkReceipt for a caller that holds mu.
func (q *Queue) checkReceiptLocked(r Receipt, call string) error {
	return q.checkReceiptThen(r, call, func() error { return q.otherQueueLocked(r, call) })
}

func (q *Queue) checkReceiptThen(r Receipt, call string, other func() error) error {
	switch {
	case r == Receipt{}:
		return fmt.Errorf("%w: %s with the zero Receipt, which names no delivery", ErrInvalid, call)
	case r.dir != q.dirID:
		return fmt.Errorf("%w: %s with receipt %s: it belongs to queue directory %s, this queue's directory is %s",
			ErrInvalid, call, r, r.dir, q.dirID)
	case r.queue != q.rt.id:
		return other()
	case r.lease == 0:
		return fmt.Errorf("%w: %s with receipt %s: it names no lease", ErrInvalid, call, r)
	}
	return nil
}

// otherQueueLocked is the error for a receipt of this directory and
// another queue: ErrInvalid, and also ErrQueueDeleted when that queue is
// no longer there (an earlier incarnation of this queue's name, say: its
// leases ended with it).
func (q *Queue) otherQueueLocked(r Receipt, call string) error {
	if r.queue != state.DefaultQueue && r.queue > q.log.LastLSN() {
		// A queue's number is the LSN of the record that created it.
		return fmt.Errorf("%w: %s with receipt %s: it names queue %d, which this directory never had (its log ends at LSN %d)",
			ErrInvalid, call, r, r.queue, q.log.LastLSN())
	}
	if r.queue != state.DefaultQueue && q.st.Queue(r.queue) == nil {
		return fmt.Errorf("%w (%w): %s with receipt %s: it belongs to queue incarnation %d of this directory, which is deleted (this is %s)",
			ErrQueueDeleted, ErrInvalid, call, r, r.queue, q.rt.label())
	}
	return fmt.Errorf("%w: %s with receipt %s: it belongs to queue %d of this directory, this is %s",
		ErrInvalid, call, r, r.queue, q.rt.label())
}

// IsZero reports whether r is the zero Receipt.
func (r Receipt) IsZero() bool { return r == Receipt{} }

// String returns the text form of r; for the zero Receipt, "invalid receipt".
func (r Receipt) String() string {
	if r.IsZero() {
		return "invalid receipt"
	}
	b, _ := r.AppendText(make([]byte, 0, receiptTextMax))
	return string(b)
}

// receiptTextMax is the longest text form: 32 hex digits, two dashes and
// two uint64s in hex.
const receiptTextMax = 2*len(wal.DirID{}) + 1 + 16 + 1 + 16

// AppendText appends the text form of r to b (nothing for the zero
// Receipt). It never fails.
func (r Receipt) AppendText(b []byte) ([]byte, error) {
	if r.IsZero() {
		return b, nil
	}
	b = hex.AppendEncode(b, r.dir[:])
	b = append(b, '-')
	b = strconv.AppendUint(b, r.queue, 16)
	b = append(b, '-')
	return strconv.AppendUint(b, r.lease, 16), nil
}

// MarshalText returns the text form of r (empty for the zero Receipt). It
// never fails.
func (r Receipt) MarshalText() ([]byte, error) {
	return r.AppendText(nil)
}

// UnmarshalText sets r from its text form, as ParseReceipt does, except
// that empty text sets the zero Receipt (the text MarshalText gives it). On
// an error r is left as it was.
func (r *Receipt) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*r = Receipt{}
		return nil
	}
	p, err := ParseReceipt(string(text))
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// ParseReceipt parses the text form of a receipt, strictly: exactly the form
// String returns, so a receipt has one text form. Empty text is an error.
// An error wraps ErrInvalid and says what is wrong. A receipt that parses
// may still be refused by the queue, if another directory issued it.
func ParseReceipt(s string) (Receipt, error) {
	bad := func(format string, args ...any) (Receipt, error) {
		shown := s
		if len(shown) > 2*receiptTextMax {
			shown = shown[:2*receiptTextMax] + "…"
		}
		return Receipt{}, fmt.Errorf("%w: receipt %q: %s", ErrInvalid, shown, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return bad("empty")
	}
	dir, rest, ok1 := strings.Cut(s, "-")
	queue, lease, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 {
		return bad("want three fields separated by '-': <directory: 32 hex digits>-<queue: hex>-<lease: hex>")
	}
	var r Receipt
	if len(dir) != 2*len(r.dir) {
		return bad("directory field has %d characters, want %d hex digits", len(dir), 2*len(r.dir))
	}
	if i := notLowerHex(dir); i >= 0 {
		return bad("directory field: %q at offset %d is not a lowercase hex digit", dir[i], i)
	}
	if _, err := hex.Decode(r.dir[:], []byte(dir)); err != nil {
		return bad("directory field: %v", err) // unreachable: checked above
	}
	var err error
	if r.queue, err = parseReceiptField(queue); err != nil {
		return bad("queue field: %v", err)
	}
	if r.lease, err = parseReceiptField(lease); err != nil {
		return bad("lease field: %v", err)
	}
	if r.lease == 0 {
		return bad("lease field is 0: no lease record has LSN 0")
	}
	return r, nil
}

// parseReceiptField parses one number of a receipt's text form: 1 to 16
// lowercase hex digits, without leading zeros.
func parseReceiptField(s string) (uint64, error) {
	switch {
	case s == "":
		return 0, fmt.Errorf("empty")
	case len(s) > 16:
		return 0, fmt.Errorf("%d hex digits, at most 16", len(s))
	case len(s) > 1 && s[0] == '0':
		return 0, fmt.Errorf("leading zero")
	}
	if i := notLowerHex(s); i >= 0 {
		return 0, fmt.Errorf("%q at offset %d is not a lowercase hex digit", s[i], i)
	}
	return strconv.ParseUint(s, 16, 64) // cannot fail: at most 16 hex digits
}

// notLowerHex returns the offset of the first byte of s that is not a
// lowercase hex digit, or -1.
func notLowerHex(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return i
		}
	}
	return -1
}
