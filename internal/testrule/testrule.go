// Package testrule holds every test of the default run to the project's
// rule: a test uses the injected clock or waits on events, and takes at
// most two seconds. Anything longer (real-time suites, crash cycles,
// clusters, browsers, soaks) is a long test: it lives in a file with the
// build tag long and runs with scripts/long-tests.
//
// Every test package calls Main (or MainFunc, when it sets something up
// first) from its TestMain:
//
//	func TestMain(m *testing.M) { testrule.Main(m) }
//
// Main runs the package's test binary again as a child with -test.v, reads
// the child's report of each top-level test, passes the output on as go
// test would have printed it, and fails the run when a test took longer
// than the limit, naming the test and its time. The child is a process of
// its own so that nothing the tests do (a panic, os.Exit, a timeout) can
// lose the report. A test that a meta-test of this package finds without
// such a TestMain fails the default run too.
//
// The limit is 2 s; WALQ_TEST_LIMIT sets another (a Go duration; 0 turns
// the rule off) for a machine known to be slower. The rule does not apply
// in a build with the tag long, while fuzzing (-test.fuzz), or to a listing
// (-test.list).
package testrule

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DefaultLimit is the longest a test of the default run may take.
const DefaultLimit = 2 * time.Second

// childEnv marks the child that runs the tests.
const childEnv = "WALQ_TESTRULE_CHILD"

// LimitEnv names the environment variable that overrides DefaultLimit.
const LimitEnv = "WALQ_TEST_LIMIT"

// Main runs m's tests under the rule and exits with their result.
func Main(m *testing.M) { MainFunc(m.Run) }

// MainFunc is Main for a TestMain that sets something up around m.Run: run
// is called in the process that runs the tests (the child), never in the
// process that only watches them, and returns m.Run's exit code.
func MainFunc(run func() int) {
	if os.Getenv(childEnv) != "" || exempt(os.Args[1:]) {
		os.Exit(run())
	}
	limit, err := Limit()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testrule: %v\n", err)
		os.Exit(2)
	}
	if limit == 0 {
		os.Exit(run())
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testrule: %v\n", err)
		os.Exit(2)
	}
	os.Exit(watch(self, os.Args[1:], limit, os.Stdout))
}

// Limit is the limit in force: DefaultLimit, or what WALQ_TEST_LIMIT says.
func Limit() (time.Duration, error) {
	v := os.Getenv(LimitEnv)
	if v == "" {
		return DefaultLimit, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 2s, or 0 to turn the rule off", LimitEnv, v)
	}
	return d, nil
}

// exempt reports whether the rule stays out of a run with these arguments.
func exempt(args []string) bool {
	if Long {
		return true
	}
	for _, name := range []string{"test.fuzz", "test.fuzzworker", "test.list"} {
		if v, ok := flagValue(args, name); ok && v != "" && v != "false" {
			return true
		}
	}
	return false
}

// flagValue finds a flag in a test binary's arguments, in any of the forms
// the flag package takes (-name, --name, -name=value, -name value); a
// boolean flag given bare reads "true".
func flagValue(args []string, name string) (string, bool) {
	value, found := "", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == args[i] {
			continue // not a flag
		}
		k, v, hasValue := strings.Cut(a, "=")
		if k != name {
			continue
		}
		found = true
		switch {
		case hasValue:
			value = v
		case isBoolFlag(name):
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		}
	}
	return value, found
}

func isBoolFlag(name string) bool {
	switch name {
	case "test.v", "test.fuzzworker", "test.short", "test.failfast", "test.benchmem", "test.paniconexit0", "test.fullpath":
		return true
	}
	return false
}

// output is what the run asked go test's binary to print.
type output int

const (
	quiet     output = iota // no -test.v: results of failing tests only
	verbose                 // -test.v
	test2json               // -test.v=test2json: go test -json reads it
)

// watch runs the test binary again as a child, with -test.v=test2json so
// that the testing package marks its own lines (nothing a test prints can
// pass for them), passes on what the binary would have printed as the run
// asked, and enforces limit. It returns the exit code of the run.
func watch(binary string, args []string, limit time.Duration, out io.Writer) int {
	mode := quiet
	switch v, _ := flagValue(args, "test.v"); v {
	case "", "false":
	case "test2json":
		mode = test2json
	default:
		mode = verbose
	}
	childArgs := append(append([]string(nil), args...), "-test.v=test2json")
	cmd := exec.Command(binary, childArgs...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if v := os.Getenv("GORACE"); !strings.Contains(v, "atexit_sleep_ms") {
		// A race-enabled binary sleeps a second as it exits, to let the
		// goroutines still running report; this process sleeps it too,
		// once is enough, and the child's tests have all ended by then.
		cmd.Env = append(cmd.Env, strings.TrimSpace("GORACE="+v+" atexit_sleep_ms=0"))
	}
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testrule: %v\n", err)
		return 2
	}
	f := &filter{limit: limit, mode: mode, out: out, now: time.Now}
	f.start = f.now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testrule: run the tests: %v\n", err)
		return 2
	}
	// go test sends SIGQUIT to a binary past its timeout, and a terminal
	// sends SIGINT to the group: the child gets them too.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()

	r := bufio.NewReader(stdout)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			f.line(line)
		}
		if err != nil {
			break
		}
	}
	waitErr := cmd.Wait()
	signal.Stop(sigs)
	close(sigs)

	code := 0
	if waitErr != nil {
		code = 1
		if ee, ok := waitErr.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		}
	}
	f.end(code == 0)
	if code == 0 && (len(f.broken) > 0 || !f.ended) {
		code = 1
	}
	noteLimitRead(args)
	return code
}

// noteLimitRead adds the read of LimitEnv to the log go test keeps of what
// a test binary read (-test.testlogfile), so that a cached result is not
// reused under another limit. The child wrote the log; its tests ran under
// the limit this process read.
func noteLimitRead(args []string) {
	path, ok := flagValue(args, "test.testlogfile")
	if !ok || path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "getenv %s\n", LimitEnv)
}

// A Violation is a test that took longer than the limit.
type Violation struct {
	Test    string
	Elapsed time.Duration
}

func (v Violation) String() string {
	return fmt.Sprintf("%s took %s", v.Test, v.Elapsed)
}

// marker starts every line the testing package prints of its own under
// -test.v=test2json.
const marker = "\x16"

var (
	// resultLine is the testing package's line at the end of a test or
	// subtest; startLine at its start (RUN), resumption after t.Parallel
	// once it has a slot to run in (CONT), or pause (PAUSE); nameLine says
	// whose output follows.
	resultLine = regexp.MustCompile(`^( *)--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	startLine  = regexp.MustCompile(`^=== (RUN|CONT|PAUSE) +(\S+)`)
	nameLine   = regexp.MustCompile(`^=== NAME +(\S*)`)
	benchName  = regexp.MustCompile(`^Benchmark\S+$`)
)

// filter reads the child's output line by line, as the child writes it.
//
// A test's time is what the binary reports, and for a top-level test the
// larger of that and the time the filter saw pass between its start, or
// its resumption after t.Parallel, and its end: the binary reports no time
// of its own for a test whose subtests run in parallel, which would
// otherwise let any number of them through. Setup in TestMain before the
// first test is held to the limit too.
type filter struct {
	limit time.Duration
	mode  output
	out   io.Writer
	now   func() time.Time
	start time.Time // the child started

	started map[string]time.Time // top-level tests running, not paused
	current string               // the test whose output follows ("": none)
	held    map[string][]string  // quiet: output of running top-level tests
	order   []string             // quiet: their names, first started first
	seen    bool                 // a test has started
	broken  []Violation
	// subFailed: top-level tests with a subtest over the limit, which
	// fail with it.
	subFailed map[string]bool
	ended     bool // the binary's final PASS or FAIL was seen
}

func (f *filter) line(line string) {
	text, framework, found := strings.Cut(line, marker)
	if text != "" {
		if !found {
			text = line // no marker: all of it is output
		}
		f.output(text)
	}
	if !found {
		return
	}
	f.framework(framework)
}

// framework handles one line the testing package printed (marker removed).
func (f *filter) framework(line string) {
	trimmed := strings.TrimRight(line, "\n")
	if m := startLine.FindStringSubmatch(trimmed); m != nil {
		name := m[2]
		top := !strings.Contains(name, "/")
		if !f.seen {
			f.seen = true
			if d := f.now().Sub(f.start); d > f.limit {
				f.broken = append(f.broken, Violation{Test: "TestMain, before the first test", Elapsed: d.Round(10 * time.Millisecond)})
			}
		}
		if top {
			if f.started == nil {
				f.started = map[string]time.Time{}
			}
			switch m[1] {
			case "PAUSE":
				delete(f.started, name)
			default:
				f.started[name] = f.now()
			}
		}
		f.current = name
		if m[1] == "RUN" && top && f.mode == quiet {
			f.hold(name)
		}
		f.pass(marker+line, line)
		return
	}
	if m := nameLine.FindStringSubmatch(trimmed); m != nil {
		f.current = m[1]
		if m[1] != "" { // test2json's own, which -v does not print
			f.pass(marker+line, line)
		} else if f.mode == test2json {
			io.WriteString(f.out, marker+line)
		}
		return
	}
	if m := resultLine.FindStringSubmatch(trimmed); m != nil {
		result, name := m[2], m[3]
		// Under test2json a subtest's line is not indented; -v indents it
		// by four spaces a level.
		depth := strings.Count(name, "/")
		indent := strings.Repeat("    ", depth)
		line = strings.TrimLeft(line, " ")
		elapsed, _ := time.ParseDuration(m[4] + "s")
		if start, ok := f.started[name]; ok && depth == 0 {
			elapsed = max(elapsed, f.now().Sub(start).Round(10*time.Millisecond))
			delete(f.started, name)
		}
		var v *Violation
		if elapsed > f.limit {
			f.broken = append(f.broken, Violation{Test: name, Elapsed: elapsed})
			v = &f.broken[len(f.broken)-1]
		}
		f.result(indent, result, name, line, v)
		return
	}
	switch trimmed {
	case "PASS", "FAIL":
		f.flushHeld()
		f.ended = true
		if trimmed == "PASS" && len(f.broken) > 0 {
			line = "FAIL\n"
		}
		f.pass(marker+line, line)
		return
	}
	f.pass(marker+line, line)
}

// result handles a test's result line; v is its violation, if any.
func (f *filter) result(indent, result, name, line string, v *Violation) {
	failed := result == "FAIL" || v != nil
	if indent == "" && f.subFailed[name] {
		// A subtest broke the rule: its parent fails with it.
		delete(f.subFailed, name)
		if !failed {
			failed = true
			line = strings.Replace(line, "--- "+result+":", "--- FAIL:", 1)
		}
	}
	if indent != "" && v != nil {
		if f.subFailed == nil {
			f.subFailed = map[string]bool{}
		}
		f.subFailed[topOf(name)] = true
	}
	msg := ""
	if v != nil {
		// The test fails: its result says so, for go test -json too.
		line = strings.Replace(line, "--- "+result+":", "--- FAIL:", 1)
		msg = fmt.Sprintf("%s    %s: longer than the default run's limit of %s: move it to a long test (build tag long) or make it faster\n", indent, v, f.limit)
	}
	if f.mode != quiet {
		io.WriteString(f.out, msg)
		f.pass(marker+line, indent+line)
		return
	}
	top := topOf(name)
	if indent != "" {
		if failed {
			f.holdLine(top, indent+line)
			f.holdLine(top, msg)
		}
		return
	}
	f.holdLine(top, msg)
	lines := f.held[name]
	f.release(name)
	if failed {
		io.WriteString(f.out, line)
		for _, l := range lines {
			io.WriteString(f.out, l)
		}
	}
}

// output handles what a test or TestMain printed.
func (f *filter) output(text string) {
	if f.mode == quiet {
		if name := topOf(f.current); name != "" && f.held != nil {
			if _, ok := f.held[name]; ok {
				f.holdLine(name, text)
				return
			}
		}
		if benchName.MatchString(strings.TrimSpace(text)) {
			return // a benchmark's name alone, which only -v prints
		}
	}
	io.WriteString(f.out, text)
}

// pass writes a line of the testing package's as the run asked for it.
func (f *filter) pass(framed, plain string) {
	switch f.mode {
	case test2json:
		io.WriteString(f.out, framed)
	case verbose:
		io.WriteString(f.out, plain)
	default:
		if t := strings.TrimRight(plain, "\n"); t == "PASS" || t == "FAIL" {
			io.WriteString(f.out, plain)
		}
	}
}

func (f *filter) hold(name string) {
	if f.held == nil {
		f.held = map[string][]string{}
	}
	if _, ok := f.held[name]; !ok {
		f.held[name] = nil
		f.order = append(f.order, name)
	}
}

func (f *filter) holdLine(name, text string) {
	if _, ok := f.held[name]; ok {
		f.held[name] = append(f.held[name], text)
	}
}

func (f *filter) release(name string) {
	delete(f.held, name)
	if i := slices.Index(f.order, name); i >= 0 {
		f.order = slices.Delete(f.order, i, i+1)
	}
}

// flushHeld writes what tests that never ended printed (a binary that
// died mid-test, or ended it another way): nothing is lost.
func (f *filter) flushHeld() {
	for _, name := range f.order {
		for _, l := range f.held[name] {
			io.WriteString(f.out, l)
		}
	}
	f.held, f.order = nil, nil
}

// end reports what the binary's last line did not carry: tests of a child
// that died before printing it, or whose output stopped (os.Stdout closed)
// while it went on to exit 0.
func (f *filter) end(exitedOK bool) {
	f.flushHeld()
	if f.ended {
		return
	}
	if exitedOK {
		fmt.Fprintln(f.out, "testrule: the test binary exited without printing its result (did a test close os.Stdout?): the run fails")
		fmt.Fprintln(f.out, "FAIL")
	}
}

// topOf is the top-level test of a test or subtest name.
func topOf(name string) string {
	top, _, _ := strings.Cut(name, "/")
	return top
}
