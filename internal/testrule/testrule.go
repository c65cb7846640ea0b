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

// watch runs the test binary again as a child that runs the tests verbosely,
// passes on what go test would have shown and enforces limit. It returns
// the exit code of the run.
func watch(binary string, args []string, limit time.Duration, out io.Writer) int {
	verbose, _ := flagValue(args, "test.v")
	childArgs := append([]string(nil), args...)
	quiet := verbose == "" || verbose == "false"
	if quiet {
		childArgs = append(childArgs, "-test.v=true")
	}
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

	f := &filter{limit: limit, quiet: quiet, out: out, now: time.Now}
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
	f.end()

	code := 0
	if waitErr != nil {
		code = 1
		if ee, ok := waitErr.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		}
	}
	if code == 0 && len(f.broken) > 0 {
		code = 1
	}
	return code
}

// A Violation is a test that took longer than the limit.
type Violation struct {
	Test    string
	Elapsed time.Duration
}

func (v Violation) String() string {
	return fmt.Sprintf("%s took %s", v.Test, v.Elapsed)
}

// resultLine matches the line a test binary prints when a test or subtest
// ends, in -test.v and in -test.v=test2json (whose markers start with ^V).
var resultLine = regexp.MustCompile(`^ *\x16?--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// startLine matches the line a test binary prints when a test starts, and
// pauseLine the one it prints when the test calls t.Parallel.
var (
	startLine = regexp.MustCompile(`^\x16?=== RUN +(\S+)`)
	pauseLine = regexp.MustCompile(`^\x16?=== PAUSE +(\S+)`)
)

// filter reads the child's output line by line, as the child writes it.
//
// A test's time is what the binary reports, and for a top-level test that
// does not call t.Parallel, the larger of that and the time the filter saw
// pass between its start and its end: the binary reports no time of its
// own for a test whose subtests run in parallel, which would otherwise let
// any number of them through. (A test that calls t.Parallel waits for a
// slot after it resumes, so only its report counts.)
type filter struct {
	limit   time.Duration
	quiet   bool // the run did not ask for -v: drop what -v added
	out     io.Writer
	now     func() time.Time
	started map[string]time.Time // top-level tests running, not paused
	broken  []Violation
	ended   bool // the binary's final PASS or FAIL was seen
}

func (f *filter) line(line string) {
	if m := startLine.FindStringSubmatch(line); m != nil && f.now != nil && !strings.Contains(m[1], "/") {
		if f.started == nil {
			f.started = map[string]time.Time{}
		}
		f.started[m[1]] = f.now()
	}
	if m := pauseLine.FindStringSubmatch(line); m != nil {
		delete(f.started, m[1])
	}
	if m := resultLine.FindStringSubmatch(line); m != nil {
		elapsed, _ := time.ParseDuration(m[3] + "s")
		if start, ok := f.started[m[2]]; ok {
			elapsed = max(elapsed, f.now().Sub(start).Round(10*time.Millisecond))
			delete(f.started, m[2])
		}
		if elapsed > f.limit {
			f.broken = append(f.broken, Violation{Test: m[2], Elapsed: elapsed})
		}
		if f.quiet && m[1] != "FAIL" {
			return
		}
	}
	trimmed := strings.TrimRight(line, "\n")
	if f.quiet && (strings.HasPrefix(trimmed, "=== ") || indentedPassOrSkip(trimmed)) {
		return
	}
	if len(f.broken) > 0 && (trimmed == "PASS" || trimmed == "\x16PASS") {
		f.report()
		fmt.Fprintln(f.out, "FAIL")
		f.ended = true
		return
	}
	if trimmed == "FAIL" || trimmed == "PASS" || trimmed == "\x16FAIL" || trimmed == "\x16PASS" {
		if len(f.broken) > 0 && !f.ended {
			f.report()
		}
		f.ended = true
	}
	io.WriteString(f.out, line)
}

// end reports violations the binary's final line did not carry (a child
// that died before printing it).
func (f *filter) end() {
	if len(f.broken) > 0 && !f.ended {
		f.report()
	}
}

func (f *filter) report() {
	for _, v := range f.broken {
		fmt.Fprintf(f.out, "--- FAIL: %s: longer than the default run's limit of %s: move it to a long test (build tag long) or make it faster\n", v, f.limit)
	}
}

// indentedPassOrSkip matches a subtest's PASS or SKIP line, which -v adds.
func indentedPassOrSkip(line string) bool {
	t := strings.TrimLeft(line, " ")
	return t != line && (strings.HasPrefix(t, "--- PASS: ") || strings.HasPrefix(t, "--- SKIP: "))
}
