package testrule

import (
	"go/ast"
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
// TestMain that calls Main or MainFunc, so no test escapes the rule.
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
		dirs[dir] = dirs[dir] || callsRule(file)
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

// callsRule reports whether file has a TestMain that calls Main or MainFunc
// of this package (from outside it, or, here, from inside).
func callsRule(file *ast.File) bool {
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "TestMain" || fn.Recv != nil || fn.Body == nil {
			continue
		}
		found := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch f := call.Fun.(type) {
			case *ast.SelectorExpr:
				if x, ok := f.X.(*ast.Ident); ok && x.Name == "testrule" && (f.Sel.Name == "Main" || f.Sel.Name == "MainFunc") {
					found = true
				}
			case *ast.Ident:
				if file.Name.Name == "testrule" && (f.Name == "Main" || f.Name == "MainFunc") {
					found = true
				}
			}
			return true
		})
		if found {
			return true
		}
	}
	return false
}
