//go:build long

package walq

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// oldBuild is a released build of walq that must refuse a format-2
// directory without changing anything in it.
type oldBuild struct {
	name string // short name, for subtests and messages
	rev  string // full commit
	// createsLock: the build creates LOCK (and so changes the directory's
	// mtime) before it looks at the directory. No format-2 layout can stop
	// that in a directory without LOCK; the test allows exactly that
	// change, logs it, and fails on any other.
	createsLock bool
}

var oldBuilds = []oldBuild{
	// The first product: it refuses any file it does not know, but only
	// after it has created LOCK (recovery.go: lockDir before checkFiles).
	{"82292fa", "82292fa9d87dbbbcf3dd1a4099929f1cbfd2d677", true},
	// The build before format 2: it refuses a reserved name ("walq*" at
	// the top, 20 digits and an unknown suffix in log/) before it writes.
	{"4fb10c1", "4fb10c1331b754606b327efcdf979e59b6070bbd", false},
}

// format2Fixture is a queue directory written by the format-2 code. Until it
// is committed the test builds a stand-in (format2StandIn).
const format2Fixture = "testdata/format2"

// oldOpenMain is the program built against each old revision: it opens the
// directory with default options and says what happened. Exit 1 is a
// refusal, 0 an open (and Close).
const oldOpenMain = `package main

import (
	"fmt"
	"os"

	"github.com/walq/walq"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: oldopen DIR")
		os.Exit(2)
	}
	q, err := walq.Open(os.Args[1], walq.Options{})
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	fmt.Println("opened")
	if err := q.Close(); err != nil {
		fmt.Println("close:", err)
	}
}
`

// TestOldBuildsRefuseFormat2 builds each old revision of walq from the git
// history and opens a format-2 directory with it, twice: it must refuse, and
// the directory must be exactly as it was (every path, type, mode, size,
// mtime, inode and content hash). The directory is testdata/format2 when it
// exists, else a stand-in; each is also tried with only its marker and log/
// (no LOCK, no RESERVE), so a build that creates LOCK before it looks is
// caught.
//
// It needs git and the history (it skips in a shallow clone, or fails there
// when WALQ_OLDBUILD=require) and builds with the go command, with -trimpath
// so that a warm GOCACHE serves both builds.
func TestOldBuildsRefuseFormat2(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two old revisions of walq; not in -short mode")
	}
	skip := t.Skipf
	if os.Getenv("WALQ_OLDBUILD") == "require" {
		skip = t.Fatalf
	}
	repo := oldBuildRepo(t, skip)
	bins := buildOldBuilds(t, repo)

	src := format2Source(t)
	variants := []struct {
		name string
		keep func(rel string) bool // nil: everything
	}{
		{"all", nil},
		{"marker-and-log-only", func(rel string) bool {
			return rel == "WALQ-FORMAT" || rel == "log" || strings.HasPrefix(rel, "log/")
		}},
	}
	for _, b := range oldBuilds {
		for _, v := range variants {
			t.Run(b.name+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				dir := filepath.Join(t.TempDir(), "queue")
				copyFormat2Tree(t, src, dir, v.keep)
				before := dirManifest(t, dir)
				if _, ok := before["WALQ-FORMAT"]; !ok {
					t.Fatalf("%s has no WALQ-FORMAT: not a format-2 directory", src)
				}
				t.Logf("directory:\n%s", before)
				last := before
				for run := 1; run <= 2; run++ {
					out, code := runOldOpen(t, bins[b.name], dir)
					t.Logf("%s, run %d: exit %d: %s", b.name, run, code, out)
					if code != 1 || !strings.HasPrefix(out, "refused: ") {
						t.Errorf("%s, run %d: exit %d, %q: want a refusal (exit 1, \"refused: ...\")", b.name, run, code, out)
					} else if !namesNewer(out, before) {
						t.Errorf("%s, run %d: the refusal %q names no entry unknown to format 1 and says nothing of a newer format", b.name, run, out)
					}
					after := dirManifest(t, dir)
					want := before
					if b.createsLock {
						if w, ok := lockCreated(before, after); ok {
							want = w
							if _, had := last["LOCK"]; !had {
								t.Logf("KNOWN FINDING: %s, run %d, created LOCK in a directory without one:\n%s", b.name, run, before.diff(after))
							}
						}
					}
					if d := want.diff(after); d != "" {
						t.Errorf("%s, run %d: the open changed the directory:\n%s", b.name, run, before.diff(after))
					} else if d := last.diff(after); run > 1 && d != "" {
						t.Errorf("%s, run %d: the second open changed the directory further:\n%s", b.name, run, d)
					}
					last = after
				}
			})
		}
	}
}

// lockCreated reports whether after is before with an empty LOCK file
// created and the directory's mtime (and size) changed by it, and if so
// returns that manifest.
func lockCreated(before, after manifest) (manifest, bool) {
	lock, ok := after["LOCK"]
	if _, had := before["LOCK"]; had || !ok || !lock.Mode.IsRegular() || lock.Size != 0 {
		return nil, false
	}
	want := make(manifest, len(before)+1)
	for p, e := range before {
		want[p] = e
	}
	want["LOCK"] = lock
	root := want["."]
	root.MTime, root.Size = after["."].MTime, after["."].Size
	want["."] = root
	return want, true
}

// oldBuildRepo returns the top of the git work tree that holds this package,
// skipping (or failing, by skip) when git or an old revision is missing.
func oldBuildRepo(t *testing.T, skip func(string, ...any)) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skip("git is not installed: the old builds are made from the git history (%v)", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		skip("the go command is not on PATH: %v", err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		skip("not in a git work tree, so no old revisions to build: %v", err)
	}
	repo := strings.TrimSpace(string(top))
	for _, b := range oldBuilds {
		if exec.Command("git", "-C", repo, "cat-file", "-e", b.rev+"^{commit}").Run() != nil {
			why := "it is not in this repository"
			if out, _ := exec.Command("git", "-C", repo, "rev-parse", "--is-shallow-repository").Output(); strings.TrimSpace(string(out)) == "true" {
				why = "this is a shallow clone (git fetch --unshallow gets the history)"
			}
			skip("old revision %s (%s) is unavailable: %s", b.name, b.rev, why)
		}
	}
	return repo
}

// buildOldBuilds extracts each old revision into a temporary directory, adds
// oldOpenMain as cmd/oldopen and builds it, all revisions at once. It returns
// the binaries by short name.
func buildOldBuilds(t *testing.T, repo string) map[string]string {
	t.Helper()
	start := time.Now()
	bins := make(map[string]string)
	errs := make([]error, len(oldBuilds))
	var wg sync.WaitGroup
	for i, b := range oldBuilds {
		tree := t.TempDir()
		bin := filepath.Join(tree, "oldopen")
		bins[b.name] = bin
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = buildOldBuild(repo, b.rev, tree, bin)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("build %s: %w", b.name, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d old revisions in %v", len(oldBuilds), time.Since(start).Round(time.Millisecond))
	return bins
}

func buildOldBuild(repo, rev, tree, bin string) error {
	if err := extractRev(repo, rev, tree); err != nil {
		return err
	}
	main := filepath.Join(tree, "cmd", "oldopen", "main.go")
	if err := os.MkdirAll(filepath.Dir(main), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(main, []byte(oldOpenMain), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-mod=mod", "-o", bin, "./cmd/oldopen")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// extractRev writes the tree of rev into dir: git archive, read with
// archive/tar.
func extractRev(repo, rev, dir string) error {
	cmd := exec.Command("git", "-C", repo, "archive", "--format=tar", rev)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	terr := untar(out, dir)
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", rev, err, stderr.Bytes())
	}
	return terr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			if h.Typeflag == tar.TypeXGlobalHeader {
				continue
			}
			return fmt.Errorf("archive entry %q outside the tree", h.Name)
		}
		target := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeXGlobalHeader: // git's commit id
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		default:
			return fmt.Errorf("archive entry %q of type %q", h.Name, h.Typeflag)
		}
	}
}

// runOldOpen runs an old build's oldopen on dir and returns its output
// (stdout and stderr, trimmed) and exit code (-1 if it did not exit).
func runOldOpen(t *testing.T, bin, dir string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, dir).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return strings.TrimSpace(string(out)), 0
	case errors.As(err, &exit):
		return strings.TrimSpace(string(out)), exit.ExitCode()
	}
	t.Fatalf("run %s: %v", bin, err)
	return "", -1
}

// format1Name matches every name format 1 gives a file; namesNewer looks for
// the others in a refusal.
var format1Name = regexp.MustCompile(`^(LOCK|RESERVE|log|snapshot-\d{20}\.(snap|tmp)|log/\d{20}(\.START|\.END|\.START\.TEMP|\.END\.TEMP|\.broken(\.\d+)?)?)$`)

// namesNewer reports whether a refusal names an entry of m that format 1
// does not have, or says the directory is of a newer walq.
func namesNewer(msg string, m manifest) bool {
	if strings.Contains(msg, "newer walq") || strings.Contains(msg, "newer format") {
		return true
	}
	for rel := range m {
		if rel != "." && !format1Name.MatchString(rel) && strings.Contains(msg, filepath.Base(rel)) {
			return true
		}
	}
	return false
}

// format2Source returns the directory the test copies: testdata/format2 when
// it exists, else a stand-in built in a temporary directory.
func format2Source(t *testing.T) string {
	t.Helper()
	switch info, err := os.Stat(format2Fixture); {
	case err == nil && info.IsDir():
		t.Logf("format-2 directory: the fixture %s", format2Fixture)
		return format2Fixture
	case err == nil:
		t.Fatalf("%s is not a directory", format2Fixture)
	case !errors.Is(err, fs.ErrNotExist):
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "format2")
	format2StandIn(t, dir)
	t.Logf("format-2 directory: a stand-in (%s does not exist yet)", format2Fixture)
	return dir
}

// format2StandIn writes what a format-2 directory holds, as far as wal's
// format.go draws it: LOCK, RESERVE, the marker WALQ-FORMAT, and a first
// segment log/00000000000000000001.seg with its header and no frame.
func format2StandIn(t *testing.T, dir string) {
	t.Helper()
	id := wal.DirID{0x57, 0x41, 0x4c, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	seg := []byte("WALQLOG\n")
	seg = binary.BigEndian.AppendUint32(seg, wal.FormatVersion)
	seg = append(seg, id[:]...)
	seg = binary.BigEndian.AppendUint64(seg, 1) // first LSN
	seg = append(seg, "salt-of-segment1"...)
	seg = binary.BigEndian.AppendUint32(seg, crc32.Checksum(seg, crc32.MakeTable(crc32.Castagnoli)))
	if len(seg) != wal.SegmentHeaderSize {
		t.Fatalf("stand-in segment header of %d bytes, want %d", len(seg), wal.SegmentHeaderSize)
	}
	files := []struct {
		rel  string
		data []byte
	}{
		{"LOCK", nil},
		{"RESERVE", make([]byte, reserveSize)},
		{"WALQ-FORMAT", wal.EncodeMarker(id)},
		{"log/00000000000000000001.seg", seg},
	}
	for _, f := range files {
		path := filepath.Join(dir, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// copyFormat2Tree copies src to dst (which must not exist), only the entries
// keep accepts when keep is not nil (by path relative to src, with '/'), and
// then sets every mtime to a fixed time in the past, so that any the old
// build touches stands out.
func copyFormat2Tree(t *testing.T, src, dst string, keep func(rel string) bool) {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." && keep != nil && !keep(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, target)
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.WriteFile(target, data, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chmod(target, info.Mode().Perm()) // past the umask
		}
		return fmt.Errorf("%s: a %v, which the copy does not make", path, d.Type())
	})
	if err != nil {
		t.Fatal(err)
	}
	past := time.Date(2001, 2, 3, 4, 5, 6, 7e6, time.UTC)
	err = filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(path, past, past)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children first
		if err := os.Chtimes(dirs[i], past, past); err != nil {
			t.Fatal(err)
		}
	}
}

// manifest is what dirManifest found, by path relative to the directory
// ("." is the directory itself).
type manifest map[string]manifestEntry

type manifestEntry struct {
	Mode   fs.FileMode // type and permission bits
	Size   int64
	MTime  time.Time
	Inode  uint64
	Nlink  uint64
	SHA256 string // of a regular file's contents
	Link   string // a symbolic link's target
}

func (e manifestEntry) String() string {
	s := fmt.Sprintf("%v size=%d mtime=%s ino=%d nlink=%d", e.Mode, e.Size,
		e.MTime.UTC().Format("2006-01-02T15:04:05.000000000Z"), e.Inode, e.Nlink)
	if e.SHA256 != "" {
		s += " sha256=" + e.SHA256[:16] + "..."
	}
	if e.Link != "" {
		s += " -> " + e.Link
	}
	return s
}

// dirManifest records every entry under dir, recursively, without following
// links.
func dirManifest(t *testing.T, dir string) manifest {
	t.Helper()
	m := make(manifest)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		e := manifestEntry{Mode: info.Mode(), Size: info.Size(), MTime: info.ModTime()}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			e.Inode, e.Nlink = uint64(st.Ino), uint64(st.Nlink)
		}
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			e.SHA256 = hex.EncodeToString(sum[:])
		case info.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		m[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (m manifest) paths() []string {
	var out []string
	for p := range m {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (m manifest) String() string {
	var b strings.Builder
	for _, p := range m.paths() {
		fmt.Fprintf(&b, "  %-32s %v\n", p, m[p])
	}
	return b.String()
}

// diff describes every difference from m to after, one line each; "" when
// they are the same.
func (m manifest) diff(after manifest) string {
	var b strings.Builder
	for _, p := range m.paths() {
		was := m[p]
		now, ok := after[p]
		switch {
		case !ok:
			fmt.Fprintf(&b, "  removed %s (was %v)\n", p, was)
		case now != was:
			fmt.Fprintf(&b, "  changed %s:\n    was %v\n    now %v\n", p, was, now)
		}
	}
	for _, p := range after.paths() {
		if _, ok := m[p]; !ok {
			fmt.Fprintf(&b, "  created %s (%v)\n", p, after[p])
		}
	}
	return b.String()
}

// previousRelease is the last build before records took tagged fields
// (state/fields.go): it knows no trailing map of fields.
var previousRelease = oldBuild{"e12ac90", "e12ac906dece9066b790dd3a6431c144b416aa73", false}

// TestPreviousReleaseRefusesTaggedFields builds the previous release and
// opens the fixtures a newer walq wrote with tagged fields, twice each:
// the one with optional fields only and the one with a required field. It
// knows neither kind, so it must refuse both (as damage it cannot account
// for: it predates ErrNewerFormat for fields) and change nothing in them;
// a directory that uses no new field, written by this build, it opens.
func TestPreviousReleaseRefusesTaggedFields(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an old revision of walq; not in -short mode")
	}
	skip := t.Skipf
	if os.Getenv("WALQ_OLDBUILD") == "require" {
		skip = t.Fatalf
	}
	repo := oldBuildRepo(t, skip)
	if exec.Command("git", "-C", repo, "cat-file", "-e", previousRelease.rev+"^{commit}").Run() != nil {
		skip("the previous release %s is not in this repository", previousRelease.rev)
	}
	bin := filepath.Join(t.TempDir(), "oldopen")
	if err := buildOldBuild(repo, previousRelease.rev, t.TempDir(), bin); err != nil {
		t.Fatal(err)
	}
	for _, fixture := range []string{"testdata/format2-fields", "testdata/format2-fields-required"} {
		dir := filepath.Join(t.TempDir(), "queue")
		copyFormat2Tree(t, fixture, dir, nil)
		before := dirManifest(t, dir)
		for run := 1; run <= 2; run++ {
			out, code := runOldOpen(t, bin, dir)
			t.Logf("%s, run %d: exit %d: %s", fixture, run, code, out)
			if code != 1 || !strings.HasPrefix(out, "refused: ") {
				t.Errorf("%s, run %d: exit %d, %q: want a refusal", fixture, run, code, out)
			}
			if d := before.diff(dirManifest(t, dir)); d != "" {
				t.Errorf("%s, run %d: the refused open changed the directory:\n%s", fixture, run, d)
			}
		}
	}
	// walq-features, which a required feature adds, turns it away at the
	// door: a refusal as newer, naming the file, nothing changed.
	door := filepath.Join(t.TempDir(), "door")
	copyFormat2Tree(t, "testdata/format2-fields-required", door, nil)
	must(t, os.WriteFile(filepath.Join(door, "walq-features"), []byte("item-attempts\n"), 0o600))
	before := dirManifest(t, door)
	if out, code := runOldOpen(t, bin, door); code != 1 || !strings.Contains(out, "walq-features") || !strings.Contains(out, "newer") {
		t.Errorf("with walq-features: exit %d, %q: want a refusal as newer naming it", code, out)
	}
	if d := before.diff(dirManifest(t, door)); d != "" {
		t.Errorf("with walq-features: the refused open changed the directory:\n%s", d)
	}
	// A directory this build writes without any new field stays readable.
	dir := filepath.Join(t.TempDir(), "plain")
	q, err := Open(dir, Options{})
	must(t, err)
	mustPut(t, q, "plain")
	must(t, q.Close())
	if out, code := runOldOpen(t, bin, dir); code != 0 || out != "opened" {
		t.Fatalf("the previous release on a directory of this build: exit %d, %q", code, out)
	}
}
