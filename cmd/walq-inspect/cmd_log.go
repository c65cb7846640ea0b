package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

var logCmd = &command{
	name:  "log",
	args:  "DIR",
	short: "the records (or --frames, the frames) in order, as text or JSON lines; --follow keeps printing",
	long: `
Prints the log's records in order, one per line under a header: the LSN
(the record's index), time, type, where the record is, and what it does
(item IDs, attempt, lease end, cause, outcome). Where it is: QUEUE, the
queue it belongs to (see below); SEGMENT, the segment file by the first
LSN its name gives (12 is log/00000000000000000012.seg); FRAME, the
offset in that segment of the frame (the commit batch) that holds the
record; BODY, the offset of the record's body. In a format-1 log FRAME and BODY are both the offset of the
record's entry. Times inside a line are relative to the record's own time.

QUEUE is 0 for the default queue; a named queue is shown by its name (by
its ID when the replay cannot tell its name: a queue created before the
oldest record read that is in no snapshot). A create-queue record is a
record of the directory (its queue field is 0) and is shown with the queue
it creates, whose ID is the record's LSN; a name deleted and created again
is a new incarnation, with a new ID. Only one incarnation of a name exists
at any point of the log, so the name tells which one a record acts on.
--queue NAME prints only the records that act on a queue of that name,
every incarnation of it: its creation, its records, and moves into it
("(default)": the default queue's records and moves into it).

Item IDs are worked out by replaying the log. A record before the newest
snapshot whose lease record was compacted away shows "item ?" (and, in JSON,
no "item").

--json prints one JSON object per record, bodies in full: "body" when the body
is UTF-8 text, "body_base64" otherwise, and always "body_len"; "queue",
"segment", "frame" and "offset" (the body's) say where it is; "queue" is the
queue field of the record's header (0 for a create-queue record) and
"queue_name" the name of the queue it acts on.

--frames prints the frames instead, one per line: segment, offset, size,
the LSNs of its records and its watermark, the last LSN that was fsynced
when the frame was written. Recovery judges damage by the watermarks: a
record at or below one that a frame on disk states was promised durable,
and damage to it is corruption; damage above every watermark at the end of
the newest segment is cut. With --from and --to, the frames that hold
records in that range. A format-1 log has no frames.

--follow keeps printing records (or frames) as the queue appends them, until
interrupted or until --to is printed. A compaction that removes records
before they are read is reported on stderr, and printing goes on from the
new start. Bytes at the end of the log that recovery would cut are noted on
stderr, without --follow (with it they are the next frame being written).`,
	flags: func(fs *flag.FlagSet) any {
		o := &logOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON lines")
		fs.Uint64Var(&o.from, "from", 0, "first `index` to print (0: the start of the log)")
		fs.Uint64Var(&o.to, "to", 0, "last `index` to print (0: the end of the log)")
		fs.StringVar(&o.types, "type", "", "print only records of these `types`, comma-separated: "+
			strings.Join(typeNames(), ","))
		fs.Uint64Var(&o.item, "item", 0, "print only records that change item `ID`")
		fs.BoolVar(&o.frames, "frames", false, "print the frames (LSNs, watermark, size, offset) instead of the records")
		fs.BoolVar(&o.follow, "follow", false, "keep printing records as they are appended")
		fs.DurationVar(&o.interval, "interval", 250*time.Millisecond, "how often --follow looks for new records")
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "show at most `n` bytes of each body in text output (0: all)")
		o.queue = queueFlag(fs)
		return o
	},
	run: runLog,
}

type logOpts struct {
	json           bool
	from, to, item uint64
	types          string
	frames, follow bool
	interval       time.Duration
	bodyMax        int
	queue          *string
}

// queueMatch reports whether a record acts on a queue called name (see
// --queue).
func queueMatch(ev *event, name string) bool {
	m, isMove := ev.Rec.(*state.Move)
	if name == defaultQueueName {
		return ev.queueID() == state.DefaultQueue || isMove && m.Target == state.DefaultQueue
	}
	return ev.queueID() != state.DefaultQueue && ev.QueueKnown && ev.QueueName == name ||
		isMove && ev.TargetKnown && ev.TargetName == name
}

// checkLogQueue fails when no queue of the name --queue gives was seen by
// the replay: none in the snapshots, none created in the records read.
func checkLogQueue(r *replayer, name string) error {
	if name == "" || name == defaultQueueName {
		return nil
	}
	for _, n := range r.qnames {
		if n == name {
			return nil
		}
	}
	if r.st != nil {
		_, err := selectQueue(r.st, name)
		return err
	}
	names := []string{defaultQueueName}
	for _, n := range r.qnames {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names[1:])
	return fmt.Errorf("no queue %s in the snapshots or the records read; the queues seen are %s", quote(name), strings.Join(names, ", "))
}

func typeNames() []string {
	var names []string
	for t := byte(1); state.TypeByName(state.TypeName(t)) == t; t++ {
		names = append(names, state.TypeName(t))
	}
	return names
}

func runLog(c *cmdEnv) int {
	o := c.opts.(*logOpts)
	if !c.wantArgs(0) {
		return c.usageErrorf("log takes one argument, the queue directory")
	}
	if o.to != 0 && o.from > o.to {
		return c.usageErrorf("--from %d is after --to %d", o.from, o.to)
	}
	if o.interval <= 0 {
		return c.usageErrorf("--interval must be positive")
	}
	var types map[byte]bool
	if o.types != "" {
		types = make(map[byte]bool)
		for _, name := range strings.Split(o.types, ",") {
			t := state.TypeByName(strings.TrimSpace(name))
			if t == 0 {
				return c.usageErrorf("unknown record type %s; the types are %s", quote(name), strings.Join(typeNames(), ", "))
			}
			types[t] = true
		}
	}
	if o.frames && (types != nil || o.item != 0 || *o.queue != "") {
		return c.usageErrorf("--frames lists frames, whatever their records: it takes none of --type, --item and --queue")
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	if o.frames && qf.format1() {
		return c.errorf("%s is of format 1, which has no frames: each record is an entry of its own (\"walq-inspect log\" shows their offsets)", c.dir)
	}
	c.noteFormat(qf)

	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	unattributed := 0
	headed := false
	visit := func(ev *event) error {
		if types != nil && !types[ev.Type] {
			return nil
		}
		if *o.queue != "" && !queueMatch(ev, *o.queue) {
			return nil
		}
		if o.item != 0 && !ev.touches(o.item) {
			if !ev.IDsKnown {
				unattributed++
			}
			return nil
		}
		if o.json {
			return enc.Encode(newJSONEvent(ev))
		}
		if !headed {
			headed = true
			if _, err := fmt.Fprintln(c.stdout, logHeader); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintln(c.stdout, formatLogLine(ev, o.bodyMax))
		return err
	}
	var frames *frameLister
	if o.frames {
		frames = &frameLister{fr: frameReader{dir: qf.LogDir}, json: enc, out: c.stdout, text: !o.json}
		defer frames.fr.close()
		visit = frames.visit
	}
	r := newReplayer(qf, o.from, o.to, visit)

	err = r.run()
	if o.from != 0 && o.from < r.logFirst {
		c.notef("records before index %d were compacted away; printing from there", r.logFirst)
	}
	if err != nil {
		return c.errorf("%v", err)
	}
	if err := checkLogQueue(r, *o.queue); err != nil {
		return c.errorf("%s: %v", c.dir, err)
	}
	var stErr error
	report := func() {
		for _, n := range r.notes {
			c.notef("%s", n)
		}
		r.notes = nil
		if r.stErr != nil && stErr == nil {
			stErr = r.stErr
			c.notef("item IDs could not all be worked out, the state does not rebuild: %v", stErr)
		}
		if unattributed > 0 {
			c.notef("%d records before the snapshot could not be tied to an item and may be item %d's", unattributed, o.item)
			unattributed = 0
		}
	}
	report()
	if !o.follow {
		if t := r.scan.Tail; t != nil {
			c.notef("tail: %s", tailText(t, r.scan.Last+1, qf.format1()))
		}
		return exitOK
	}

	// Follow: look at the segment files every interval and read on when they
	// changed. The tail is not reported: it is the next record being written.
	sig := ""
	for o.to == 0 || r.next <= o.to {
		if err := c.stdout.Flush(); err != nil {
			return exitFailed // the reader went away
		}
		time.Sleep(o.interval)
		now, err := segmentsSignature(qf.reader())
		if err != nil {
			return c.errorf("%v", err)
		}
		if now == sig {
			continue
		}
		sig = now
		if err := r.run(); err != nil {
			return c.errorf("%v", err)
		}
		report()
	}
	return exitOK
}

// segmentsSignature changes whenever a segment is added, removed or grows.
func segmentsSignature(lr *logReader) (string, error) {
	segs, err := lr.segments()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, "%s:%d;", s.Name, s.Size)
	}
	return b.String(), nil
}

// tailText describes the bytes at the end of the newest segment that
// recovery cuts (wal/repair.go); first is the LSN the cut starts at.
func tailText(t *wal.TailInfo, first uint64, format1 bool) string {
	if format1 {
		return fmt.Sprintf("the next open would leave out %d bytes at offset %d of segment %s (no valid record follows them): %s: a record being written, or a write torn by a crash",
			t.Bytes, t.Offset, t.File, t.Reason)
	}
	mark := fmt.Sprintf("above the highest watermark stated, %d", t.Watermark)
	if t.Watermark == 0 {
		mark = "and no frame states any record fsynced"
	}
	return fmt.Sprintf("recovery would cut %d bytes at offset %d of segment %s (no frame states them promised; %s verify): %s; the cut starts at index %d, %s: a frame being written, or a write torn by a crash",
		t.Bytes, t.Offset, t.File, plural(t.Later, "later frame", "later frames"), t.Reason, first, mark)
}

// frameLister prints each frame once, when the replay visits its first
// record.
type frameLister struct {
	fr   frameReader
	json *json.Encoder
	out  io.Writer
	text bool

	headed bool
	last   struct {
		segment string
		offset  int64
	}
}

// framesLine is the layout of a line of --frames' text output.
const framesLine = "%-24s  %9v  %8v  %-15v  %7v  %9v\n"

// framesHeader heads --frames' text output.
var framesHeader = fmt.Sprintf(framesLine, "SEGMENT", "OFFSET", "SIZE", "LSN", "RECORDS", "WATERMARK")

type jsonFrame struct {
	Segment   string `json:"segment"`
	Offset    int64  `json:"offset"`
	Size      int64  `json:"size"`
	First     uint64 `json:"first"`
	Last      uint64 `json:"last"`
	Records   uint32 `json:"records"`
	Watermark uint64 `json:"watermark"`
}

func (l *frameLister) visit(ev *event) error {
	if ev.Pos.File == l.last.segment && ev.Pos.Frame == l.last.offset {
		return nil
	}
	fi, err := l.fr.header(ev.Pos)
	if err != nil {
		return err
	}
	l.last.segment, l.last.offset = ev.Pos.File, ev.Pos.Frame
	if !l.text {
		return l.json.Encode(jsonFrame{Segment: fi.Segment, Offset: fi.Offset, Size: fi.Size, First: fi.First,
			Last: fi.last(), Records: fi.Records, Watermark: fi.Watermark})
	}
	if !l.headed {
		l.headed = true
		if _, err := io.WriteString(l.out, framesHeader); err != nil {
			return err
		}
	}
	lsns := fmt.Sprintf("%d..%d", fi.First, fi.last())
	if fi.Records == 1 {
		lsns = fmt.Sprintf("%d", fi.First)
	}
	_, err = fmt.Fprintf(l.out, framesLine, fileName(fi.Segment), fi.Offset, fi.Size, lsns, fi.Records, fi.Watermark)
	return err
}
