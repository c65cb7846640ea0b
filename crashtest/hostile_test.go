package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/wal"
)

// A body may hold lookalikes of walq records: it must not change what
// recovery decides. Here the last record of the log, never promised durable
// (SyncNever, no sync since), is a put whose body ends with lookalike
// records that carry the next LSNs (format-1 entries and format-2 frames
// with every CRC right and a forged MAC), and a crash tore the write inside
// the body, after those records. What was torn must be cut and the items
// before it kept: the lookalikes are body bytes, not frames after the
// damage.
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

// Bodies that hold copies of real frames of the same segment, as the
// crash child puts them: copies verify as frame headers (the MAC is the
// segment's own), and they state their originals' watermarks. A crash that
// damages the last frame, which holds such a body, must still be cut, not
// refused, under every policy, wherever the damage falls: on the frame's
// header (every copy after it intact), inside a copy, just past a whole
// copy, at the end.
func TestFrameCopyBodiesDamagedTail(t *testing.T) {
	for _, sync := range []walq.SyncPolicy{walq.SyncAlways, walq.SyncInterval(time.Hour), walq.SyncNever} {
		t.Run(sync.String(), func(t *testing.T) {
			live := t.TempDir()
			opts := queueOptions(sync, 1<<20)
			q, err := walq.Open(live, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			put := func(tok string, body []byte) {
				t.Helper()
				if _, err := q.Put(ctx, body); err != nil {
					t.Fatal(err)
				}
				if tokenOf(body) != tok || !checkBody(tok, body) {
					t.Fatalf("body of %s does not check", tok)
				}
			}
			for i := range 6 {
				tok := fmt.Sprintf("c1.%d", i)
				put(tok, bodyOf(tok))
			}
			// Bodies of copies, each made from the segment as it is after the
			// puts before it, the last at the start of its body.
			kinds := []string{bodyMirror, bodyStart, bodyMirror, bodyStart}
			for i, kind := range kinds {
				tok, body := mirrorBody(fmt.Sprintf("c1.%d", 10+i), kind, readFrames(live, rng), rng)
				if tok == "" {
					t.Fatal("no frames to copy")
				}
				put(tok, body)
			}
			items := 6 + len(kinds)
			segs, _, err := wal.ListSegments(filepath.Join(live, "log"))
			if err != nil || len(segs) != 1 {
				t.Fatalf("segments %v, %v", segs, err)
			}
			seg, data, err := readSegmentFile(segs[0].Path)
			if err != nil || seg.bad != "" {
				t.Fatalf("segment: %v %s", err, seg.bad)
			}
			last := seg.frames[len(seg.frames)-1]
			copies := authenticHeaders(data, last.off+1, seg.salt)
			if len(copies) == 0 {
				t.Fatal("the last frame holds no copy that verifies as a frame header")
			}
			type damage struct {
				name string
				fn   func(b []byte) []byte
			}
			cases := []damage{
				{"header zeroed, the copies after it intact", func(b []byte) []byte {
					clear(b[last.off : last.off+frHeaderSize])
					return b
				}},
				{"torn 3 bytes before the end", func(b []byte) []byte { return b[:len(b)-3] }},
			}
			for _, c := range copies {
				c := c
				cases = append(cases,
					damage{fmt.Sprintf("torn inside the copy at %d", c.off), func(b []byte) []byte { return b[:c.off+frHeaderSize+1] }},
					damage{fmt.Sprintf("torn just past the copy at %d", c.off), func(b []byte) []byte { return b[:min(c.end, int64(len(b))-1)] }},
					damage{fmt.Sprintf("the page before the copy at %d lost", c.off), func(b []byte) []byte {
						from := max(last.off, c.off-pageSize)
						clear(b[from:c.off])
						return b
					}})
			}
			for _, d := range cases {
				crashed := t.TempDir()
				copyDir(t, live, crashed)
				path := filepath.Join(crashed, "log", segs[0].Name)
				b := d.fn(append([]byte(nil), data...))
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				os.Remove(filepath.Join(crashed, "LOCK"))
				r, err := walq.Open(crashed, opts)
				if err != nil {
					t.Fatalf("%s: recovery refused a damaged last frame whose body holds frame copies: %v", d.name, err)
				}
				st := r.Stats()
				r.Close()
				if st.Items != items-1 || st.Recovery.TailCutBytes == 0 {
					t.Fatalf("%s: recovered %d items, cut %d bytes: want the %d before the damaged put and a cut",
						d.name, st.Items, st.Recovery.TailCutBytes, items-1)
				}
			}
			t.Logf("%d damages of a frame holding %d authentic copies: each cut", len(cases), len(copies))
		})
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
