// Command walq-inspect shows what is inside a walq queue directory — its
// format marker and directory ID, its segments, frames and snapshots, every
// record, one item's history, the state at any index, the dead letters,
// where the disk space went — and verifies the directory as recovery would
// judge it.
//
// It only reads: it opens every file read-only, takes no lock, repairs
// nothing and never calls wal.Open, so it can run next to a live queue while
// that queue appends and compacts. A frame still being written at the end
// of the log shows as bytes that recovery would cut, and a segment that a
// compaction removes under the reader (segments go whole; nothing is
// rewritten) makes it read again from the new start; neither is corruption.
//
// Usage:
//
//	walq-inspect [command] [flags] DIR [ARG]
//
// The commands are summary (the default), log (with --frames, the frames
// and their watermarks), item, state, dead, verify, space and serve (the
// web dashboard, read-only, on loopback);
// "walq-inspect COMMAND -h" describes each. The commands that show items
// and records show the whole directory, every queue in it, unless --queue
// NAME picks one queue ("(default)" for the default queue); verify checks
// the files and the log of the whole directory whatever --queue says,
// serve takes no --queue (its pages pick the queue), and log --frames
// refuses it. A directory of
// format 2 is
// checked against the directory ID in its marker (WALQ-FORMAT); one of
// format 1 (no marker) is read as format 1 wrote it, read-only, until the
// next walq.Open carries it forward; one whose marker is of a newer format
// is refused. Exit status: 0 ok, 1 an error, a refusal or (verify,
// summary) corruption found, 2 a usage error.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/walq/walq/state"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // an error, or corruption found
	exitUsage   = 2
	programName = "walq-inspect"
)

// command is one subcommand.
type command struct {
	name  string
	args  string // what follows the flags in the usage line
	short string // one line for the command list
	long  string // the help text
	flags func(fs *flag.FlagSet) any
	run   func(c *cmdEnv) int
}

// cmdEnv is what a command runs with.
type cmdEnv struct {
	stdout *bufio.Writer
	stderr io.Writer
	dir    string
	args   []string // positional arguments after DIR
	opts   any      // what command.flags returned, after parsing
	usage  func()   // prints the command's usage to stderr
}

// errorf prints an error on stderr and returns exitFailed.
func (c *cmdEnv) errorf(format string, args ...any) int {
	c.stdout.Flush()
	fmt.Fprintf(c.stderr, "%s: %s\n", programName, clean(fmt.Sprintf(format, args...)))
	return exitFailed
}

// notef prints a note on stderr (stdout stays parseable).
func (c *cmdEnv) notef(format string, args ...any) {
	c.stdout.Flush()
	fmt.Fprintf(c.stderr, "%s: %s\n", programName, clean(fmt.Sprintf(format, args...)))
}

var commands []*command

func init() {
	commands = []*command{summaryCmd, logCmd, itemCmd, stateCmd, deadCmd, verifyCmd, spaceCmd, serveCmd}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run is the whole program; tests call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		topUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			if c := lookup(args[1]); c != nil {
				return runCommand(c, []string{"-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "%s: unknown command %s\n", programName, quote(args[1]))
			return exitUsage
		}
		topUsage(stdout)
		return exitOK
	}
	if c := lookup(args[0]); c != nil {
		return runCommand(c, args[1:], stdout, stderr)
	}
	return runCommand(summaryCmd, args, stdout, stderr)
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, `usage: %s [command] [flags] DIR [ARG]

Shows what is inside a walq queue directory and verifies it as recovery
would judge it. It only reads (no lock, no repair, never wal.Open), so it is
safe next to a running queue. A directory of format 1 (no WALQ-FORMAT
marker) is read as format 1 wrote it; one of a newer walq is refused.

commands:
`, programName)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, `
Without a command, summary runs (a directory named like a command needs
its path: ./log). Every command shows the whole directory, all its queues,
unless --queue NAME picks one ("(default)": the default queue). "%s COMMAND -h" describes a command.
Exit status: 0 ok, 1 an error, a refusal or corruption found, 2 a usage
error.
`, programName)
}

func runCommand(c *command, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts any
	if c.flags != nil {
		opts = c.flags(fs)
	}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: %s %s [flags] %s\n\n%s\n", programName, c.name, c.args, strings.TrimSpace(c.long))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(w, "\nflags:\n")
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(stderr)
		}
	}
	fs.Usage = func() {}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return exitOK
	}
	if err != nil {
		usage(stderr)
		return exitUsage
	}
	if len(pos) == 0 {
		fmt.Fprintf(stderr, "%s %s: no queue directory given\n", programName, c.name)
		usage(stderr)
		return exitUsage
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	env := &cmdEnv{stdout: out, stderr: stderr, dir: pos[0], args: pos[1:], opts: opts,
		usage: func() { usage(stderr) }}
	return c.run(env)
}

// parseInterspersed parses flags wherever they stand among the positional
// arguments ("log DIR --json" as well as "log --json DIR"); after "--"
// everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageErrorf reports a bad argument and the command's usage.
func (c *cmdEnv) usageErrorf(format string, args ...any) int {
	c.stdout.Flush()
	fmt.Fprintf(c.stderr, "%s: %s\n", programName, clean(fmt.Sprintf(format, args...)))
	c.usage()
	return exitUsage
}

// wantArgs checks the number of positional arguments after DIR.
func (c *cmdEnv) wantArgs(n int) bool { return len(c.args) == n }

// unixNanos is t in Unix nanoseconds, saturated at the ends of an int64:
// UnixNano's result is undefined past them (a year after 2262 came out
// before 1970, and a filter "put after 3026" matched everything).
func unixNanos(t time.Time) int64 {
	switch {
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	}
	return t.UnixNano()
}

// timeFlag is a flag holding a time: RFC 3339, or Unix nanoseconds.
type timeFlag struct{ ns int64 }

func (t *timeFlag) String() string {
	if t == nil || t.ns == 0 {
		return ""
	}
	return fmtTime(t.ns)
}

func (t *timeFlag) Set(s string) error {
	if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
		t.ns = unixNanos(ts)
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("want an RFC 3339 time such as 2026-01-02T15:04:05Z, or Unix nanoseconds")
	}
	t.ns = n
	return nil
}

// nowFlag adds --now to a command.
func nowFlag(fs *flag.FlagSet) *timeFlag {
	t := new(timeFlag)
	fs.Var(t, "now", "judge ages and due times as of this `time` (RFC 3339) instead of the queue's time (the clock, or the log's newest time when the clock is behind it)")
	return t
}

// nowFor is now for the directory whose state is st: without --now, the
// queue's own time, which is the clock raised to the log's newest time
// when the clock is behind it (a clock once set ahead and then corrected
// leaves the log ahead of it; the queue counts from the log's time, and so
// does this, or items the queue delivers would show as delayed).
func (t *timeFlag) nowFor(st *state.State) int64 {
	if t.ns != 0 {
		return t.ns
	}
	return queueNow(st)
}

// queueNow is the queue's time for a directory whose state is st (nil:
// the clock).
func queueNow(st *state.State) int64 {
	now := time.Now().UnixNano()
	if st != nil {
		now = max(now, st.LastTime())
	}
	return now
}

// parseIndex parses a log index or item ID (a positive integer).
func parseIndex(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s is not a positive integer", quote(s))
	}
	return n, nil
}
