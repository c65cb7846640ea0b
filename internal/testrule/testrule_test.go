package testrule

import (
	"bytes"
	"os"
	"os/exec"
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
// its time; the default run's version uses a short limit, and
// TestRuleFailsAThreeSecondSleep (a long test) the real one.
func TestRuleFailsASlowTest(t *testing.T) {
	out, code := runSleeper(t, "300ms", "100ms")
	if code != 1 {
		t.Errorf("exit code %d, want 1; output:\n%s", code, out)
	}
	if !strings.Contains(out, "--- FAIL: TestSleeper took 3") || !strings.Contains(out, "limit of 100ms") {
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
	if code != 1 || !strings.Contains(out, "=== RUN   TestSleeper") || !strings.Contains(out, "--- FAIL: TestSleeper took") {
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

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		quiet          bool
		broken         int
	}{
		{
			name:  "quiet pass",
			quiet: true,
			in:    "=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\n=== RUN   TestB/sub\n    --- PASS: TestB/sub (0.00s)\n--- PASS: TestB (1.99s)\nPASS\n",
			want:  "PASS\n",
		},
		{
			name:   "quiet violation",
			quiet:  true,
			in:     "=== RUN   TestA\n--- PASS: TestA (2.50s)\nPASS\n",
			want:   "--- FAIL: TestA took 2.5s: longer than the default run's limit of 2s: move it to a long test (build tag long) or make it faster\nFAIL\n",
			broken: 1,
		},
		{
			name:  "quiet failure keeps its log",
			quiet: true,
			in:    "=== RUN   TestA\n    a_test.go:9: boom\n--- FAIL: TestA (0.00s)\nFAIL\n",
			want:  "    a_test.go:9: boom\n--- FAIL: TestA (0.00s)\nFAIL\n",
		},
		{
			name:   "failure and violation",
			quiet:  true,
			in:     "--- FAIL: TestA (3.00s)\nFAIL\n",
			want:   "--- FAIL: TestA (3.00s)\n--- FAIL: TestA took 3s: longer than the default run's limit of 2s: move it to a long test (build tag long) or make it faster\nFAIL\n",
			broken: 1,
		},
		{
			name:   "test2json",
			in:     "\x16=== RUN   TestA\n\x16--- PASS: TestA (2.01s)\n\x16PASS\n",
			want:   "\x16=== RUN   TestA\n\x16--- PASS: TestA (2.01s)\n--- FAIL: TestA took 2.01s: longer than the default run's limit of 2s: move it to a long test (build tag long) or make it faster\nFAIL\n",
			broken: 1,
		},
		{
			name:   "subtests count",
			quiet:  true,
			in:     "    --- PASS: TestA/sub (2.50s)\n--- PASS: TestA (0.00s)\nPASS\n",
			want:   "--- FAIL: TestA/sub took 2.5s: longer than the default run's limit of 2s: move it to a long test (build tag long) or make it faster\nFAIL\n",
			broken: 1,
		},
		{
			name:   "no final line",
			quiet:  true,
			in:     "--- PASS: TestA (9.00s)\npanic: boom\n",
			want:   "panic: boom\n--- FAIL: TestA took 9s: longer than the default run's limit of 2s: move it to a long test (build tag long) or make it faster\n",
			broken: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := &filter{limit: 2 * time.Second, quiet: tc.quiet, out: &out}
			for _, line := range strings.SplitAfter(tc.in, "\n") {
				if line != "" {
					f.line(line)
				}
			}
			f.end()
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
// filter counts the time it saw pass between the test's start and end. A
// test that calls t.Parallel counts its report alone.
func TestFilterWallTime(t *testing.T) {
	var clock time.Time
	step := func(d time.Duration) { clock = clock.Add(d) }
	var out bytes.Buffer
	f := &filter{limit: 2 * time.Second, quiet: true, out: &out, now: func() time.Time { return clock }}
	f.line("=== RUN   TestA\n")
	f.line("=== RUN   TestA/one\n")
	f.line("=== PAUSE TestA/one\n")
	f.line("=== RUN   TestA/two\n")
	f.line("=== PAUSE TestA/two\n")
	f.line("=== CONT  TestA/one\n")
	step(1500 * time.Millisecond)
	f.line("=== CONT  TestA/two\n")
	f.line("    --- PASS: TestA/one (1.50s)\n")
	step(1500 * time.Millisecond)
	f.line("    --- PASS: TestA/two (1.50s)\n")
	f.line("--- PASS: TestA (0.00s)\n")
	f.line("=== RUN   TestB\n")
	f.line("=== PAUSE TestB\n")
	step(5 * time.Second) // waits for the serial tests, and for a slot
	f.line("=== CONT  TestB\n")
	f.line("--- PASS: TestB (1.00s)\n")
	f.line("PASS\n")
	if len(f.broken) != 1 || f.broken[0].Test != "TestA" || f.broken[0].Elapsed != 3*time.Second {
		t.Errorf("violations %v, want TestA took 3s", f.broken)
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
