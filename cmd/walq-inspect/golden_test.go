package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenCase is one run of the tool over a fixture; its stdout, stderr and
// exit status are compared with testdata/<fixture>-<name>.golden.
type goldenCase struct {
	fixture string
	name    string
	args    []string // before the directory; "{now}" becomes the fixture's closing time
	after   []string // after the directory
}

var goldenCases = []goldenCase{
	{"normal", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"normal", "default-command", []string{"--now", "{now}"}, nil},
	{"normal", "log", []string{"log"}, nil},
	{"normal", "log-json", []string{"log", "--json"}, nil},
	{"normal", "log-item-2", []string{"log", "--item", "2"}, nil},
	{"normal", "log-types-range", []string{"log", "--type", "lease,nack,expire", "--from", "9", "--to", "20"}, nil},
	{"normal", "log-follow-to", []string{"log", "--follow", "--interval", "1ms", "--from", "18", "--to", "21"}, nil},
	{"normal", "item-1-acked", []string{"item", "--now", "{now}"}, []string{"1"}},
	{"normal", "item-2-dead", []string{"item", "--now", "{now}"}, []string{"2"}},
	{"normal", "item-4-discarded", []string{"item", "--now", "{now}"}, []string{"4"}},
	{"normal", "item-5-redriven", []string{"item", "--now", "{now}"}, []string{"5"}},
	{"normal", "item-6-expired", []string{"item", "--now", "{now}", "--body-max", "20"}, []string{"6"}},
	{"normal", "item-99-unknown", []string{"item"}, []string{"99"}},
	{"normal", "state", []string{"state", "--now", "{now}"}, nil},
	{"normal", "state-at-10", []string{"state", "--at", "10"}, nil},
	{"normal", "state-json", []string{"state", "--json", "--now", "{now}"}, nil},
	{"normal", "dead", []string{"dead"}, nil},
	{"normal", "dead-body", []string{"dead", "--body"}, nil},
	{"normal", "verify", []string{"verify"}, nil},
	{"normal", "space", []string{"space"}, nil},

	{"empty", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"empty", "log", []string{"log"}, nil},
	{"empty", "state", []string{"state", "--now", "{now}"}, nil},
	{"empty", "dead", []string{"dead"}, nil},
	{"empty", "verify", []string{"verify"}, nil},
	{"empty", "space", []string{"space"}, nil},

	{"torn", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"torn", "log", []string{"log"}, nil},
	{"torn", "verify", []string{"verify"}, nil},

	{"badcrc", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"badcrc", "log", []string{"log", "--from", "7", "--to", "12"}, nil},
	{"badcrc", "verify", []string{"verify"}, nil},
	{"badcrc", "state", []string{"state", "--now", "{now}"}, nil},

	{"compacting", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"compacting", "log", []string{"log"}, nil},
	{"compacting", "item-10", []string{"item", "--now", "{now}"}, []string{"10"}},
	{"compacting", "item-41", []string{"item", "--now", "{now}"}, []string{"41"}},
	{"compacting", "state-at-before-log", []string{"state", "--at", "5"}, nil},
	{"compacting", "verify", []string{"verify"}, nil},
	{"compacting", "space", []string{"space"}, nil},

	{"synced", "log", []string{"log"}, nil},
	{"synced", "log-frames", []string{"log", "--frames"}, nil},
	{"synced", "log-frames-json", []string{"log", "--frames", "--json", "--from", "5", "--to", "8"}, nil},
	{"synced", "verify", []string{"verify"}, nil},

	{"torn", "log-frames", []string{"log", "--frames"}, nil},

	{"outoforder", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"outoforder", "log-frames", []string{"log", "--frames"}, nil},
	{"outoforder", "verify", []string{"verify"}, nil},

	{"promised", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"promised", "log-frames", []string{"log", "--frames"}, nil},
	{"promised", "verify", []string{"verify"}, nil},

	{"future", "summary", []string{"summary"}, nil},
	{"future", "verify", []string{"verify"}, nil},

	{"foreign", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"foreign", "verify", []string{"verify"}, nil},

	{"format1", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"format1", "log", []string{"log", "--to", "30"}, nil},
	{"format1", "verify", []string{"verify"}, nil},
	{"format1", "state", []string{"state", "--now", "{now}"}, nil},
	{"format1", "dead", []string{"dead"}, nil},
	{"format1", "space", []string{"space"}, nil},

	{"named", "summary", []string{"summary", "--now", "{now}"}, nil},
	{"named", "summary-jobs", []string{"summary", "--now", "{now}", "--queue", "jobs"}, nil},
	{"named", "summary-default", []string{"summary", "--now", "{now}", "--queue", "(default)"}, nil},
	{"named", "log", []string{"log"}, nil},
	{"named", "log-json", []string{"log", "--json", "--type", "create-queue,set-queue,pause-queue,delete-queue"}, nil},
	{"named", "log-reports", []string{"log", "--queue", "reports"}, nil},
	{"named", "log-default", []string{"log", "--queue", "(default)"}, nil},
	{"named", "item-4-history", []string{"item", "--now", "{now}", "--queue", "jobs"}, []string{"4"}},
	{"named", "item-5-deleted", []string{"item", "--now", "{now}"}, []string{"5"}},
	{"named", "item-2-mail", []string{"item", "--now", "{now}"}, []string{"2"}},
	{"named", "dead", []string{"dead"}, nil},
	{"named", "dead-jobs", []string{"dead", "--queue", "jobs"}, nil},
	{"named", "dead-mail", []string{"dead", "--queue", "mail"}, nil},
	{"named", "state", []string{"state", "--now", "{now}"}, nil},
	{"named", "state-mail", []string{"state", "--now", "{now}", "--queue", "mail"}, nil},
	{"named", "state-json-jobs", []string{"state", "--json", "--now", "{now}", "--queue", "jobs"}, nil},
	{"named", "verify", []string{"verify"}, nil},
	{"named", "space", []string{"space"}, nil},
	{"named", "bad-queue", []string{"summary", "--queue", "nope"}, nil},
}

func TestGolden(t *testing.T) {
	for _, gc := range goldenCases {
		t.Run(gc.fixture+"/"+gc.name, func(t *testing.T) {
			t.Parallel()
			f := fixtureNamed(t, gc.fixture)
			var args []string
			for _, a := range gc.args {
				args = append(args, strings.ReplaceAll(a, "{now}", f.now.Format(time.RFC3339Nano)))
			}
			args = append(append(args, f.dir), gc.after...)
			stdout, stderr, code := inspect(args...)
			got := fmt.Sprintf("$ walq-inspect %s\n%s--- stderr\n%s--- exit %d\n",
				strings.Join(args, " "), stdout, stderr, code)
			got = strings.ReplaceAll(got, f.dir, "$DIR")
			got = hideDirIDs(got, f.dir)
			checkGolden(t, filepath.Join("testdata", gc.fixture+"-"+gc.name+".golden"), got)
		})
	}
}

// A directory ID is random: goldens show the fixture's own as $DIRID and any
// other (of a segment or snapshot copied in) as $OTHERID.
var dirIDPattern = regexp.MustCompile(`\b[0-9a-f]{32}\b`)

func hideDirIDs(out, dir string) string {
	if data, err := os.ReadFile(filepath.Join(dir, layout.MarkerName)); err == nil {
		if id, err := wal.DecodeMarker(data); err == nil {
			out = strings.ReplaceAll(out, id.String(), "$DIRID")
		}
	}
	return dirIDPattern.ReplaceAllString(out, "$$OTHERID")
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test -update to accept it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// Every golden output is free of raw control bytes, whatever the bodies,
// keys and causes in the log hold.
func TestGoldenOutputHasNoControlBytes(t *testing.T) {
	files, err := filepath.Glob("testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range string(data) {
			if r != '\n' && !isPrintable(string(r)) {
				t.Errorf("%s: byte %d: non-printing rune %U", path, i, r)
			}
		}
	}
}
