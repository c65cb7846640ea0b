package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

var verifyCmd = &command{
	name:  "verify",
	args:  "DIR",
	short: "check every record's CRC and framing, the LSN sequence, the snapshots and the state",
	long: `
Checks, without changing anything:

  files     nothing in the directory that walq.Open would refuse: a file
            of a newer walq, or one of walq's names of the wrong type
            (entries that are not walq's are warnings: walq leaves them
            alone; lost+found and dotfiles are not listed)
  log       the framing and CRC of every record in every segment, that each
            record's LSN is its index, and that segments follow each other
            without gap or overlap
  snapshot  each snapshot file's header, CRC and body
  state     that the state rebuilds like recovery rebuilds it: the newest
            snapshot that verifies, which the log must reach back to, then
            every record after it, each of which must apply

Every problem is printed with its file, index and offset. The exit status is
0 when none is found and 1 otherwise.

An incomplete tail (bytes at the end of the last segment that are not a
whole record, with nothing valid after them) is a warning, not a problem:
it is either a record that a running queue is writing right now or the torn
last write of a crash, which no caller was told was durable and which the
next open cuts off (keeping the bytes in a .broken file). Leftover temp
files of an interrupted compaction or truncation are harmless too: the next
open removes or finishes them.`,
	run: runVerify,
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
	seen := make(map[string]bool) // problems already printed, by text
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label, clean(fmt.Sprintf(format, args...)))
	}
	problem := func(label string, err error) {
		if !seen[err.Error()] {
			seen[err.Error()] = true
			problems++
			line(label, "PROBLEM: %v", err)
		}
	}

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
	for _, f := range qf.Files {
		switch f.Kind {
		case layout.Foreign:
			warnings++
			line("foreign", "warning: %s: %s; not corruption", fileName(f.Name), leftoverNote(f.Kind))
		case layout.SnapshotTemp, layout.Truncation, layout.Broken:
			line("leftover", "%s (%s): %s; harmless", fileName(f.Name), fmtSize(f.Size), leftoverNote(f.Kind))
		}
	}

	// Log.
	lc, err := checkLog(qf.LogDir)
	if err != nil {
		return c.errorf("%v", err)
	}
	for _, ce := range lc.problems {
		problem("log", ce)
	}
	if len(lc.problems) == 0 {
		switch {
		case !qf.HasLog:
			line("log", "ok: no log yet")
		case lc.last < lc.first:
			line("log", "ok: %s, no records yet", plural(lc.segments, "segment", "segments"))
		default:
			line("log", "ok: %s, index %d..%d: framing, CRC and LSN of every record",
				plural(lc.segments, "segment", "segments"), lc.first, lc.last)
		}
	}
	if lc.tail != nil {
		warnings++
		line("tail", "warning: incomplete tail, not corruption: %s", tailText(lc.tail))
	}

	// Snapshots.
	snaps, err := readSnapshots(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	if len(snaps) == 0 {
		line("snapshot", "none")
	}
	for _, s := range snaps {
		if s.St == nil {
			problem("snapshot", s.Err)
			continue
		}
		line("snapshot", "ok: %s covers index %d, %s", s.File.Name, s.File.LSN, plural(s.St.Len(), "item", "items"))
	}

	// State.
	st, r, err := loadState(c.dir, 0)
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
	segments    int
	first, last uint64
	tail        *wal.TailInfo
	problems    []error
}

// checkLog verifies every segment. wal.Scan stops at the first corruption,
// so after one it goes on from the segment after the damaged one (or, for
// damage at the very start of a segment, from that segment itself) to find
// the others.
func checkLog(logDir string) (logCheck, error) {
	var lc logCheck
	tried := make(map[uint64]bool) // indexes scanned from
	from, restarts := uint64(0), 0
	tried[from] = true
	for {
		segs, _, err := wal.ListSegments(logDir)
		if errors.Is(err, fs.ErrNotExist) {
			return lc, nil
		}
		if err != nil {
			return lc, err
		}
		res, err := wal.Scan(logDir, from, 0, nil)
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
