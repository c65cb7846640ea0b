package main

import (
	"flag"
	"fmt"
	"math"
	"text/tabwriter"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
)

// The queue's compaction thresholds when Options leave them zero
// (defaultCompactMinBytes and defaultCompactRatio in the root package's
// options.go).
const (
	defaultCompactMinBytes = 64 << 20
	defaultCompactRatio    = 4
)

var spaceCmd = &command{
	name:  "space",
	args:  "DIR",
	short: "bytes on disk by kind, live bytes, and how far off the next compaction is",
	long: `
Prints the bytes on disk by kind of file (segments, snapshots, the format
marker, temp files of interrupted snapshots, segment creations or marker
writes, format-1 files left by an interrupted migration, .broken copies of
cut tails, the reserve file), the live data, and where the log stands
against the
automatic compaction trigger: a compaction runs once the log (the
segments kept in bodies/ counted with it) is at least CompactMinBytes and
more than CompactRatio times the live data. After a compaction the queue
also waits until the log has grown by what that compaction's snapshot
took, which a reader of the directory cannot see: the next one may come
later than said.

The live data is the queue's own estimate of what a snapshot takes (the
bodies of the stored items plus 64 bytes per item), which is what the
trigger compares the log with. The thresholds are options of the process
that runs the queue, so pass them with --min-bytes and --ratio if it does
not use the defaults.

The queues of a directory share its log, snapshots and compaction, so the
figures are the directory's, every queue's items counted. With named
queues each queue's share of the live data follows; --queue NAME shows
that queue's alone ("(default)": the default queue's). The bodies of a
deleted queue stay on disk until compaction reclaims the files that hold
them, as it reclaims any garbage.`,
	flags: func(fs *flag.FlagSet) any {
		o := &spaceOpts{queue: queueFlag(fs)}
		fs.Int64Var(&o.minBytes, "min-bytes", defaultCompactMinBytes, "the queue's Options.CompactMinBytes")
		fs.Float64Var(&o.ratio, "ratio", defaultCompactRatio, "the queue's Options.CompactRatio")
		return o
	},
	run: runSpace,
}

type spaceOpts struct {
	queue    *string
	minBytes int64
	ratio    float64
}

func runSpace(c *cmdEnv) int {
	o := c.opts.(*spaceOpts)
	if !c.wantArgs(0) {
		return c.usageErrorf("space takes one argument, the queue directory")
	}
	if o.minBytes < 0 || o.ratio < 1 {
		return c.usageErrorf("--min-bytes must not be negative and --ratio must be at least 1")
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	c.noteFormat(qf)
	// The files are shown even when the state cannot be rebuilt; a bad
	// --queue is told before anything is printed.
	var st *state.State
	var sel *state.QueueState
	if *o.queue != "" {
		if st, _, err = loadState(qf, 0); err != nil {
			return c.errorf("%v", err)
		}
		if sel, err = selectQueue(st, *o.queue); err != nil {
			return c.errorf("%s: %v", c.dir, err)
		}
	}
	w := c.stdout
	format1Label := "format-1 leftovers"
	if qf.format1() {
		format1Label = "log segments (format 1)"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var total int64
	for _, k := range []struct {
		kind  layout.Kind
		label string
	}{
		{layout.Segment, "log segments"},
		{layout.Kept, "kept segments"},
		{layout.Format1, format1Label},
		{layout.Snapshot, "snapshots"},
		{layout.SnapshotTemp, "snapshot temp files"},
		{layout.SegmentTemp, "segment temp files"},
		{layout.Broken, "broken tails"},
		{layout.Marker, "format marker"},
		{layout.MarkerTmp, "format marker temp"},
		{layout.Reserve, "reserve"},
		{layout.Lock, "lock"},
		{layout.Foreign, "foreign files"},
		{layout.Reserved, "files of a newer walq"},
	} {
		files := qf.of(k.kind)
		always := k.kind == qf.segmentKind() || k.kind == layout.Snapshot
		if len(files) == 0 && !always {
			continue
		}
		n := qf.bytes(k.kind)
		total += n
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k.label, plural(len(files), "file", "files"), fmtBytes(n))
	}
	fmt.Fprintf(tw, "total\t\t%s\n", fmtBytes(total))
	tw.Flush()

	if st == nil {
		if st, _, err = loadState(qf, 0); err != nil {
			return c.errorf("%v", err)
		}
	}
	kept := qf.bytes(layout.Kept)
	logBytes := qf.bytes(qf.segmentKind()) + kept // as the queue counts it
	live := liveBytes(st)
	fmt.Fprintf(w, "\nlive data   ~%s: %s of bodies in %s, plus 64 B per item\n",
		fmtBytes(live), fmtBytes(st.TotalBytes()), plural(st.TotalLen(), "item", "items"))
	if sel != nil || hasNamed(st) {
		for _, q := range (scope{st: st, q: sel}).queues() {
			fmt.Fprintf(w, "  %-9s ~%s: %s of bodies in %s\n", clean(queueName(q)),
				fmtBytes(q.Bytes()+int64(q.Len())*64), fmtBytes(q.Bytes()), plural(q.Len(), "item", "items"))
		}
	}
	if len(qf.of(layout.Snapshot)) > 0 {
		fmt.Fprintf(w, "snapshot    %s as last written\n", fmtBytes(qf.of(layout.Snapshot)[len(qf.of(layout.Snapshot))-1].Size))
	}
	fmt.Fprintf(w, "compaction  runs when the log is at least %s and more than %g x the live data\n",
		fmtBytes(o.minBytes), o.ratio)
	with := ""
	if kept > 0 {
		with = fmt.Sprintf(" (%s of it kept in bodies/)", fmtBytes(kept))
	}
	if live > 0 {
		fmt.Fprintf(w, "log         %s%s, %.2f x the live data\n", fmtBytes(logBytes), with, float64(logBytes)/float64(live))
	} else {
		fmt.Fprintf(w, "log         %s%s\n", fmtBytes(logBytes), with)
	}
	threshold := max(o.minBytes, int64(math.Floor(o.ratio*float64(live)))+1)
	if logBytes >= threshold {
		fmt.Fprintf(w, "next        due now: the log is past both thresholds (the queue starts one on its next append, unless automatic compaction is off or a failed one waits for its retry, 1 s to a minute)\n")
	} else {
		fmt.Fprintf(w, "next        when the log reaches %s: %s to go, at the current live data\n",
			fmtBytes(threshold), fmtBytes(threshold-logBytes))
	}
	return exitOK
}
