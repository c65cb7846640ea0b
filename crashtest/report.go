package crashtest

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The child tells the parent what it did in a report file, one line per
// event, each written with a single write(2) on an O_APPEND file. A line is
// written before a call starts (intent) and after it returned (done or
// error), never buffered, so after a kill the file holds every intent of a
// call that may have reached the queue and every completion the child saw.
// The report is the child's testimony, not the queue: it lives outside the
// queue directory and power-loss simulation never touches it. The last line
// may be torn by the kill; the parser drops a line without its newline.
//
//	R <ts> <dlsn>                     queue opened
//	I <n> put|putb <tok>/<deadline>/<prio>/<key>,...
//	I <n> get
//	I <n> ack|nack|dead|extend <tok> <receipt>
//	I <n> redrive|purge <tok>,...
//	I <n> compact
//	D <n> <ts> <dlsn> [result]         call n returned nil
//	E <n> <reason>                     call n returned an expected error
//	X <message>                        the child hit an unexpected error
//
// ts is the wall clock in Unix nanoseconds when the call returned and dlsn
// is Stats().DurableLSN read after it: every record of the call is at or
// below dlsn. A put's result lists, per item, its ID or d<holder> for a
// duplicate key; a get's is "<tok> <receipt> <attempt> <deliveries>".

type reportWriter struct {
	mu sync.Mutex
	f  *os.File
	b  []byte
}

func openReport(path string) (*reportWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &reportWriter{f: f}, nil
}

// line writes one line with one write call.
func (w *reportWriter) line(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = fmt.Appendf(w.b[:0], format, args...)
	w.b = append(w.b, '\n')
	if _, err := w.f.Write(w.b); err != nil {
		fmt.Fprintf(os.Stderr, "crashtest child: report: %v\n", err)
		os.Exit(4)
	}
}

// event is one parsed report line.
type event struct {
	kind byte // 'R', 'I', 'D', 'E', 'X'
	n    uint64
	op   string   // I: the call
	args []string // I: its arguments; D: the result fields; E: the reason; X: the message
	ts   int64    // R, D
	dlsn uint64   // R, D
}

func parseReport(data []byte) ([]event, error) {
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1] // a line torn by the kill
	}
	var events []event
	for lineNo, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		ev, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("report line %d %q: %w", lineNo+1, line, err)
		}
		events = append(events, ev)
	}
	return events, nil
}

func parseLine(line string) (event, error) {
	f := strings.Fields(line)
	ev := event{kind: line[0]}
	var err error
	num := func(s string) uint64 {
		v, e := strconv.ParseUint(s, 10, 64)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	switch {
	case ev.kind == 'R' && len(f) == 3:
		ev.ts, ev.dlsn = int64(num(f[1])), num(f[2])
	case ev.kind == 'I' && len(f) >= 3:
		ev.n, ev.op, ev.args = num(f[1]), f[2], f[3:]
	case ev.kind == 'D' && len(f) >= 4:
		ev.n, ev.ts, ev.dlsn, ev.args = num(f[1]), int64(num(f[2])), num(f[3]), f[4:]
	case ev.kind == 'E' && len(f) == 3:
		ev.n, ev.args = num(f[1]), f[2:]
	case ev.kind == 'X':
		ev.args = []string{strings.TrimPrefix(line, "X ")}
	default:
		return ev, fmt.Errorf("malformed")
	}
	return ev, err
}

// Bodies are "walq-crashtest <token> " and a filler whose length and bytes
// follow from the token, so the parent can check every byte of every body
// it finds without having been told it.
const bodyPrefix = "walq-crashtest "

func bodyOf(token string) []byte {
	h := fnv.New64a()
	h.Write([]byte(token))
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	b := make([]byte, 0, len(bodyPrefix)+len(token)+1+200)
	b = append(b, bodyPrefix...)
	b = append(b, token...)
	b = append(b, ' ')
	for n := rng.IntN(200); n > 0; n-- {
		b = append(b, byte('a'+rng.IntN(26)))
	}
	return b
}

// tokenOf returns the token of a body, or "" when it is not a harness body.
func tokenOf(body []byte) string {
	rest, ok := bytes.CutPrefix(body, []byte(bodyPrefix))
	if !ok {
		return ""
	}
	tok, _, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return ""
	}
	return string(tok)
}

// randDuration returns a duration in [0, d).
func randDuration(rng *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(d)))
}
