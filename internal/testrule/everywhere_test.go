package testrule

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the directory of the core module's go.mod, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// Every directory of the repository (both modules) that holds tests has a
// TestMain that ends in a call of Main or MainFunc, in a file every build
// of the tests takes (with -race or not, with the tag long or not), so no
// test escapes the rule.
func TestEveryPackageHoldsTheRule(t *testing.T) {
	root := repoRoot(t)
	dirs := map[string]bool{} // directory -> a TestMain calls the rule
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if !callsRule(file) {
			dirs[dir] = dirs[dir] || false
			return nil
		}
		for _, tags := range [][]string{nil, {"race"}, {"long"}, {"race", "long"}} {
			ctx := build.Default
			ctx.BuildTags = tags
			if ok, err := ctx.MatchFile(dir, name); err != nil || !ok {
				t.Errorf("%s: its TestMain is left out of a build with tags %q", path, tags)
				return nil
			}
		}
		dirs[dir] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for dir, ok := range dirs {
		if !ok {
			rel, _ := filepath.Rel(root, dir)
			missing = append(missing, rel)
		}
	}
	sort.Strings(missing)
	for _, dir := range missing {
		t.Errorf("%s: no TestMain calls testrule.Main or testrule.MainFunc", dir)
	}
	if len(dirs) < 10 {
		t.Errorf("found tests in %d directories only: the walk is wrong", len(dirs))
	}
}

// callsRule reports whether file has a TestMain whose last statement calls
// Main or MainFunc of this package (from outside it, or, here, from
// inside): statements before it may run something else in a process the
// tests start (a child of a crash test, say), but none can skip the rule
// in the process go test starts and then return to it.
func callsRule(file *ast.File) bool {
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "TestMain" || fn.Recv != nil || fn.Body == nil || len(fn.Body.List) == 0 {
			continue
		}
		last, ok := fn.Body.List[len(fn.Body.List)-1].(*ast.ExprStmt)
		if !ok {
			continue
		}
		call, ok := last.X.(*ast.CallExpr)
		if !ok {
			continue
		}
		switch f := call.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := f.X.(*ast.Ident); ok && x.Name == "testrule" && (f.Sel.Name == "Main" || f.Sel.Name == "MainFunc") {
				return true
			}
		case *ast.Ident:
			if file.Name.Name == "testrule" && (f.Name == "Main" || f.Name == "MainFunc") {
				return true
			}
		}
	}
	return false
}

// TestCallsRule: a TestMain counts when its last statement calls the rule,
// and only then.
func TestCallsRule(t *testing.T) {
	for src, want := range map[string]bool{
		`func TestMain(m *testing.M) { testrule.Main(m) }`:                                      true,
		`func TestMain(m *testing.M) { if child() { return }; testrule.MainFunc(m.Run) }`:       true,
		`func TestMain(m *testing.M) { if false { testrule.Main(m) } }`:                         false,
		`func TestMain(m *testing.M) { if os.Getenv("X") != "" { testrule.Main(m) }; m.Run() }`: false,
		`func TestMain(m *testing.M) { testrule.Main(m); os.Exit(m.Run()) }`:                    false,
		`func TestMain(m *testing.M) { os.Exit(m.Run()) }`:                                      false,
	} {
		file, err := parser.ParseFile(token.NewFileSet(), "x_test.go", "package x\n"+src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := callsRule(file); got != want {
			t.Errorf("%s: callsRule = %v, want %v", src, got, want)
		}
	}
}
