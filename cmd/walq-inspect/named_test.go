package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// A --queue that names no queue is an error of every command that takes
// it, and the error names the queues there are. It comes before anything
// is printed, but for verify, which checks the files before it rebuilds
// the state.
func TestBadQueueEveryCommand(t *testing.T) {
	named := fixtureNamed(t, "named").dir
	n := 0
	for _, c := range commands {
		if c.name == "serve" {
			continue // the dashboard shows every queue, and picks one per page
		}
		args := []string{c.name, "--queue", "nope", named}
		if c.name == "item" {
			args = append(args, "4")
		}
		n++
		stdout, stderr, code := inspect(args...)
		want := `no queue "nope" in the directory at index 34; its queues are (default), mail, jobs, reports`
		if code != exitFailed || (stdout != "") != (c.name == "verify") || !strings.Contains(stderr, want) {
			t.Errorf("%v: exit %d, want %d and nothing on stdout\n--- stdout\n%s--- stderr\n%s", args, code, exitFailed, stdout, stderr)
		}
	}
	if n != 7 {
		t.Errorf("%d commands take --queue, want 7", n)
	}
}

func TestQueueFlag(t *testing.T) {
	named := fixtureNamed(t, "named").dir
	normal := fixtureNamed(t, "normal").dir
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // a part of stdout
		stderr string // a part of stderr
	}{
		{"a name that cannot be one", []string{"summary", "--queue", "bad name", named}, exitFailed, "",
			`byte 3 (' ') is not allowed`},
		{"default-only directory", []string{"dead", "--queue", "jobs", normal}, exitFailed, "",
			`its queues are (default) (`},
		{"default queue of a default-only directory", []string{"summary", "--queue", "(default)", "--now", "2026-01-02T03:04:37Z", normal},
			exitOK, "(default)  0   2      2        1       2     32s", ""},
		{"item in another queue", []string{"item", "--queue", "mail", named, "4"}, exitFailed, "",
			`item 4: it is in queue jobs (id 3), not in queue "mail"`},
		{"item of the default queue asked in a named one", []string{"item", "--queue", "jobs", named, "1"}, exitFailed, "",
			`item 1: it is in the default queue, not in queue "jobs"`},
		{"item gone with its queue", []string{"item", "--queue", "reports", named, "5"}, exitOK,
			"deleted with its queue reports (id 4)", ""},
		{"item gone, asked in another queue", []string{"item", "--queue", "jobs", named, "5"}, exitFailed, "",
			`no record read that changed it is of a queue called "jobs"`},
		{"frames with a queue", []string{"log", "--frames", "--queue", "jobs", named}, exitUsage, "",
			"it takes none of --type, --item and --queue"},
		{"log of one queue and one type", []string{"log", "--queue", "mail", "--type", "pause-queue", named}, exitOK,
			"     34  2026-01-02T03:04:17.000Z  pause-queue   mail ", ""},
		{"log of a queue with an item", []string{"log", "--queue", "jobs", "--item", "8", "--json", named}, exitOK,
			`"index":27,"queue":3,`, ""},
		{"verify one queue", []string{"verify", "--queue", "jobs", named}, exitOK, "queues    1 queue: jobs (id 3, 4 items)", ""},
		{"space of one queue", []string{"space", "--queue", "mail", named}, exitOK, "  mail      ~152 B: 24 B of bodies in 2 items\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := inspect(tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, want %d; want %q in stdout, %q in stderr\n--- stdout\n%s--- stderr\n%s",
					code, tc.code, tc.stdout, tc.stderr, stdout, stderr)
			}
		})
	}
}

// The log of --queue NAME holds the records of every incarnation of the
// name and nothing else, and those of --queue (default) no record of a
// named queue.
func TestLogQueueSelects(t *testing.T) {
	named := fixtureNamed(t, "named").dir
	all := logJSON(t, named)
	for _, sel := range []string{"mail", "jobs", "reports", "(default)"} {
		got := logJSON(t, named, "--queue", sel)
		var want []uint64
		for _, ev := range all {
			name := ev.QueueName
			if name == "" {
				name = defaultQueueName
			}
			if name == sel {
				want = append(want, ev.Index)
			}
		}
		var idx []uint64
		for _, ev := range got {
			idx = append(idx, ev.Index)
		}
		if len(want) == 0 || !equalIDs(idx, want) {
			t.Errorf("--queue %s: records %v, want %v", sel, idx, want)
		}
	}
}

type logLine struct {
	Index     uint64 `json:"index"`
	Queue     uint64 `json:"queue"`
	QueueName string `json:"queue_name"`
}

func logJSON(t *testing.T, dir string, args ...string) []logLine {
	t.Helper()
	stdout, stderr, code := inspect(append(append([]string{"log", "--json"}, args...), dir)...)
	if code != exitOK {
		t.Fatalf("log %v: exit %d: %s", args, code, stderr)
	}
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, ll)
	}
	return out
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// No fixture writes a move (the root package cannot redrive into another
// queue yet): its text and JSON are checked on a made-up record.
func TestMoveRecord(t *testing.T) {
	ev := &event{Pos: wal.Position{Index: 40}, Type: state.TypeMove, Queue: 3, QueueName: "jobs", QueueKnown: true,
		Rec: &state.Move{Time: 1, Target: 16, IDs: []uint64{4, 8}}, IDs: []uint64{4, 8}, IDsKnown: true,
		TargetName: "reports", TargetKnown: true}
	if got, want := eventDetails(ev, 0), "items 4,8 into queue reports (id 16)"; got != want {
		t.Errorf("details %q, want %q", got, want)
	}
	if !queueMatch(ev, "jobs") || !queueMatch(ev, "reports") || queueMatch(ev, "mail") || queueMatch(ev, defaultQueueName) {
		t.Errorf("a move from jobs into reports is of both, and of no other queue")
	}
	data, err := json.Marshal(newJSONEvent(ev))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"queue":3,`, `"items":[4,8]`, `"queue_name":"jobs"`, `"target":16,"target_name":"reports"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("JSON %s lacks %s", data, want)
		}
	}
	ev.TargetKnown, ev.TargetName = false, ""
	if got, want := eventDetails(ev, 0), "items 4,8 into queue 16"; got != want {
		t.Errorf("details %q, want %q", got, want)
	}
	ev.Rec.(*state.Move).Target = state.DefaultQueue
	if got, want := eventDetails(ev, 0), "items 4,8 into the default queue"; got != want || !queueMatch(ev, defaultQueueName) {
		t.Errorf("details %q, want %q, and of the default queue", got, want)
	}
}
