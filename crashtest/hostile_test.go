package crashtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/walq/walq"
	"github.com/walq/walq/wal"
)

// A body may hold a copy of a real walq record: it must not change what
// recovery decides. Here the last record of the log, never promised durable
// (SyncNever, no sync since), is a put whose body ends with framed,
// CRC-valid records that carry the next LSNs, and a crash tore the write
// inside the body, after those records. What was torn must be cut and the
// items before it kept: the forged records are body bytes, not "a valid
// record after the damage".
func TestHostileBodyTornTail(t *testing.T) {
	live, crashed := t.TempDir(), t.TempDir()
	opts := queueOptions(walq.SyncNever, 64<<10)
	q, err := walq.Open(live, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	for _, tok := range []string{"c1.1", "c1.2", "c1.3"} {
		if _, err := q.Put(ctx, bodyOf(tok)); err != nil {
			t.Fatal(err)
		}
	}
	hostile := hostileToken("c1.4", bodyFramed, q.Stats().LastLSN+1)
	body := bodyOf(hostile)
	if _, err := q.Put(ctx, body); err != nil {
		t.Fatal(err)
	}
	// The directory as a crash would leave it while the queue runs, the
	// last write torn a few bytes before its end (inside the last forged
	// record's body, so at least one whole forged record survives when the
	// body holds two or more; the token was chosen for that).
	copyDir(t, live, crashed)
	segs, _, err := wal.ListSegments(filepath.Join(crashed, "log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v, %v", segs, err)
	}
	last := segs[len(segs)-1].Path
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(last, fi.Size()-3); err != nil {
		t.Fatal(err)
	}

	r, err := walq.Open(crashed, opts)
	if err != nil {
		t.Fatalf("recovery refused a torn tail whose body holds copies of real records: %v", err)
	}
	defer r.Close()
	if st := r.Stats(); st.Items != 3 || st.Recovery.TailCutBytes == 0 {
		t.Fatalf("recovered %d items, cut %d bytes: want the 3 items before the torn put and a cut", st.Items, st.Recovery.TailCutBytes)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}
