package jetstream

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/walq/walq"
)

// The headers walq writes on every message it publishes. A message without
// HeaderVersion (or with a version this build does not know) was not
// written by walq, and is dead-lettered on receipt with a cause that says
// so.
const (
	// HeaderVersion marks a message walq wrote: "1".
	HeaderVersion = "Walq-V"
	// HeaderID is the item's ID when it is not the message's own stream
	// sequence: on the copy a schedule fires, a redriven dead letter, an
	// item moved from a walq directory.
	HeaderID = "Walq-Id"
	// HeaderKey is the item's idempotency key (also in its Nats-Msg-Id);
	// a key that header handling would change travels as Walq-Key-B64.
	HeaderKey = "Walq-Key"
	// HeaderPut is when the item was put: Unix nanoseconds.
	HeaderPut = "Walq-Put"
	// HeaderDue is when a delayed item is due: Unix nanoseconds. A copy
	// that arrives before it is sent back with the rest of its delay.
	HeaderDue = "Walq-Due"
	// HeaderDeadline is the item's absolute deadline: Unix nanoseconds,
	// checked on receipt (Nats-TTL is relative to store time and does not
	// stop a delivery in progress).
	HeaderDeadline = "Walq-Deadline"
	// HeaderAttemptsBefore counts the attempts an item had before this
	// message (an item moved from a walq directory): Message.Attempt is it
	// plus the server's delivery count.
	HeaderAttemptsBefore = "Walq-Attempts-Before"
	// HeaderDeliveriesBefore counts the deliveries before this message
	// (a redrive, a move).
	HeaderDeliveriesBefore = "Walq-Deliveries-Before"
	// HeaderHistory carries the attempt history of an item that has one
	// (a dead letter, a redriven one, a moved one): JSON.
	HeaderHistory = "Walq-History"

	// Dead letters carry these as well.
	HeaderError    = "Walq-Error"    // the cause: the last error (Walq-Error-B64 when not plain)
	HeaderAttempts = "Walq-Attempts" // attempts in the run that ended in the dead letters
	HeaderDeadAt   = "Walq-Dead-At"  // Unix nanoseconds
	HeaderQueue    = "Walq-Queue"    // the queue it was dead-lettered from
	HeaderPriority = "Walq-Priority" // its priority
	HeaderSeq      = "Walq-Source-Seq"
	// HeaderBodyDropped is the size of a body too large to keep in a dead
	// letter even with its history and cause cut (a message another
	// publisher wrote near the server's max_payload): the dead letter
	// holds no body, and Redrive refuses it.
	HeaderBodyDropped = "Walq-Body-Dropped"

	formatVersion = "1"

	// encodedSuffix names the encoded form of a header that carries a user
	// string (HeaderKey, HeaderError): a value that header handling would
	// change (surrounding spaces or tabs, which are trimmed; CR, LF and
	// other control bytes, which end or break the header) is written as
	// base64 (URL alphabet, no padding) under the name with this suffix,
	// instead of the plain header.
	encodedSuffix = "-B64"
)

// plainSafe says whether v travels unchanged as a header value.
func plainSafe(v string) bool {
	if v == "" || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// setText sets the user string v on h under name: plain when it travels
// unchanged (as every build of the adapter wrote it), encoded otherwise.
func setText(h nats.Header, name, v string) {
	h.Del(name)
	h.Del(name + encodedSuffix)
	switch {
	case v == "":
	case plainSafe(v):
		h.Set(name, v)
	default:
		h.Set(name+encodedSuffix, base64.RawURLEncoding.EncodeToString([]byte(v)))
	}
}

// text reads the user string setText wrote under name.
func text(h nats.Header, name string) string {
	if e := h.Get(name + encodedSuffix); e != "" {
		if b, err := base64.RawURLEncoding.DecodeString(e); err == nil {
			return string(b)
		}
	}
	return h.Get(name)
}

// copyText copies the user string under name from src to dst, as written.
func copyText(dst, src nats.Header, name string) {
	setText(dst, name, text(src, name))
}

// attempt is one entry of an item's history, as JSON.
type attempt struct {
	Start int64  `json:"s,omitempty"` // Unix ns; 0 when not known
	End   int64  `json:"e,omitempty"`
	How   string `json:"h"`
	Error string `json:"x,omitempty"`
}

const (
	historyLen    = 10
	maxErrorBytes = 512
)

func encodeHistory(h []attempt) string {
	if len(h) == 0 {
		return ""
	}
	b, _ := json.Marshal(h)
	return string(b)
}

func decodeHistory(s string) ([]attempt, error) {
	if s == "" {
		return nil, nil
	}
	var h []attempt
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("header %s: %w", HeaderHistory, err)
	}
	return h, nil
}

func trimHistory(h []attempt) []attempt {
	if len(h) > historyLen {
		h = h[len(h)-historyLen:]
	}
	return h
}

func (a attempt) walq() walq.Attempt {
	out := walq.Attempt{How: a.How, Error: a.Error}
	if a.Start != 0 {
		out.Start = time.Unix(0, a.Start)
	}
	if a.End != 0 {
		out.End = time.Unix(0, a.End)
	}
	return out
}

// cutError cuts an error text to maxErrorBytes on a UTF-8 boundary, as
// walq does (setText carries it exactly, newlines and all).
func cutError(s string) string {
	if len(s) > maxErrorBytes {
		i := maxErrorBytes
		for i > 0 && s[i]&0xC0 == 0x80 {
			i--
		}
		s = s[:i]
	}
	return s
}

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// header reads an integer header; ok is false when it is absent.
func intHeader(h nats.Header, name string) (v int64, ok bool, err error) {
	s := h.Get(name)
	if s == "" {
		return 0, false, nil
	}
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("header %s: %q is not an integer", name, s)
	}
	return v, true, nil
}

// ackMeta is what the reply subject of a JetStream delivery says.
type ackMeta struct {
	stream, consumer string
	delivered        uint64 // the server's delivery count: 1 on the first
	sseq, dseq       uint64
	ts               int64 // when the server sent it, Unix ns
}

// parseAck reads the metadata of a delivery from its reply subject:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or
// the form with a domain and an account hash.
func parseAck(reply string) (ackMeta, bool) {
	t := strings.Split(reply, ".")
	if len(t) < 9 || t[0] != "$JS" || t[1] != "ACK" {
		return ackMeta{}, false
	}
	base := 2
	if len(t) >= 11 {
		base = 4
	}
	if len(t) < base+7 {
		return ackMeta{}, false
	}
	num := func(s string) (uint64, bool) {
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil
	}
	var m ackMeta
	var ok1, ok2, ok3, ok4 bool
	m.stream, m.consumer = t[base], t[base+1]
	m.delivered, ok1 = num(t[base+2])
	m.sseq, ok2 = num(t[base+3])
	m.dseq, ok3 = num(t[base+4])
	var ts uint64
	ts, ok4 = num(t[base+5])
	m.ts = int64(ts)
	return m, ok1 && ok2 && ok3 && ok4
}
