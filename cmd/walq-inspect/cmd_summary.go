package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
)

var summaryCmd = &command{
	name:  "summary",
	args:  "DIR",
	short: "format and directory ID, segments, snapshots, items by state, dead letters, keys, counters (the default)",
	long: `
Prints what is in the queue directory: its format and directory ID (from
the marker file WALQ-FORMAT), the log's segments and index range, bytes at
its end that recovery would cut, the snapshots, leftover files, what earlier
recoveries left behind, the items by state with the oldest ready one, the
next delayed one and the next lease to end, dead letters, idempotency keys,
the counters, and the log's size against the live data.

A directory of format 1 (no marker) is read as format 1 wrote it.

A waiting item counts as ready once its due time has come (as of --now).

Named queues: the figures are of the whole directory, every queue summed,
and a table follows with one line per queue: its name (the default queue
is "(default)"), its incarnation ID (the index of the record that created
it; 0 for the default queue), its items by state, how long its oldest ready
item has been ready, whether it is paused and until when, its leases in
flight against its cap (MaxInFlight), and its recorded options. The default
queue's options are given by code at Open and are not recorded, so they
are not known here. With --queue NAME the figures and the table are of
that queue alone ("(default)" for the default queue); the directory's
files, log and snapshots are shown whatever --queue says. A directory with
only its default queue shows no table unless --queue is given.`,
	flags: func(fs *flag.FlagSet) any {
		return &summaryOpts{now: nowFlag(fs), queue: queueFlag(fs)}
	},
	run: runSummary,
}

type summaryOpts struct {
	now   *timeFlag
	queue *string
}

// recoveryCause is the cause recovery in the root package writes on the
// expire records of leases that were open at a crash.
const recoveryCause = "lease open at recovery"

func runSummary(c *cmdEnv) int {
	o := c.opts.(*summaryOpts)
	if !c.wantArgs(0) {
		return c.usageErrorf("summary takes one argument, the queue directory")
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	// The last recovery that expired leases: a run of expire records with
	// recovery's cause, all at one time.
	var recFirst, recLast uint64
	var recTime int64
	r := newReplayer(qf, 0, 0, func(ev *event) error {
		if e, ok := ev.Rec.(*state.End); ok && e.Kind == state.TypeExpire && e.Cause == recoveryCause {
			if ev.Pos.Index != recLast+1 || e.Time != recTime {
				recFirst, recTime = ev.Pos.Index, e.Time
			}
			recLast = ev.Pos.Index
		}
		return nil
	})
	scanErr := r.run()
	var sel *state.QueueState
	if scanErr == nil {
		if st, err := r.state(); err == nil {
			if sel, err = selectQueue(st, *o.queue); err != nil {
				return c.errorf("%s: %v", c.dir, err)
			}
		}
	}

	w := c.stdout
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label, clean(fmt.Sprintf(format, args...)))
	}
	line("queue", "%s", c.dir)
	failed := false
	if err := qf.Format.Problem; err != nil {
		line("format", "PROBLEM: %v", err)
		failed = true
	} else {
		line("format", "%s", formatText(qf.Format))
	}
	segs := qf.of(qf.segmentKind())
	nsegs := 0
	for _, f := range segs {
		if !truncationLeftover(f.Name) {
			nsegs++
		}
	}
	segments := fmt.Sprintf("%s, %s", plural(nsegs, "segment", "segments"), fmtSize(qf.bytes(qf.segmentKind())))
	switch first, last := r.logFirst, r.scan.Last; {
	case !qf.HasLog:
		line("log", "none yet")
	case scanErr != nil:
		line("log", "%s, from index %d", segments, first)
	case last < first:
		line("log", "%s, no records yet (the next record is index %d)", segments, first)
	default:
		line("log", "%s, index %d..%d (%d records)", segments, first, last, last-first+1)
	}
	if t := r.scan.Tail; t != nil {
		line("tail", "%s", tailText(t, r.scan.Last+1, qf.format1()))
	}
	if len(r.snaps) == 0 {
		line("snapshot", "none")
	}
	for _, s := range r.snaps {
		if s.St == nil {
			line("snapshot", "%s does not verify: %v", s.File.Name, s.Err)
			continue
		}
		line("snapshot", "%s covers index %d, %s", s.File.Name, s.File.LSN, fmtSize(s.File.Size))
	}
	for _, f := range qf.Files {
		switch note := qf.leftoverNote(f); {
		case note == "":
		case f.Kind == layout.Broken:
			line("recovery", "%s (%s): %s", fileName(f.Name), fmtSize(f.Size), note)
		default:
			line("leftover", "%s (%s): %s", fileName(f.Name), fmtSize(f.Size), note)
		}
		switch f.Kind {
		case layout.Foreign:
			line("foreign", "%s (%s): %s", fileName(f.Name), fmtSize(f.Size), leftoverNote(f.Kind))
		case layout.Reserved:
			line("newer", "%s (%s): %s", fileName(f.Name), fmtSize(f.Size), leftoverNote(f.Kind))
		}
	}
	if recLast != 0 {
		line("recovery", "index %d..%d at %s: %s open at a crash ended as expired by the next open",
			recFirst, recLast, fmtTime(recTime), plural(int(recLast-recFirst+1), "lease", "leases"))
	}
	if scanErr != nil {
		line("problem", "%v", scanErr)
		line("", "run \"walq-inspect verify\" for every problem")
		return exitFailed
	}
	st, err := r.state()
	if err != nil {
		line("problem", "the state cannot be rebuilt: %v", err)
		return exitFailed
	}
	sc := scope{st: st, q: sel}
	now := o.now.nowFor(st)
	summarizeState(line, sc, now)
	line("space", "log %s, live data ~%s (\"walq-inspect space\" for more)",
		fmtSize(qf.bytes(qf.segmentKind())), fmtSize(liveBytes(st)))
	if sel != nil || hasNamed(st) {
		fmt.Fprintln(w)
		queuesTable(w, sc, now)
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// summarizeState prints the state part of summary.
func summarizeState(line func(label, format string, args ...any), sc scope, now int64) {
	st := sc.st
	f := factsOf(sc, now)
	if st.LastLSN() == 0 {
		line("state", "empty: no record yet, next item ID %d", st.NextID())
	} else {
		line("state", "index %d at %s, next item ID %d", st.LastLSN(), fmtTime(st.LastTime()), st.NextID())
	}
	switch {
	case sc.q != nil:
		line("scope", "%s alone, from here on", queueRef(sc.q))
	case hasNamed(st):
		line("scope", "every queue, from here on: %s", plural(len(st.Queues()), "queue", "queues"))
	}
	line("items", "%s", f.itemsLine(sc))
	if it := f.oldestReady; it != nil {
		line("ready", "oldest is item %d%s, due %s (%s)", it.ID, sc.inQueue(it), fmtTime(it.Due), ago(it.Due, now))
	}
	if it := f.nextDelayed; it != nil {
		line("delayed", "next is item %d%s, due %s (%s)", it.ID, sc.inQueue(it), fmtTime(it.Due), ago(it.Due, now))
	}
	if it := f.nextLeaseEnd; it != nil {
		line("leased", "next lease to end is item %d's%s, at %s (%s)", it.ID, sc.inQueue(it), fmtTime(it.LeaseEnd), ago(it.LeaseEnd, now))
	}
	if dl := sc.deadLetters(1); len(dl) > 0 {
		it := dl[0]
		line("dead", "oldest is item %d%s, dead since %s after %s: %s", it.ID, sc.inQueue(&it), fmtTime(it.EndedAt()),
			plural(int(it.Attempts), "attempt", "attempts"), quote(it.LastError()))
	}
	line("keys", "%d held: %d by stored items, %d by items gone (within the key window or not yet pruned)",
		f.keysOfStored+f.keysInWindows, f.keysOfStored, f.keysInWindows)
	line("counters", "%s", countersLine(sc.counters()))
}

// queuesTable prints one line per queue of the scope.
func queuesTable(w io.Writer, sc scope, now int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tID\tREADY\tDELAYED\tLEASED\tDEAD\tOLDEST READY\tPAUSED\tIN FLIGHT\tOPTIONS")
	for _, q := range sc.queues() {
		f := factsOf(scope{st: sc.st, q: q}, now)
		oldest := "-"
		if it := f.oldestReady; it != nil {
			oldest = fmtDur(time.Duration(now - it.Due))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", clean(queueName(q)), q.ID(),
			f.byStatus[statusReady], f.byStatus[statusDelayed], f.byStatus[state.Leased.String()],
			f.byStatus[state.Dead.String()], oldest, pausedText(q, now), inFlightText(q), optionsText(q))
	}
	tw.Flush()
}
