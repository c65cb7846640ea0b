package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testBody is the body of the record with this LSN in every test log, so a
// replayed record can be checked against its LSN alone.
func testBody(lsn uint64) []byte {
	return fmt.Appendf(nil, "body-%04d-%s", lsn, strings.Repeat("x", int(lsn%7)))
}

// writeLog appends n records (testBody) to a new or existing log and closes it.
func writeLog(t *testing.T, dir string, opts Options, n int) {
	t.Helper()
	l, info, err := Open(dir, opts, 0, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var c *Commit
	for i := 0; i < n; i++ {
		var lsn uint64
		lsn, c = l.Append(1, testBody(info.Last+uint64(i)+1))
		if lsn != info.Last+uint64(i)+1 {
			t.Fatalf("append %d got lsn %d", i, lsn)
		}
	}
	if c != nil {
		if err := c.Wait(); err != nil {
			t.Fatalf("wait: %v", err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// recordPos is where one record lies in its segment.
type recordPos struct {
	Position
	End int64 // offset just after the entry
}

// logLayout describes a test log: its segments and where every record is.
type logLayout struct {
	dir  string
	segs []Segment
	recs map[uint64]recordPos // by LSN
	last uint64
}

func readLayout(t *testing.T, dir string) logLayout {
	t.Helper()
	segs, _, err := ListSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	ll := logLayout{dir: dir, segs: segs, recs: map[uint64]recordPos{}}
	res, err := Scan(dir, 0, 0, func(p Position, r Record) error {
		size := HeaderSize + len(r.Body)
		ll.recs[r.LSN] = recordPos{Position: p, End: p.Offset + int64(uvarintLen(uint64(size))+size)}
		return nil
	})
	if err != nil || res.Tail != nil {
		t.Fatalf("layout scan: %v, tail %+v", err, res.Tail)
	}
	ll.last = res.Last
	return ll
}

func (ll logLayout) path(name string) string { return filepath.Join(ll.dir, name) }

func (ll logLayout) tail() Segment { return ll.segs[len(ll.segs)-1] }

// frame is the tidwall entry (length prefix and envelope) of a record.
func frame(typ byte, lsn uint64, body []byte) []byte {
	rec := AppendRecord(nil, typ, lsn, body)
	return append(binary.AppendUvarint(nil, uint64(len(rec))), rec...)
}

// replayed collects records passed to apply, copying their bodies, and
// checks that each comes with its own position.
type replayed struct {
	recs []Record
	bad  []string // positions that do not name their record
}

func (r *replayed) apply(pos Position, rec Record) error {
	if pos.Index != rec.LSN || pos.File == "" {
		r.bad = append(r.bad, fmt.Sprintf("record %d at %+v", rec.LSN, pos))
	}
	rec.Body = bytes.Clone(rec.Body)
	r.recs = append(r.recs, rec)
	return nil
}

// checkRecords checks that recs are exactly first..last with their test bodies.
func checkRecords(t *testing.T, recs []Record, first, last uint64) {
	t.Helper()
	if want := int(last + 1 - first); len(recs) != want {
		t.Fatalf("got %d records, want %d (%d..%d)", len(recs), want, first, last)
	}
	for i, r := range recs {
		lsn := first + uint64(i)
		if r.LSN != lsn || r.Type != 1 || !bytes.Equal(r.Body, testBody(lsn)) {
			t.Fatalf("record %d: got lsn %d type %d body %q, want lsn %d", i, r.LSN, r.Type, r.Body, lsn)
		}
	}
}

// reopen opens dir with the OS FS, replays everything and closes it.
func reopen(t *testing.T, dir string, opts Options) ([]Record, OpenInfo) {
	t.Helper()
	opts.FS = nil
	var r replayed
	l, info, err := Open(dir, opts, 0, r.apply)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if len(r.bad) > 0 {
		t.Fatalf("replay passed records without their positions: %v", r.bad)
	}
	return r.recs, info
}

// dirContents maps every file name in dir to its bytes.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		m[strings.TrimPrefix(p, dir)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameContents(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// copyDir copies the files of src into a new temp dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFileT(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
