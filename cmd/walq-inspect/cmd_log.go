package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

var logCmd = &command{
	name:  "log",
	args:  "DIR",
	short: "the records in order, as text or JSON lines; --follow keeps printing",
	long: `
Prints the log's records in order, one per line: index, time, type, and what
the record does (item IDs, attempt, lease end, cause, outcome). Times inside
a line are relative to the record's own time.

Item IDs are worked out by replaying the log. A record before the newest
snapshot whose lease record was compacted away shows "item ?" (and, in JSON,
no "item").

--json prints one JSON object per record, bodies in full: "body" when the body
is UTF-8 text, "body_base64" otherwise, and always "body_len".

--follow keeps printing records as the queue appends them, until interrupted
or until --to is printed. A compaction that truncates records before they
are read is reported on stderr, and printing goes on from the new start.`,
	flags: func(fs *flag.FlagSet) any {
		o := &logOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON lines")
		fs.Uint64Var(&o.from, "from", 0, "first `index` to print (0: the start of the log)")
		fs.Uint64Var(&o.to, "to", 0, "last `index` to print (0: the end of the log)")
		fs.StringVar(&o.types, "type", "", "print only records of these `types`, comma-separated: "+
			strings.Join(typeNames(), ","))
		fs.Uint64Var(&o.item, "item", 0, "print only records that change item `ID`")
		fs.BoolVar(&o.follow, "follow", false, "keep printing records as they are appended")
		fs.DurationVar(&o.interval, "interval", 250*time.Millisecond, "how often --follow looks for new records")
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "show at most `n` bytes of each body in text output (0: all)")
		return o
	},
	run: runLog,
}

type logOpts struct {
	json           bool
	from, to, item uint64
	types          string
	follow         bool
	interval       time.Duration
	bodyMax        int
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
	if _, err := listQueue(c.dir); err != nil {
		return c.errorf("%v", err)
	}

	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	unattributed := 0
	r := newReplayer(c.dir, o.from, o.to, func(ev *event) error {
		if types != nil && !types[ev.Type] {
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
		_, err := fmt.Fprintln(c.stdout, formatEvent(ev, o.bodyMax))
		return err
	})

	err := r.run()
	if o.from != 0 && o.from < r.logFirst {
		c.notef("records before index %d were compacted away; printing from there", r.logFirst)
	}
	if err != nil {
		return c.errorf("%v", err)
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
			c.notef("incomplete tail: %s", tailText(t))
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
		now, err := segmentsSignature(filepath.Join(c.dir, layout.LogDirName))
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
func segmentsSignature(logDir string) (string, error) {
	segs, _, err := wal.ListSegments(logDir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, "%s:%d;", s.Name, s.Size)
	}
	return b.String(), nil
}

// tailText describes an incomplete tail.
func tailText(t *wal.TailInfo) string {
	return fmt.Sprintf("%d bytes at offset %d of segment %s (%s): a record being written, or a torn write that the next open cuts",
		t.Bytes, t.Offset, t.File, t.Reason)
}
