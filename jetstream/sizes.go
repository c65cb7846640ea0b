package jetstream

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/walq/walq"
)

// Sizes. The server refuses a message whose headers and body together pass
// its max_payload (1 MiB unless configured), so the adapter counts them
// before it publishes: a Put whose item could not be stored, or could not
// later be dead-lettered (a dead letter carries more headers than the
// item), is refused with walq.ErrTooLarge; a dead letter that cannot carry
// its whole history and cause is cut to fit, and says what was cut.

// headerSize is the size of h as nats.go sends it: the NATS/1.0 line, one
// "Name: value" line per value and the blank line. With the body it counts
// against max_payload.
func headerSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// maxPayload is the largest message, headers and body, the server takes
// (0 when not known: not connected yet).
func (d *Dir) maxPayload() int {
	return int(d.nc.MaxPayload())
}

// cutNoteRoom bounds the note fitDeadLetter appends to a cut cause.
const cutNoteRoom = 160

// causeFloor is the least of the cause a dead letter keeps when it must
// be cut (the whole cause when it is shorter): Put keeps room for it.
const causeFloor = 128

// deadFloor is the least a dead letter of the item with headers item in
// queue takes in headers: every field at its widest, the last attempt
// alone in its history with an error of maxErrorBytes at its widest in
// JSON (6 bytes a byte: '<', '>', '&' and control bytes are written
// \u00XX, a byte that is not UTF-8 \ufffd), and a cause of causeFloor
// bytes with the note that says it was cut, in base64 (as a cause with a
// control byte travels).
func deadFloor(queue string, item nats.Header) int {
	last := []attempt{{Start: math.MinInt64, End: math.MinInt64, How: "deadletter", Error: strings.Repeat("<", maxErrorBytes)}}
	cause := "\x00" + strings.Repeat("x", causeFloor+cutNoteRoom-1)
	h := deadHeader(queue, item, math.MaxUint64, math.MinInt64, math.MaxInt32, math.MaxInt32, math.MaxUint64, last, cause)
	h.Set(HeaderDeadAt, strconv.FormatInt(math.MinInt64, 10))
	return headerSize(h)
}

// tooLarge says whether a body of n bytes stored with headers h (in queue)
// passes the server's limit, counting room for its dead letter; nil when
// it fits.
func (d *Dir) tooLarge(what string, queue string, h nats.Header, n int) error {
	limit := d.maxPayload()
	if limit <= 0 {
		return nil
	}
	need := n + max(headerSize(h), deadFloor(queue, h))
	if need <= limit {
		return nil
	}
	return fmt.Errorf("%w: %s: a body of %d B with its headers, and room for its dead letter's, takes %d B, over the server's max_payload of %d B",
		walq.ErrTooLarge, what, n, need, limit)
}

// fitDeadLetter cuts the dead letter with headers h and a body of n bytes
// to the server's limit: its history from the oldest entry down to the
// last attempt, then its cause down to causeFloor bytes (the cause then
// says what was cut). Room for that much was kept when the item was put
// (deadFloor), so an item Put took keeps its last attempt and the start
// of its cause. Past that (an item stored before sizes were checked, or by
// another publisher) the last attempt goes, then the rest of the cause.
// It is walq.ErrTooLarge when even that does not fit.
func (d *Dir) fitDeadLetter(h nats.Header, n int) error {
	return fitTo(h, n, d.maxPayload())
}

// fitTo is fitDeadLetter under the limit (0: none known).
func fitTo(h nats.Header, n, limit int) error {
	fits := func() bool { return headerSize(h)+n <= limit }
	if limit <= 0 || fits() {
		return nil
	}
	hist, _ := decodeHistory(h.Get(HeaderHistory))
	cause := text(h, HeaderError)
	kept, errKept := hist, len(cause)
	set := func() {
		note := fmt.Sprintf(" [walq/jetstream: cut to the server's max_payload of %d B: history %d of %d entries, cause %d of %d bytes]",
			limit, len(kept), len(hist), errKept, len(cause))
		setText(h, HeaderError, cause[:errKept]+note)
		if s := encodeHistory(kept); s != "" {
			h.Set(HeaderHistory, s)
		} else {
			h.Del(HeaderHistory)
		}
	}
	// cut keeps the longest start of the cause, between lo and hi bytes
	// and on a UTF-8 boundary, that fits; false when lo does not.
	boundary := func(k int) int {
		for k > 0 && k < len(cause) && cause[k]&0xC0 == 0x80 {
			k--
		}
		return k
	}
	cut := func(lo, hi int) bool {
		errKept = boundary(lo)
		set()
		if !fits() {
			return false
		}
		for lo < hi {
			mid := (lo + hi + 1) / 2
			errKept = boundary(mid)
			set()
			if fits() {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		errKept = boundary(lo)
		set()
		return true
	}
	set()
	for len(kept) > 1 && !fits() {
		kept = kept[1:]
		set()
	}
	floor := min(causeFloor, len(cause))
	if fits() || cut(floor, len(cause)) {
		return nil
	}
	kept = nil
	if cut(floor, len(cause)) || cut(0, floor) {
		return nil
	}
	return fmt.Errorf("%w: dead letter of %d B of body: over the server's max_payload of %d B even with its history and cause cut", walq.ErrTooLarge, n, limit)
}
