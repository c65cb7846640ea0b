package walq_test

import (
	"bufio"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Go snippets of the README, docs/ and jetstream/README.md compile and
// run: each is copied from an Example function of its module, which go test
// compiles and, where it has an Output comment, runs. A snippet that is
// not found there fails this test with its file and line.
func TestDocSnippetsAreExamples(t *testing.T) {
	core := exampleBodies(t, ".", "jetstream")
	js := exampleBodies(t, "jetstream")
	docs := []string{"README.md"}
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, pages...)
	checked := 0
	for _, doc := range append(docs, filepath.Join("jetstream", "README.md")) {
		examples := core
		if strings.HasPrefix(doc, "jetstream") {
			examples = js
		}
		for _, s := range goSnippets(t, doc) {
			checked++
			if !containsRun(examples, s.lines) {
				t.Errorf("%s:%d: this Go snippet is in no Example function of its module; copy it from one (or tag the block as text if it is not Go):\n%s",
					doc, s.line, strings.Join(s.lines, "\n"))
			}
		}
	}
	if checked == 0 {
		t.Error("no Go snippet found in the README and docs/: the search is wrong")
	}
}

// TestContainsRun: a snippet matches a run of consecutive lines, compared
// without their indentation, and nothing else.
func TestContainsRun(t *testing.T) {
	bodies := [][]string{{"a", "b", "c"}, {"x", "y"}}
	for _, tc := range []struct {
		snippet []string
		want    bool
	}{
		{[]string{"b", "c"}, true},
		{[]string{"a", "b", "c"}, true},
		{[]string{"x"}, true},
		{[]string{"a", "c"}, false},
		{[]string{"c", "x"}, false},
		{[]string{"d"}, false},
	} {
		if got := containsRun(bodies, tc.snippet); got != tc.want {
			t.Errorf("containsRun(%q) = %v, want %v", tc.snippet, got, tc.want)
		}
	}
}

func TestIsGoFence(t *testing.T) {
	for line, want := range map[string]bool{
		"```go": true, "```Go": true, "```golang": true, "~~~go": true, "``` go": true, "```go title": true,
		"```": false, "```sh": false, "```text": false, "~~~": false, "go": false,
	} {
		if got := isGoFence(line); got != want {
			t.Errorf("isGoFence(%q) = %v, want %v", line, got, want)
		}
	}
}

type snippet struct {
	line  int    // of the fence
	fence string // ``` or ~~~
	lines []string
}

// isGoFence reports whether a Markdown line opens a fenced block of Go:
// ``` or ~~~ with the info string go or golang, in any case.
func isGoFence(line string) bool {
	if !strings.HasPrefix(line, "```") && !strings.HasPrefix(line, "~~~") {
		return false
	}
	info := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, line[:1])))
	lang, _, _ := strings.Cut(info, " ")
	return lang == "go" || lang == "golang"
}

// goSnippets returns the fenced ```go blocks of a Markdown file, each line
// trimmed, blank lines dropped.
func goSnippets(t *testing.T, path string) []snippet {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case cur == nil && isGoFence(line):
			cur = &snippet{line: n, fence: line[:3]}
		case cur != nil && line == cur.fence:
			out = append(out, *cur)
			cur = nil
		case cur != nil && line != "":
			cur.lines = append(cur.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: a ```go block is never closed", path, cur.line)
	}
	return out
}

// exampleBodies returns the lines (trimmed, blank ones dropped) of the body
// of every Example function in the _test.go files under root, leaving out
// the directories named in skip (another module).
func exampleBodies(t *testing.T, root string, skip ...string) [][]string {
	t.Helper()
	var bodies [][]string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			for _, s := range skip {
				if path == s {
					return filepath.SkipDir
				}
			}
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		// Only what go test compiles counts (not a file left out by its
		// build constraints).
		if ok, err := build.Default.MatchFile(filepath.Dir(path), d.Name()); err != nil || !ok {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			text := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
			var lines []string
			for _, l := range strings.Split(text, "\n") {
				if l = strings.TrimSpace(l); l != "" {
					lines = append(lines, l)
				}
			}
			bodies = append(bodies, lines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bodies
}

// containsRun reports whether one of bodies holds lines as consecutive
// lines.
func containsRun(bodies [][]string, lines []string) bool {
	if len(lines) == 0 {
		return true
	}
	for _, body := range bodies {
		for i := 0; i+len(lines) <= len(body); i++ {
			match := true
			for j, l := range lines {
				if body[i+j] != l {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}
