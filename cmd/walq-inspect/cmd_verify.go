package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

var verifyCmd = &command{
	name:  "verify",
	args:  "DIR",
	short: "check the marker, every frame and record, the LSN sequence, the snapshots and the state",
	long: `
Checks, without changing anything:

  files     nothing in the directory that walq.Open would refuse: a file
            of a newer walq, or one of walq's names of the wrong type
            (entries that are not walq's are warnings: walq leaves them
            alone; lost+found and dotfiles are not listed)
  format    the format marker WALQ-FORMAT: its version and CRC, and the
            directory ID it holds (a format-2 directory without one is
            corruption; a directory of format 1 has none)
  log       every segment's header, and that it carries the directory's
            ID; every frame's MAC and LSNs; every record's header and body
            CRC; that segments follow each other without gap or overlap
  snapshot  each snapshot file's header, CRC and body, and that it is a
            snapshot of this directory
  state     that the state rebuilds like recovery rebuilds it: the newest
            snapshot that verifies, which the log must reach back to, then
            every record after it, each of which must apply

Every problem is printed with its file, index and offset. The exit status is
0 when none is found and 1 otherwise.

Damage in the log is judged as recovery judges it (the rule at the top of
wal/repair.go), by the watermarks the frames state: the last LSN fsynced
when each was written. Damage at the end of the newest segment that no
frame states promised (above every watermark) is a warning, not a problem:
it is a frame a running queue is writing right now, or a write a crash
tore, which no caller was told was durable; the next open cuts it (keeping
its first 64 KiB in a .broken file), and verify says how many bytes at which
offset, and how many frames after the damage verify. Damage at or below a
watermark, or in a segment older than the newest, is corruption that
recovery refuses; verify names the frame that states the watermark.
Leftover temp files of an interrupted compaction, segment creation or
marker write are harmless too: the next open removes them.

A directory of format 1 (no marker) is verified as format 1 wrote it.

Named queues share the directory's log and snapshots, which are verified
whole whatever --queue says. Once the state rebuilds, each queue's counts
(items, bytes, leases, dead letters) are checked against the items it
holds, and every item against the queue it names; with named queues a
line says which queues there are, and with --queue NAME ("(default)": the
default queue) only that queue is checked and shown.`,
	flags: func(fs *flag.FlagSet) any { return queueFlag(fs) },
	run:   runVerify,
}

func runVerify(c *cmdEnv) int {
	if !c.wantArgs(0) {
		return c.usageErrorf("verify takes one argument, the queue directory")
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	w := c.stdout
	problems, warnings := 0, 0
	seen := make(map[string]bool) // problems already printed, by the text of the error
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label, clean(fmt.Sprintf(format, args...)))
	}
	// problemf prints a problem once; text is how it reads, err what it is.
	problemf := func(label string, err error, format string, args ...any) {
		if !seen[err.Error()] {
			seen[err.Error()] = true
			problems++
			line(label, "PROBLEM: %s", fmt.Sprintf(format, args...))
		}
	}
	problem := func(label string, err error) { problemf(label, err, "%v", err) }

	// Files.
	newer := 0
	for _, f := range qf.Files {
		switch {
		case f.Kind == layout.Reserved:
			newer++
			problem("files", fmt.Errorf("%s: %s", fileName(f.Name), leftoverNote(f.Kind)))
		case f.WrongType:
			problem("files", fmt.Errorf("%s: %s, but walq keeps a %s by that name: walq.Open refuses the directory",
				fileName(f.Name), typeOf(f), f.Kind))
		}
	}
	if problems == 0 {
		line("files", "ok: nothing that walq.Open would refuse")
	}

	// Format.
	switch {
	case qf.Format.Problem != nil:
		problemf("format", qf.Format.Problem, "%v: walq.Open refuses the directory", qf.Format.Problem)
	case qf.Format.Version == wal.FormatVersion:
		line("format", "ok: %s", formatText(qf.Format))
	default:
		line("format", "%s", formatText(qf.Format))
	}
	for _, f := range qf.Files {
		if f.Kind == layout.Foreign {
			warnings++
			line("foreign", "warning: %s: %s; not corruption", fileName(f.Name), leftoverNote(f.Kind))
		}
		if note := qf.leftoverNote(f); note != "" {
			line("leftover", "%s (%s): %s; harmless", fileName(f.Name), fmtSize(f.Size), note)
		}
	}

	// Snapshots are read first: which one recovery takes decides which
	// segments it reads.
	snaps, err := readSnapshots(c.dir, qf.Format.ID)
	if err != nil {
		return c.errorf("%v", err)
	}
	var base *snapshot
	var newestLSN uint64 // of any snapshot file: each says the log reached it
	for i := range snaps {
		newestLSN = max(newestLSN, snaps[i].File.LSN)
		if base == nil && snaps[i].St != nil {
			base = &snaps[i]
		}
	}

	// Log.
	lc, err := checkLog(qf.reader())
	if err != nil {
		return c.errorf("%v", err)
	}
	lc.problems = slices.DeleteFunc(lc.problems, func(ce *wal.CorruptionError) bool {
		if !errors.Is(ce, wal.ErrSegmentGap) || base == nil || ce.Index > base.File.LSN+1 {
			return false
		}
		// The records missing all lie before those the snapshot covers:
		// segments removed by a compaction whose directory fsync failed,
		// some brought back by a crash. Recovery does not read them.
		warnings++
		line("log", "warning: %v: the missing records are all covered by %s, so recovery does not read them (segments a compaction removed, some brought back by a crash); the next open or the compaction after it removes what is left; not corruption",
			ce, base.File.Name)
		return true
	})
	for _, ce := range lc.problems {
		if s := lc.covered(ce, base); s != "" {
			problemf("log", ce, "%v (recovery does not read this segment: %s covers it wholly, and the next open removes it)", ce, s)
			continue
		}
		problemf("log", ce, "recovery would refuse: %v", ce)
	}
	if len(lc.problems) == 0 {
		switch {
		case !qf.HasLog:
			line("log", "ok: no log yet")
		case lc.last < lc.first:
			line("log", "ok: %s, no records yet", plural(lc.segments, "segment", "segments"))
		case qf.format1():
			line("log", "ok: %s of format 1, index %d..%d: framing, CRC and LSN of every record",
				plural(lc.segments, "segment", "segments"), lc.first, lc.last)
		default:
			line("log", "ok: %s, index %d..%d: segment headers and directory ID, frame MACs and LSNs, record headers and body CRCs",
				plural(lc.segments, "segment", "segments"), lc.first, lc.last)
		}
	}
	if t := lc.tail; t != nil {
		if newestLSN > lc.last {
			err := &wal.CorruptionError{Dir: qf.LogDir, File: t.File, Index: lc.last + 1, Offset: t.Offset, Err: errors.New(t.Reason)}
			problemf("tail", err, "recovery would refuse: %d bytes at offset %d of segment %s do not verify (%s), and %s covers index %d: a snapshot is written only once the log is fsynced that far, so the records from %d on were promised durable",
				t.Bytes, t.Offset, t.File, t.Reason, wal.SnapshotName(newestLSN), newestLSN, lc.last+1)
		} else {
			warnings++
			line("tail", "warning: %s; not corruption", tailText(t, lc.last+1, qf.format1()))
		}
	}

	if len(snaps) == 0 {
		line("snapshot", "none")
	}
	for _, s := range snaps {
		if s.St == nil {
			problem("snapshot", s.Err)
			continue
		}
		line("snapshot", "ok: %s covers index %d, %s", s.File.Name, s.File.LSN, plural(s.St.TotalLen(), "item", "items"))
	}

	// State.
	st, r, err := loadState(qf, 0)
	switch {
	case err != nil && !isCorruption(err):
		return c.errorf("%v", err)
	case err != nil && seen[err.Error()]:
		line("state", "not rebuilt: the replay stops at the problem above")
	case err != nil:
		problem("state", err)
	default:
		from := "an empty queue"
		if r.base != nil {
			from = r.base.File.Name
		}
		line("state", "ok: rebuilt to index %d from %s and the %s after it",
			st.LastLSN(), from, plural(int(st.LastLSN()-baseLSN(r)), "record", "records"))
		sel, err := selectQueue(st, *c.opts.(*string))
		if err != nil {
			return c.errorf("%s: %v", c.dir, err)
		}
		sc := scope{st: st, q: sel}
		for _, p := range checkQueues(sc) {
			problemf("queue", errors.New(p), "%s", p)
		}
		if sel != nil || hasNamed(st) {
			var names []string
			for _, q := range sc.queues() {
				names = append(names, fmt.Sprintf("%s (id %d, %s)", queueName(q), q.ID(), plural(q.Len(), "item", "items")))
			}
			line("queues", "%s: %s", plural(len(names), "queue", "queues"), strings.Join(names, ", "))
		}
	}

	switch {
	case newer > 0:
		line("verdict", "not verified: the directory holds %s of a newer walq; use the walq-inspect of the walq that wrote it",
			plural(newer, "file", "files"))
		return exitFailed
	case problems > 0:
		line("verdict", "corruption: %s found", plural(problems, "problem", "problems"))
		return exitFailed
	case warnings > 0:
		line("verdict", "ok: no corruption found (%s)", plural(warnings, "warning", "warnings"))
	default:
		line("verdict", "ok: no corruption found")
	}
	return exitOK
}

// checkQueues checks each queue's counts against the items it holds, and
// every item's queue; it returns what does not agree. The state keeps both
// (the counts are updated on every record), so a disagreement is a bug in
// the state machine or a snapshot that does not hold together.
func checkQueues(sc scope) []string {
	type count struct {
		items, leased, dead int
		bytes               int64
	}
	counts := make(map[uint64]*count)
	for _, q := range sc.st.Queues() {
		counts[q.ID()] = &count{}
	}
	var out []string
	sc.st.Each(func(it *state.Item) {
		n := counts[it.Queue]
		if n == nil {
			out = append(out, fmt.Sprintf("item %d is stored in queue %d, which does not exist", it.ID, it.Queue))
			return
		}
		n.items++
		n.bytes += int64(it.Body.Len)
		switch it.Status {
		case state.Leased:
			n.leased++
		case state.Dead:
			n.dead++
		}
	})
	for _, q := range sc.queues() {
		n := counts[q.ID()]
		g := q.Gauges()
		if n.items != q.Len() || n.bytes != q.Bytes() || n.leased != q.Leased() || n.dead != g.Dead {
			out = append(out, fmt.Sprintf("%s holds %d items of %d B, %d leased and %d dead, but counts %d items of %d B, %d leased and %d dead",
				queueRef(q), n.items, n.bytes, n.leased, n.dead, q.Len(), q.Bytes(), q.Leased(), g.Dead))
		}
	}
	return out
}

func typeOf(f dirFile) string {
	if f.Kind.IsDir() {
		return "not a directory"
	}
	return "a directory"
}

func baseLSN(r *replayer) uint64 {
	if r.base != nil {
		return r.base.File.LSN
	}
	return 0
}

// logCheck is what checkLog found.
type logCheck struct {
	segs        []wal.Segment // the last listing
	segments    int
	first, last uint64
	tail        *wal.TailInfo
	problems    []*wal.CorruptionError
}

// covered returns the name of the snapshot that covers the segment ce is
// in wholly, so that recovery, which replays from the LSN after it, does
// not read the segment; "" when it reads it.
func (lc *logCheck) covered(ce *wal.CorruptionError, base *snapshot) string {
	if base == nil {
		return ""
	}
	for i, s := range lc.segs {
		if s.Name == ce.File && i+1 < len(lc.segs) && lc.segs[i+1].First <= base.File.LSN+1 {
			return base.File.Name
		}
	}
	return ""
}

// checkLog verifies every segment. A scan stops at the first corruption,
// so after one it goes on from the segment after the damaged one (or, for
// damage at the very start of a segment, from that segment itself) to find
// the others.
func checkLog(lr *logReader) (logCheck, error) {
	var lc logCheck
	tried := make(map[uint64]bool) // indexes scanned from
	from, restarts := uint64(0), 0
	tried[from] = true
	for {
		segs, err := lr.segments()
		if errors.Is(err, fs.ErrNotExist) {
			return lc, nil
		}
		if err != nil {
			return lc, err
		}
		lc.segs = segs
		res, err := lr.scan(from, 0, nil)
		if from == 0 || lc.first == 0 {
			lc.segments, lc.first, lc.last, lc.tail = countPlain(segs), res.First, res.Last, res.Tail
		} else {
			lc.last, lc.tail = res.Last, res.Tail
		}
		if errors.Is(err, wal.ErrCompacted) && restarts < maxRestarts {
			restarts++
			from = 0 // problems already found are printed once
			continue
		}
		if err == nil {
			return lc, nil
		}
		var ce *wal.CorruptionError
		if !errors.As(err, &ce) {
			return lc, err
		}
		lc.problems = append(lc.problems, ce)
		next, ok := uint64(0), false
		for i, s := range segs {
			if s.Name != ce.File {
				continue
			}
			switch {
			case ce.Offset == 0 && ce.Index == s.First && !tried[s.First]:
				next, ok = s.First, true // damage at the start: check the segment itself
			case i+1 < len(segs):
				next, ok = segs[i+1].First, true
			}
		}
		if !ok || tried[next] {
			return lc, nil
		}
		tried[next] = true
		from = next
	}
}

func countPlain(segs []wal.Segment) int {
	n := 0
	for _, s := range segs {
		if !s.Leftover {
			n++
		}
	}
	return n
}
