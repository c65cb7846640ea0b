package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/walq/walq/internal/layout"
)

func TestExitCodes(t *testing.T) {
	normal := fixtureNamed(t, "normal").dir
	notQueue := t.TempDir()
	if err := os.WriteFile(filepath.Join(notQueue, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // a part of stdout
		stderr string // a part of stderr
	}{
		{"no arguments", nil, exitUsage, "", "usage: walq-inspect [command]"},
		{"top help", []string{"-h"}, exitOK, "commands:", ""},
		{"help command", []string{"help", "log"}, exitOK, "usage: walq-inspect log [flags] DIR", ""},
		{"help unknown", []string{"help", "nope"}, exitUsage, "", "unknown command"},
		{"command help", []string{"verify", "-h"}, exitOK, "by the watermarks the frames state", ""},
		{"every command has help", []string{"space", "--help"}, exitOK, "--min-bytes", ""},
		{"no directory", []string{"log"}, exitUsage, "", "no queue directory given"},
		{"unknown flag", []string{"log", "--nope", normal}, exitUsage, "", "flag provided but not defined: -nope"},
		{"bad type", []string{"log", "--type", "put,bogus", normal}, exitUsage, "", `unknown record type "bogus"`},
		{"from after to", []string{"log", "--from", "9", "--to", "3", normal}, exitUsage, "", "--from 9 is after --to 3"},
		{"item without id", []string{"item", normal}, exitUsage, "", "item takes two arguments"},
		{"item bad id", []string{"item", normal, "x1"}, exitUsage, "", `"x1" is not a positive integer`},
		{"extra argument", []string{"summary", normal, "more"}, exitUsage, "", "summary takes one argument"},
		{"bad now", []string{"summary", "--now", "yesterday", normal}, exitUsage, "", "invalid value"},
		{"flags after the directory", []string{"log", normal, "--type", "ack", "--json"}, exitOK, `"type":"ack"`, ""},
		{"missing directory", []string{"summary", filepath.Join(notQueue, "missing")}, exitFailed, "", "no such file"},
		{"not a queue", []string{"verify", notQueue}, exitFailed, "", "is not a walq queue directory"},
		{"the log directory itself", []string{"summary", filepath.Join(normal, layout.LogDirName)}, exitFailed, "",
			"looks like the log directory itself"},
		{"state past the end", []string{"state", "--at", "999", normal}, exitFailed, "", "past the end of the log"},
		{"frames with a type", []string{"log", "--frames", "--type", "put", normal}, exitUsage, "", "--frames lists frames"},
		{"frames of format 1", []string{"log", "--frames", fixtureNamed(t, "format1").dir}, exitFailed, "", "is of format 1, which has no frames"},
	}
	for _, c := range commands {
		args := []string{c.name, fixtureNamed(t, "future").dir}
		if c.name == "item" {
			args = append(args, "1")
		}
		cases = append(cases, struct {
			name   string
			args   []string
			code   int
			stdout string
			stderr string
		}{"a marker of a newer walq: " + c.name, args, exitFailed, "",
			"WALQ-FORMAT: written by a newer walq (format version 3, this build reads up to 2)"})
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

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands {
		stdout, stderr, code := inspect(c.name, "-h")
		if code != exitOK || !strings.HasPrefix(stdout, "usage: walq-inspect "+c.name) || stderr != "" {
			t.Errorf("%s -h: exit %d\n%s%s", c.name, code, stdout, stderr)
		}
	}
}

func TestQuoteBody(t *testing.T) {
	cases := []struct {
		body string
		max  int
		want string
	}{
		{"hello", 64, `"hello" (5 B)`},
		{"", 64, `"" (0 B)`},
		{"tab\tnewline\nbell\a", 64, `"tab\tnewline\nbell\a" (17 B)`},
		{"\x1b[2J\x9b31m", 64, `"\x1b[2J\x9b31m" (8 B)`},
		{"c1 \u009b csi", 64, `"c1 \u009b csi" (9 B)`},
		{"bidi \u202e override", 64, `"bidi \u202e override" (17 B)`},
		{"\xff\xfe binary", 64, `"\xff\xfe binary" (9 B)`},
		{"héllo wörld", 64, `"héllo wörld" (13 B)`},
		{"abcdefghij", 4, `"abcd"… (10 B)`},
		{"ééééé", 3, `"é"… (10 B)`}, // never half a rune
		{"ééééé", 0, `"ééééé" (10 B)`},
		{"\xff\xff\xff\xff\xff\xff", 3, `"\xff\xff\xff"… (6 B)`},
	}
	for _, tc := range cases {
		if got := quoteBody([]byte(tc.body), tc.max); got != tc.want {
			t.Errorf("quoteBody(%q, %d) = %s, want %s", tc.body, tc.max, got, tc.want)
		}
	}
}

func TestJSONStringEscapesWhatDoesNotPrint(t *testing.T) {
	in := "ok \x1b[2J \u009b \u202e \U000e0041 <tag> \"q\" \\ \xff é"
	out, err := json.Marshal(jsonString(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range string(out) {
		if r == utf8.RuneError || (r != ' ' && !isPrintable(string(r))) {
			t.Errorf("raw %U in %s", r, out)
		}
	}
	var back string
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("%s does not decode: %v", out, err)
	}
	if want := strings.ToValidUTF8(in, "\uFFFD"); back != want {
		t.Errorf("round trip: got %q, want %q", back, want)
	}
}

func TestJSONBodyIsLossless(t *testing.T) {
	for _, body := range []string{"text", "\x00\x1b\xff binary", "", "é\u202e"} {
		data, err := json.Marshal(newJSONBody([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Body   *string `json:"body"`
			Base64 []byte  `json:"body_base64"`
			Len    int     `json:"body_len"`
		}
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		back := string(got.Base64)
		if got.Body != nil {
			back = *got.Body
		}
		if back != body || got.Len != len(body) {
			t.Errorf("%q came back as %q (len %d) from %s", body, back, got.Len, data)
		}
	}
}

func TestFmtIDs(t *testing.T) {
	cases := map[string][]uint64{
		"1":          {1},
		"1,2":        {1, 2},
		"1-3":        {1, 2, 3},
		"1-3,7,9,10": {1, 2, 3, 7, 9, 10},
		"":           nil,
	}
	for want, ids := range cases {
		if got := fmtIDs(ids); got != want {
			t.Errorf("fmtIDs(%v) = %q, want %q", ids, got, want)
		}
	}
}

// A damaged marker is corruption (verify, summary: exit 1); the commands
// that print what the directory holds go on without the directory ID and
// say so on stderr.
func TestDamagedMarker(t *testing.T) {
	dir := copyDir(t, fixtureNamed(t, "normal").dir)
	flipMarkerByte(20)(t, dir)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"summary", dir}, exitFailed, "format    PROBLEM: walq: corrupt directory " + dir + ": file WALQ-FORMAT offset 0: format marker crc mismatch", ""},
		{[]string{"verify", dir}, exitFailed, "format marker crc mismatch: walq.Open refuses the directory", ""},
		{[]string{"log", dir}, exitOK, "resize image 1", "the directory ID is not known"},
		{[]string{"state", dir}, exitOK, "state at index 27", "the directory ID is not known"},
		{[]string{"item", dir, "2"}, exitOK, "dead since", "the directory ID is not known"},
	} {
		stdout, stderr, code := inspect(tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, want %d; want %q in stdout, %q in stderr\n--- stdout\n%s--- stderr\n%s",
				tc.args, code, tc.code, tc.stdout, tc.stderr, stdout, stderr)
		}
	}
}
