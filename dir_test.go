package walq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// TestOpenDirectoryRules: what Open does with the directories users really
// have. Every case names its outcome: it opens (listing the foreign entries
// it warned about), or it is refused with a sentinel and the directory is
// left exactly as it was.
func TestOpenDirectoryRules(t *testing.T) {
	type setup func(t *testing.T, dir string)
	cases := []struct {
		name    string
		queue   bool  // start from a closed queue with one item, not an empty directory
		setup   setup // then this
		wantErr error // nil: Open succeeds
		// On success: the foreign entries reported. On refusal: text the
		// error must hold.
		wantForeign []string
		wantText    string
	}{
		{name: "empty directory"},
		{name: "lost+found only", setup: mkdir("lost+found")},
		{name: "dotfiles in a new directory", setup: all(write(".DS_Store"), mkdir(".snapshot"))},
		{name: "dotfiles and lost+found in a queue", queue: true,
			setup: all(write(".nfs0001"), mkdir("lost+found"), write("log/.swp"), mkdir("log/lost+found"))},
		{name: "foreign file in an existing queue", queue: true, setup: write("notes.txt"),
			wantForeign: []string{"notes.txt"}},
		{name: "foreign directory in an existing queue", queue: true, setup: mkdir("backup"),
			wantForeign: []string{"backup"}},
		{name: "foreign file in the log directory", queue: true, setup: write("log/README"),
			wantForeign: []string{"log/README"}},
		{name: "segment-like name at the top of a queue", queue: true, setup: write("00000000000000000001"),
			wantForeign: []string{"00000000000000000001"}},
		{name: "log directory behind a symbolic link", queue: true, setup: func(t *testing.T, dir string) {
			moved := filepath.Join(t.TempDir(), "elsewhere")
			must(t, os.Rename(filepath.Join(dir, layout.LogDirName), moved))
			must(t, os.Symlink(moved, filepath.Join(dir, layout.LogDirName)))
		}},

		{name: "foreign file in a directory that is not a queue", setup: all(write("notes.txt"), write(".hidden")),
			wantErr: ErrNotQueue, wantText: `holds no walq file but holds "notes.txt";`},
		{name: "many foreign files", setup: func(t *testing.T, dir string) {
			for i := range 8 {
				write(fmt.Sprintf("file%d", i))(t, dir)
			}
		}, wantErr: ErrNotQueue, wantText: `"file4" (and 3 more)`},
		{name: "the log directory passed for the queue", setup: write("00000000000000000001.seg"),
			wantErr: ErrNotQueue, wantText: "the log directory of a queue: open its parent"},
		{name: "a format-1 log directory passed for the queue", setup: write("00000000000000000001"),
			wantErr: ErrNotQueue, wantText: "the log directory of a queue: open its parent"},
		{name: "unknown walq name in a queue", queue: true, setup: write("WALQ-INDEX"),
			wantErr: ErrNewerFormat, wantText: "WALQ-INDEX"},
		{name: "unknown walq name alone", setup: write("walq.journal"),
			wantErr: ErrNewerFormat, wantText: "walq.journal"},
		{name: "a marker of a newer format", queue: true, setup: write("WALQ-FORMAT", newerMarker()),
			wantErr: ErrNewerFormat, wantText: "format version 3"},
		{name: "upper-case foreign file in a queue", queue: true, setup: write("README"),
			wantForeign: []string{"README"}},
		{name: "unknown walq name beside foreign files", setup: all(write("notes.txt"), write("walq-queues")),
			wantErr: ErrNewerFormat, wantText: "walq-queues"},
		{name: "unknown snapshot-like name", queue: true, setup: write("snapshot-00000000000000000001.delta"),
			wantErr: ErrNewerFormat, wantText: "snapshot-00000000000000000001.delta"},
		{name: "unknown name in the log directory", queue: true, setup: write("log/00000000000000000001.index"),
			wantErr: ErrNewerFormat, wantText: "log/00000000000000000001.index"},
		{name: "directory named LOCK", setup: mkdir("LOCK"),
			wantErr: ErrCorrupt, wantText: "LOCK is a directory"},
		{name: "file named log", setup: write("log"),
			wantErr: ErrCorrupt, wantText: "log is not a directory"},
		{name: "directory named like a snapshot", queue: true, setup: mkdir("snapshot-00000000000000000009.snap"),
			wantErr: ErrCorrupt, wantText: "is a directory"},
		{name: "directory named like a segment", queue: true, setup: mkdir("log/00000000000000000099"),
			wantErr: ErrCorrupt, wantText: "log/00000000000000000099 is a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.queue {
				q, err := Open(dir, Options{})
				must(t, err)
				mustPut(t, q, "kept")
				must(t, q.Close())
			}
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			before := fullListing(t, dir)
			var logs lockedBuffer
			q, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Open = %v, want it to open", err)
				}
				st := q.Stats()
				must(t, q.Close())
				if !slices.Equal(st.Recovery.ForeignEntries, tc.wantForeign) {
					t.Fatalf("ForeignEntries = %q, want %q", st.Recovery.ForeignEntries, tc.wantForeign)
				}
				if warned := strings.Contains(logs.String(), "not walq's"); warned != (len(tc.wantForeign) > 0) {
					t.Fatalf("warning logged %v, want %v:\n%s", warned, len(tc.wantForeign) > 0, logs.String())
				}
				if tc.queue && st.Items != 1 {
					t.Fatalf("%d items after reopening, want 1", st.Items)
				}
				for _, name := range tc.wantForeign {
					if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
						t.Fatalf("foreign entry %s: %v", name, err)
					}
				}
				return
			}
			if err == nil {
				q.Close()
				t.Fatalf("Open succeeded, want %v", tc.wantErr)
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Open = %v, want %v with %q", err, tc.wantErr, tc.wantText)
			}
			for _, other := range []error{ErrNotQueue, ErrNewerFormat, ErrCorrupt} {
				if other != tc.wantErr && errors.Is(err, other) {
					t.Fatalf("Open = %v: is %v too", err, other)
				}
			}
			t.Logf("refused: %v", err)
			if after := fullListing(t, dir); after != before {
				t.Fatalf("a refused open changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestOpenCreatesDirectoryDurably: Open creates the queue directory and its
// missing parents and fsyncs the parent of each, and an open whose fsync of
// a parent fails fails.
func TestOpenCreatesDirectoryDurably(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "queue")
	rec := &syncRecorder{FS: wal.OSFS()}
	q, err := Open(dir, withFS(Options{}, rec))
	must(t, err)
	must(t, q.Close())
	for _, parent := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if !slices.Contains(rec.synced, parent) {
			t.Errorf("the parent %s was not fsynced; fsynced: %q", parent, rec.synced)
		}
	}

	fault := wal.NewFaultFS(wal.OSFS(), 0)
	fault.FailNext("syncdir")
	q, err = Open(filepath.Join(root, "c", "queue"), withFS(Options{}, fault))
	if err == nil {
		q.Close()
		t.Fatal("Open succeeded although fsyncing the new directory's parent failed")
	}
	if !errors.Is(err, wal.ErrInjected) {
		t.Fatalf("Open = %v, want the injected fault", err)
	}
}

// syncRecorder records the directories fsynced through it.
type syncRecorder struct {
	wal.FS
	mu     sync.Mutex
	synced []string
}

func (r *syncRecorder) SyncDir(dir string) error {
	r.mu.Lock()
	r.synced = append(r.synced, filepath.Clean(dir))
	r.mu.Unlock()
	return r.FS.SyncDir(dir)
}

// fullListing describes every entry under dir: name, type, size and
// modification time, LOCK and RESERVE included.
func fullListing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(&b, "%s %v %d %d\n", rel, info.Mode(), info.Size(), info.ModTime().UnixNano())
		return nil
	})
	must(t, err)
	return b.String()
}

func write(name string, content ...[]byte) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		data := []byte("not walq's")
		if len(content) > 0 {
			data = content[0]
		}
		must(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
}

// newerMarker returns a format marker of version 3, as a later walq might
// write it.
func newerMarker() []byte {
	m := wal.EncodeMarker(wal.DirID{1})
	binary.BigEndian.PutUint32(m[8:], 3)
	return m
}

func mkdir(name string) func(*testing.T, string) {
	return func(t *testing.T, dir string) { must(t, os.Mkdir(filepath.Join(dir, name), 0o700)) }
}

func all(steps ...func(*testing.T, string)) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		for _, step := range steps {
			step(t, dir)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
