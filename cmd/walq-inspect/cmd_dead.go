package main

import (
	"flag"
	"fmt"
)

var deadCmd = &command{
	name:  "dead",
	args:  "DIR",
	short: "dead letters with attempts, last error, time and body",
	long: `
Lists the dead letters, oldest first: each with its attempts and deliveries,
when it died, its last error, its key and a preview of its body (--body for
all of it). Bodies and errors are quoted: printable text as is, anything
else escaped.

Named queues: without --queue, the dead letters of every queue, merged by
the time they died, each naming its queue when the directory has named
queues; with --queue NAME those of that queue alone ("(default)": the
default queue's). "walq-inspect item" shows a dead letter's attempts.`,
	flags: func(fs *flag.FlagSet) any {
		o := &deadOpts{queue: queueFlag(fs)}
		fs.BoolVar(&o.body, "body", false, "show whole bodies")
		fs.IntVar(&o.limit, "limit", 0, "list at most `n` dead letters (0: all)")
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "without --body, show at most `n` bytes of each body")
		return o
	},
	run: runDead,
}

type deadOpts struct {
	queue          *string
	body           bool
	limit, bodyMax int
}

func runDead(c *cmdEnv) int {
	o := c.opts.(*deadOpts)
	if !c.wantArgs(0) {
		return c.usageErrorf("dead takes one argument, the queue directory")
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	c.noteFormat(qf)
	st, _, err := loadState(qf, 0)
	if err != nil {
		return c.errorf("%v", err)
	}
	sel, err := selectQueue(st, *o.queue)
	if err != nil {
		return c.errorf("%s: %v", c.dir, err)
	}
	sc := scope{st: st, q: sel}
	bodyMax := o.bodyMax
	if o.body {
		bodyMax = 0
	}
	total := sc.dead()
	dead := sc.deadLetters(o.limit)
	w := c.stdout
	of := ""
	if sel != nil {
		of = " of " + queueRef(sel)
	}
	switch {
	case total == 0:
		fmt.Fprintf(w, "no dead letters%s (state at index %d)\n", of, st.LastLSN())
		return exitOK
	case len(dead) < total:
		fmt.Fprintf(w, "%d dead letters%s, the oldest %d shown (state at index %d)\n", total, of, len(dead), st.LastLSN())
	default:
		fmt.Fprintf(w, "%s%s (state at index %d)\n", plural(total, "dead letter", "dead letters"), of, st.LastLSN())
	}
	for _, it := range dead {
		fmt.Fprintf(w, "\nitem %d%s: dead since %s after %s (%s in all)\n", it.ID, sc.inQueue(&it), fmtTime(it.EndedAt()),
			plural(int(it.Attempts), "attempt", "attempts"), plural(int(it.Deliveries), "delivery", "deliveries"))
		fmt.Fprintf(w, "  last error  %s\n", quote(it.LastError()))
		fmt.Fprintf(w, "  enqueued    %s\n", fmtTime(it.EnqueuedAt))
		if it.Key() != "" {
			fmt.Fprintf(w, "  key         %s\n", quote(it.Key()))
		}
		fmt.Fprintf(w, "  body        %s\n", bodyText(c.dir, st, &it, bodyMax))
	}
	return exitOK
}
