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
else escaped.`,
	flags: func(fs *flag.FlagSet) any {
		o := &deadOpts{}
		fs.BoolVar(&o.body, "body", false, "show whole bodies")
		fs.IntVar(&o.limit, "limit", 0, "list at most `n` dead letters (0: all)")
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "without --body, show at most `n` bytes of each body")
		return o
	},
	run: runDead,
}

type deadOpts struct {
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
	bodyMax := o.bodyMax
	if o.body {
		bodyMax = 0
	}
	total := st.Gauges().Dead
	dead := st.DeadLetters(o.limit)
	w := c.stdout
	switch {
	case total == 0:
		fmt.Fprintf(w, "no dead letters (state at index %d)\n", st.LastLSN())
		return exitOK
	case len(dead) < total:
		fmt.Fprintf(w, "%d dead letters, the oldest %d shown (state at index %d)\n", total, len(dead), st.LastLSN())
	default:
		fmt.Fprintf(w, "%s (state at index %d)\n", plural(total, "dead letter", "dead letters"), st.LastLSN())
	}
	for _, it := range dead {
		fmt.Fprintf(w, "\nitem %d: dead since %s after %s (%s in all)\n", it.ID, fmtTime(it.EndedAt),
			plural(int(it.Attempts), "attempt", "attempts"), plural(int(it.Deliveries), "delivery", "deliveries"))
		fmt.Fprintf(w, "  last error  %s\n", quote(it.LastError))
		fmt.Fprintf(w, "  enqueued    %s\n", fmtTime(it.EnqueuedAt))
		if it.Key != "" {
			fmt.Fprintf(w, "  key         %s\n", quote(it.Key))
		}
		fmt.Fprintf(w, "  body        %s\n", quoteBody(it.Body, bodyMax))
	}
	return exitOK
}
