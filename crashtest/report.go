package crashtest

import (
	"bytes"
	"fmt"
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
//	R <ts> <dlsn> <wall>              queue opened
//	I <n> put|putb [@<q>] <tok>/<span>/<prio>/<key>,...
//	I <n> get|work [@<q>]
//	I <n> ack|nack|dead|extend [@<q>] <tok> <receipt>
//	I <n> redrive|purge [@<q>] <tok>,... <deliveries>,...   the dead letters as listed
//	I <n> compact
//	I <n> open <name>                  OpenQueue; done with the incarnation's ID
//	I <n> pause @<q> <span>            Pause until the child's wall clock + span (0: until Resume)
//	I <n> resume @<q>
//	I <n> delete @<q> force|soft
//	D <n> <ts> <dlsn> [result]         call n returned nil
//	E <n> <reason> [<dlsn>]            call n returned an expected error
//	X <message>                        the child hit an unexpected error
//	V <message>                        the child saw a violation (Work: an item ran twice)
//	S <message>                        the same, while the child was starved (work.go)
//	C <offset>                         the child stepped its wall clock to true time + offset (ns)
//	W <reads> <stalled> <stuck> <ns>   the consumer watch so far (consumers.go): queue reads, those
//	                                   that showed Stats.Stalled, those that showed a consumer stuck,
//	                                   and the longest a queue stayed stuck with nothing changed
//
// ts is the true wall clock in Unix nanoseconds when the call returned and
// dlsn is Stats().DurableLSN read after it: every record of the call is at
// or below dlsn. wall is the child's (stepped) wall clock read just before
// Open: the queue's time starts at or after it. span is the deadline asked
// for, in nanoseconds from the child's wall clock read before the call (0:
// none). A put's result lists, per item, its ID or d<holder> for a
// duplicate key, then w<ns>, the call's true duration, or w? when a clock
// step fell inside the call; a get's is "<tok> <receipt> <attempt>
// <deliveries>". A Work handler reports its delivery as a work call, done
// at once, with the result of a get, and what it returns as the intent of an ack, nack or dead that
// has no completion: Work ends the lease after the handler returns.
//
// @<q> names the queue's incarnation (its ID, as QueueInfo.ID reports it:
// 0 for the default queue, which is also what a line without it means). A
// pause's result is w<ns> or w? as a put's; an open's is the ID of the
// incarnation the handle is on. An E line's reason "deleted" is
// ErrQueueDeleted: the call wrote nothing. A redrive's or purge's
// "notfound" is ErrNotFound (one of the dead letters was taken by another
// call first) and carries dlsn, read after the answer.

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
	kind byte // 'R', 'I', 'D', 'E', 'X', 'V', 'S', 'C', 'W'
	n    uint64
	op   string // I: the call
	// queue is the incarnation a call is made on (I lines with @<id>; 0,
	// the default queue, without).
	queue uint64
	args  []string // I: its arguments; D: the result fields; E: the reason; X, V: the message; W: its figures
	ts    int64    // R, D
	dlsn  uint64   // R, D
	wall  int64    // R: the child's wall clock before Open; C: the new offset
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
	case ev.kind == 'R' && len(f) == 4:
		ev.ts, ev.dlsn = int64(num(f[1])), num(f[2])
		ev.wall, err = strconv.ParseInt(f[3], 10, 64)
	case ev.kind == 'C' && len(f) == 2:
		ev.wall, err = strconv.ParseInt(f[1], 10, 64)
	case ev.kind == 'I' && len(f) >= 3:
		ev.n, ev.op, ev.args = num(f[1]), f[2], f[3:]
		if len(ev.args) > 0 && strings.HasPrefix(ev.args[0], "@") {
			ev.queue, ev.args = num(ev.args[0][1:]), ev.args[1:]
		}
	case ev.kind == 'D' && len(f) >= 4:
		ev.n, ev.ts, ev.dlsn, ev.args = num(f[1]), int64(num(f[2])), num(f[3]), f[4:]
	case ev.kind == 'E' && (len(f) == 3 || len(f) == 4):
		ev.n, ev.args = num(f[1]), f[2:3]
		if len(f) == 4 {
			ev.dlsn = num(f[3])
		}
	case ev.kind == 'W' && len(f) == 5:
		ev.args = f[1:]
		for _, a := range ev.args {
			num(a)
		}
	case ev.kind == 'X' || ev.kind == 'V' || ev.kind == 'S':
		ev.args = []string{line[min(2, len(line)):]}
	default:
		return ev, fmt.Errorf("malformed")
	}
	return ev, err
}

// randDuration returns a duration in [0, d).
func randDuration(rng *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(d)))
}
