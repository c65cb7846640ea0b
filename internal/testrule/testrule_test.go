package testrule

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// sleepEnv makes TestSleeper sleep, for the tests that run this binary
// again to see the rule catch it.
const sleepEnv = "WALQ_TESTRULE_SLEEP"

// TestSleeper breaks the rule on purpose when sleepEnv asks it to; it is
// skipped otherwise.
func TestSleeper(t *testing.T) {
	v := os.Getenv(sleepEnv)
	if v == "" {
		t.Skip("runs only inside TestRuleFailsASlowTest")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
}

// runSleeper runs this test binary as go test runs it, TestSleeper alone,
// with the given sleep and limit, and returns its output and exit code.
func runSleeper(t *testing.T, sleep, limit string, extra ...string) (string, int) {
	t.Helper()
	if Long {
		t.Skip("a build with the tag long runs without the rule")
	}
	args := append([]string{"-test.run=^TestSleeper$"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, childEnv+"=") && !strings.HasPrefix(kv, LimitEnv+"=") && !strings.HasPrefix(kv, sleepEnv+"=") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	// GORACE: the run's own exit would sleep a second under -race.
	cmd.Env = append(env, sleepEnv+"="+sleep, LimitEnv+"="+limit, "GORACE=atexit_sleep_ms=0")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// The rule fails a run whose test sleeps past the limit, naming the test and
// its time. The default run's version uses a short limit; under the real
// one, WALQ_TESTRULE_SLEEP=3s go test -run TestSleeper ./internal/testrule
// fails (a long build turns the rule off, so no test does that).
func TestRuleFailsASlowTest(t *testing.T) {
	out, code := runSleeper(t, "300ms", "100ms")
	if code != 1 {
		t.Errorf("exit code %d, want 1; output:\n%s", code, out)
	}
	if !strings.Contains(out, "--- FAIL: TestSleeper (0.3") || !strings.Contains(out, "TestSleeper took 3") || !strings.Contains(out, "limit of 100ms") {
		t.Errorf("output does not name the test, its time and the limit:\n%s", out)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "FAIL") {
		t.Errorf("output does not end in FAIL:\n%s", out)
	}
}

// A test within the limit passes, and the run prints what go test's
// binary prints without -v: no RUN or PASS lines of single tests.
func TestRulePassesAFastTest(t *testing.T) {
	out, code := runSleeper(t, "1ms", "1s")
	if code != 0 {
		t.Errorf("exit code %d, want 0; output:\n%s", code, out)
	}
	if strings.TrimSpace(out) != "PASS" {
		t.Errorf("output %q, want PASS alone", out)
	}
}

// With -test.v the output stays verbose, and the violation is still caught.
func TestRuleVerbose(t *testing.T) {
	out, code := runSleeper(t, "300ms", "100ms", "-test.v")
	if code != 1 || !strings.Contains(out, "=== RUN   TestSleeper") || !strings.Contains(out, "--- FAIL: TestSleeper (") || !strings.Contains(out, "TestSleeper took") {
		t.Errorf("exit code %d, output:\n%s", code, out)
	}
}

// A test that fails keeps its failure and its exit code.
func TestRuleKeepsFailures(t *testing.T) {
	out, code := runSleeper(t, "not-a-duration", "1s")
	if code != 1 || !strings.Contains(out, "--- FAIL: TestSleeper") || !strings.Contains(out, "not-a-duration") {
		t.Errorf("exit code %d, output:\n%s", code, out)
	}
}

// frame marks each line that starts with "=== ", "--- " or is PASS or
// FAIL as the testing package's, as -test.v=test2json does.
func frame(in string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(in, "\n") {
		t := strings.TrimLeft(l, " ")
		if strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || t == "PASS\n" || t == "FAIL\n" {
			l = marker + t
		}
		b.WriteString(l)
	}
	return b.String()
}

const advice = ": longer than the default run's limit of 2s: move it to a long test (build tag long) or make it faster\n"

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		mode           output
		broken         int
	}{
		{
			name: "quiet pass",
			in:   frame("=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\n=== RUN   TestB/sub\n--- PASS: TestB/sub (0.00s)\n--- PASS: TestB (1.99s)\nPASS\n"),
			want: "PASS\n",
		},
		{
			name:   "quiet violation",
			in:     frame("=== RUN   TestA\n    a_test.go:3: a log\n--- PASS: TestA (2.50s)\nPASS\n"),
			want:   "--- FAIL: TestA (2.50s)\n    a_test.go:3: a log\n    TestA took 2.5s" + advice + "FAIL\n",
			broken: 1,
		},
		{
			name: "quiet failure keeps its log, a passing test's log goes",
			in:   frame("=== RUN   TestA\n    a_test.go:9: boom\n--- FAIL: TestA (0.00s)\n=== RUN   TestB\n    b_test.go:1: chatter\n--- PASS: TestB (0.00s)\nFAIL\n"),
			want: "--- FAIL: TestA (0.00s)\n    a_test.go:9: boom\nFAIL\n",
		},
		{
			name: "quiet failing subtest",
			in:   frame("=== RUN   TestA\n=== RUN   TestA/x\n    a_test.go:9: boom\n--- FAIL: TestA/x (0.00s)\n--- FAIL: TestA (0.00s)\nFAIL\n"),
			want: "--- FAIL: TestA (0.00s)\n    a_test.go:9: boom\n    --- FAIL: TestA/x (0.00s)\nFAIL\n",
		},
		{
			name: "verbose",
			mode: verbose,
			in:   frame("=== RUN   TestA\n=== RUN   TestA/x\n--- PASS: TestA/x (0.00s)\n--- PASS: TestA (0.00s)\nPASS\n"),
			want: "=== RUN   TestA\n=== RUN   TestA/x\n    --- PASS: TestA/x (0.00s)\n--- PASS: TestA (0.00s)\nPASS\n",
		},
		{
			name:   "test2json: a violation fails the test",
			mode:   test2json,
			in:     frame("=== RUN   TestA\n--- PASS: TestA (2.01s)\nPASS\n"),
			want:   frame("=== RUN   TestA\n") + "    TestA took 2.01s" + advice + frame("--- FAIL: TestA (2.01s)\nFAIL\n"),
			broken: 1,
		},
		{
			name:   "subtests count",
			in:     frame("=== RUN   TestA\n=== RUN   TestA/sub\n--- PASS: TestA/sub (2.50s)\n--- PASS: TestA (0.00s)\nPASS\n"),
			want:   "--- FAIL: TestA (0.00s)\n    --- FAIL: TestA/sub (2.50s)\n        TestA/sub took 2.5s" + advice + "FAIL\n",
			broken: 1,
		},
		{
			name: "a test's output that mimics the testing package's lines",
			in:   frame("=== RUN   TestA\n") + "--- PASS: TestFake (9.00s)\n=== PAUSE TestA\n" + frame("--- PASS: TestA (0.00s)\nPASS\n"),
			want: "PASS\n",
		},
		{
			name:   "output with no newline before a result",
			in:     frame("=== RUN   TestA\n") + "working..." + frame("--- PASS: TestA (2.50s)\nPASS\n"),
			want:   "--- FAIL: TestA (2.50s)\nworking...    TestA took 2.5s" + advice + "FAIL\n",
			broken: 1,
		},
		{
			name:   "no final line",
			in:     frame("=== RUN   TestA\n--- PASS: TestA (9.00s)\n=== RUN   TestB\n    b_test.go:2: before the panic\n"),
			want:   "--- FAIL: TestA (9.00s)\n    TestA took 9s" + advice + "    b_test.go:2: before the panic\n",
			broken: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := &filter{limit: 2 * time.Second, mode: tc.mode, out: &out, now: time.Now}
			f.start = f.now()
			for _, line := range strings.SplitAfter(tc.in, "\n") {
				if line != "" {
					f.line(line)
				}
			}
			f.end(false)
			if out.String() != tc.want {
				t.Errorf("output\n%q\nwant\n%q", out.String(), tc.want)
			}
			if len(f.broken) != tc.broken {
				t.Errorf("%d violations, want %d", len(f.broken), tc.broken)
			}
		})
	}
}

// A test whose subtests run in parallel reports no time of its own: the
// filter counts the time it saw pass between the test's start, or its
// resumption after t.Parallel, and its end. Setup before the first test is
// held to the limit too.
func TestFilterWallTime(t *testing.T) {
	var clock time.Time
	step := func(d time.Duration) { clock = clock.Add(d) }
	var out bytes.Buffer
	f := &filter{limit: 2 * time.Second, mode: quiet, out: &out, now: func() time.Time { return clock }}
	f.start = clock
	step(2500 * time.Millisecond) // TestMain's setup
	for _, l := range []string{
		"=== RUN   TestA\n", "=== RUN   TestA/one\n", "=== PAUSE TestA/one\n", "=== RUN   TestA/two\n", "=== PAUSE TestA/two\n",
		"=== CONT  TestA/one\n", "+1500ms", "=== CONT  TestA/two\n", "--- PASS: TestA/one (1.50s)\n", "+1500ms",
		"--- PASS: TestA/two (1.50s)\n", "--- PASS: TestA (0.00s)\n",
		"=== RUN   TestB\n", "=== PAUSE TestB\n", "+5s", "=== CONT  TestB\n", "+1s", "--- PASS: TestB (1.00s)\n",
		"=== RUN   TestC\n", "=== PAUSE TestC\n", "+5s", "=== CONT  TestC\n", "=== RUN   TestC/x\n", "=== PAUSE TestC/x\n",
		"=== CONT  TestC/x\n", "+2100ms", "--- PASS: TestC/x (2.00s)\n", "--- PASS: TestC (0.00s)\n",
		"PASS\n",
	} {
		if d, err := time.ParseDuration(strings.TrimSuffix(strings.TrimPrefix(l, "+"), "\n")); err == nil {
			step(d)
			continue
		}
		f.line(marker + l)
	}
	var got []string
	for _, v := range f.broken {
		got = append(got, v.String())
	}
	want := []string{"TestMain, before the first test took 2.5s", "TestA took 3s", "TestC took 2.1s"}
	if !slices.Equal(got, want) {
		t.Errorf("violations %q, want %q", got, want)
	}
}

func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		name  string
		value string
		found bool
	}{
		{[]string{"-test.v"}, "test.v", "true", true},
		{[]string{"-test.v=test2json"}, "test.v", "test2json", true},
		{[]string{"--test.v=false"}, "test.v", "false", true},
		{[]string{"-test.run", "X", "-test.fuzz", "FuzzA"}, "test.fuzz", "FuzzA", true},
		{[]string{"-test.fuzz=FuzzA"}, "test.fuzz", "FuzzA", true},
		{[]string{"-test.fuzzworker"}, "test.fuzzworker", "true", true},
		{[]string{"-test.run=X"}, "test.fuzz", "", false},
		{[]string{"--", "-test.fuzz=X"}, "test.fuzz", "", false},
	} {
		v, ok := flagValue(tc.args, tc.name)
		if v != tc.value || ok != tc.found {
			t.Errorf("flagValue(%q, %q) = %q, %v; want %q, %v", tc.args, tc.name, v, ok, tc.value, tc.found)
		}
	}
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
		ok   bool
	}{
		{"", DefaultLimit, true},
		{"5s", 5 * time.Second, true},
		{"0", 0, true},
		{"-1s", 0, false},
		{"two", 0, false},
	} {
		t.Setenv(LimitEnv, tc.env)
		got, err := Limit()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s=%q: %v, %v; want %v, ok %v", LimitEnv, tc.env, got, err, tc.want, tc.ok)
		}
	}
}
