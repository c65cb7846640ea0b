package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// FuzzRecovery writes arbitrary files into a queue directory and opens it.
// Open must either recover, cutting at most a torn tail, or refuse with an
// error that wraps ErrCorrupt; it must never panic and never hang. A queue
// it recovered must close cleanly into a log that verifies from its
// snapshot on (segments wholly before it are not read), and open again to
// the same state.
//
// The input describes the files (see decodeDir): raw bytes for segments,
// snapshots, truncation leftovers and snapshot temp files, or records and
// snapshot bodies that the harness seals with valid CRCs and consecutive
// LSNs, so that the fuzzer can reach replay without forging checksums.
func FuzzRecovery(f *testing.F) {
	for _, seed := range recoverySeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		files := decodeDir(data)
		for _, fl := range files {
			path := filepath.Join(dir, fl.name)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, fl.data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		opts := walq.Options{SegmentSize: 4096, Sync: walq.SyncNever, DisableAutoCompact: true,
			Clock: walq.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
		q, err := openWithin(t, dir, opts)
		if err != nil {
			if !errors.Is(err, walq.ErrCorrupt) {
				t.Fatalf("Open refused with %v, which does not wrap ErrCorrupt; files: %s", err, describe(files))
			}
			return
		}
		st := q.Stats()
		if err := q.Close(); err != nil {
			t.Fatalf("Close after recovery: %v", err)
		}
		// Open does not read the segments wholly before the snapshot, so
		// only the log from the snapshot on must verify.
		res, err := wal.Scan(filepath.Join(dir, "log"), st.Recovery.SnapshotLSN+1, 0, nil)
		if err != nil || res.Tail != nil {
			t.Fatalf("after recovery and Close the log does not verify: %v, tail %+v; files: %s", err, res.Tail, describe(files))
		}
		// The timer may have discarded or expired something between Stats
		// and Close; nothing else may follow what Stats saw.
		if res.Last < st.LastLSN {
			t.Fatalf("the queue reported LSN %d, the log ends at %d", st.LastLSN, res.Last)
		}
		if res.Last > st.LastLSN {
			_, err := wal.Scan(filepath.Join(dir, "log"), st.LastLSN+1, 0, func(_ wal.Position, rec wal.Record) error {
				if rec.Type != state.TypeDiscard && rec.Type != state.TypeExpire {
					return fmt.Errorf("record %d after Stats is a %s", rec.LSN, state.TypeName(rec.Type))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		q, err = openWithin(t, dir, opts)
		if err != nil {
			t.Fatalf("a directory Open recovered and Close closed does not open again: %v; files: %s", err, describe(files))
		}
		st2 := q.Stats()
		q.Close()
		// The timer of either queue may have discarded items whose deadline
		// had passed; nothing else may differ.
		a, b := comparable(st), comparable(st2)
		gone := int(b.Discarded) - int(a.Discarded)
		a.Discarded, a.Items, a.Ready, a.Bytes, a.LastLSN = b.Discarded, a.Items-gone, a.Ready-gone, b.Bytes, b.LastLSN
		if a != b || gone < 0 || (gone == 0 && st.LastLSN != st2.LastLSN) {
			t.Fatalf("state differs after a clean reopen:\n  %+v\n  %+v", comparable(st), comparable(st2))
		}
	})
}

// openWithin opens the queue or fails the test if Open takes a minute.
func openWithin(t *testing.T, dir string, opts walq.Options) (*walq.Queue, error) {
	t.Helper()
	type result struct {
		q   *walq.Queue
		err error
	}
	done := make(chan result, 1)
	go func() {
		q, err := walq.Open(dir, opts)
		done <- result{q, err}
	}()
	select {
	case r := <-done:
		return r.q, r.err
	case <-time.After(time.Minute):
		t.Fatalf("Open has not returned after a minute")
		return nil, nil
	}
}

// statsView is the part of Stats that a clean close and reopen must keep.
type statsView struct {
	Ready, Delayed, Leased, Dead, Items                                  int
	Bytes                                                                int64
	Put, Delivered, Acked, Nacked, Expired, DeadLettered, Discarded, Red uint64
	Purged, LastLSN                                                      uint64
}

func comparable(s walq.Stats) statsView {
	return statsView{Ready: s.Ready + s.Delayed, Leased: s.Leased, Dead: s.Dead, Items: s.Items, Bytes: s.Bytes,
		Put: s.Put, Delivered: s.Delivered, Acked: s.Acked, Nacked: s.Nacked, Expired: s.Expired,
		DeadLettered: s.DeadLettered, Discarded: s.Discarded, Red: s.Redriven, Purged: s.Purged, LastLSN: s.LastLSN}
}

type file struct {
	name string // relative to the queue directory
	data []byte
}

func describe(files []file) string {
	var parts []string
	for _, f := range files {
		parts = append(parts, fmt.Sprintf("%s (%d bytes)", f.name, len(f.data)))
	}
	return strings.Join(parts, ", ")
}

// File kinds of the fuzz input.
const (
	kindSegment        = iota // raw bytes as log/<index>
	kindSnapshot              // raw bytes as snapshot-<index>.snap
	kindStart                 // raw bytes as log/<index>.START (an interrupted TruncateFront)
	kindEnd                   // raw bytes as log/<index>.END
	kindSnapshotTemp          // raw bytes as snapshot-<index>.tmp
	kindSealedSegment         // records, sealed with LSNs from <index>, as log/<index>
	kindSealedSnapshot        // a body framed as snapshot-<index>.snap
	kindTornSegment           // sealed records, then the rest of the bytes raw
	kinds
)

// decodeDir reads up to 8 files from the input, each as
//
//	kind (byte) | index (uvarint) | length (uvarint) | length bytes
//
// Sealed records are type (byte) | length (uvarint) | body, each written as
// a tidwall/wal entry (uvarint length, envelope) with the next LSN.
func decodeDir(data []byte) []file {
	var files []file
	for len(data) > 0 && len(files) < 8 {
		kind := data[0] % kinds
		data = data[1:]
		index, n := binary.Uvarint(data)
		if n <= 0 {
			break
		}
		data = data[n:]
		length, n := binary.Uvarint(data)
		if n <= 0 {
			break
		}
		data = data[n:]
		length = min(length, uint64(len(data)))
		content := data[:length]
		data = data[length:]
		index = max(index, 1)
		seg := filepath.Join("log", wal.SegmentName(index))
		snap := wal.SnapshotName(index)
		switch kind {
		case kindSegment:
			files = append(files, file{seg, content})
		case kindSnapshot:
			files = append(files, file{snap, content})
		case kindStart:
			files = append(files, file{seg + ".START", content})
		case kindEnd:
			files = append(files, file{seg + ".END", content})
		case kindSnapshotTemp:
			files = append(files, file{strings.TrimSuffix(snap, ".snap") + ".tmp", content})
		case kindSealedSegment:
			files = append(files, file{seg, sealRecords(index, content)})
		case kindSealedSnapshot:
			files = append(files, file{snap, snapshotFile(index, content)})
		case kindTornSegment:
			half := len(content) / 2
			files = append(files, file{seg, append(sealRecords(index, content[:half]), content[half:]...)})
		}
	}
	return files
}

// sealRecords turns type | uvarint length | body triples into tidwall/wal
// entries with valid envelopes and LSNs first, first+1, ...
func sealRecords(first uint64, data []byte) []byte {
	var out []byte
	for lsn := first; len(data) > 1; lsn++ {
		typ := data[0]
		n, k := binary.Uvarint(data[1:])
		if k <= 0 {
			break
		}
		data = data[1+k:]
		n = min(n, uint64(len(data)))
		body := data[:n]
		data = data[n:]
		if typ == 0 || len(body) == 0 {
			continue
		}
		entry := wal.AppendRecord(nil, typ, lsn, body)
		out = binary.AppendUvarint(out, uint64(len(entry)))
		out = append(out, entry...)
	}
	return out
}

// encodeDir is the inverse of decodeDir for a real queue directory: sealed
// segments (so that mutations keep their CRCs valid), raw snapshots, and a
// raw copy of the last segment.
func encodeDir(tb testing.TB, dir string) []byte {
	tb.Helper()
	var out []byte
	add := func(kind byte, index uint64, content []byte) {
		out = append(out, kind)
		out = binary.AppendUvarint(out, index)
		out = binary.AppendUvarint(out, uint64(len(content)))
		out = append(out, content...)
	}
	snaps, err := wal.ListSnapshots(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range snaps {
		data, err := os.ReadFile(s.Path)
		if err != nil {
			tb.Fatal(err)
		}
		add(kindSnapshot, s.LSN, data)
	}
	segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range segs {
		var records []byte
		_, err := wal.Scan(filepath.Join(dir, "log"), s.First, 0, func(pos wal.Position, rec wal.Record) error {
			if pos.File != s.Name {
				return errStop
			}
			records = append(records, rec.Type)
			records = binary.AppendUvarint(records, uint64(len(rec.Body)))
			records = append(records, rec.Body...)
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			tb.Fatal(err)
		}
		add(kindSealedSegment, s.First, records)
	}
	return out
}

var errStop = errors.New("stop")

// recoverySeeds are real queue directories in the input format: a fresh
// queue with items in every status, the same after a compaction, and one
// whose last segment is torn.
func recoverySeeds(tb testing.TB) [][]byte {
	tb.Helper()
	dir := tb.TempDir()
	clock := walq.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := walq.Options{SegmentSize: 4096, Sync: walq.SyncNever, DisableAutoCompact: true, Clock: clock,
		Visibility: 10 * time.Second, MaxAttempts: 2, Backoff: func(int) time.Duration { return time.Second }}
	q, err := walq.Open(dir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := tb.Context()
	for i := range 40 {
		key := ""
		if i%3 == 0 {
			key = fmt.Sprintf("k%d", i%7)
		}
		_, err := q.Put(ctx, bytes.Repeat([]byte{byte('a' + i%26)}, 10+i*7), walq.WithPriority(i%3),
			walq.WithKey(key), walq.WithDelay(time.Duration(i%4)*time.Second),
			walq.WithDeadline(clock.Now().Add(time.Hour)))
		if err != nil && !errors.Is(err, walq.ErrDuplicate) {
			tb.Fatal(err)
		}
	}
	clock.Advance(5 * time.Second)
	for i := range 12 {
		m, ok, err := q.TryGet()
		if err != nil || !ok {
			tb.Fatalf("TryGet: %v %v", ok, err)
		}
		switch i % 4 {
		case 0:
			err = q.Ack(m.Receipt)
		case 1:
			err = q.Nack(m.Receipt, errors.New("nack"))
		case 2:
			err = q.DeadLetter(m.Receipt, nil)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	var seeds [][]byte
	q.Close()
	seeds = append(seeds, encodeDir(tb, dir))
	if q, err = walq.Open(dir, opts); err != nil {
		tb.Fatal(err)
	}
	if err := q.Compact(); err != nil {
		tb.Fatal(err)
	}
	if dead := q.DeadLetters(0); len(dead) > 0 {
		if err := q.Redrive(dead[0].ID); err != nil {
			tb.Fatal(err)
		}
	}
	q.Close()
	compacted := encodeDir(tb, dir)
	seeds = append(seeds, compacted)
	torn := append(bytes.Clone(compacted), kindTornSegment)
	torn = binary.AppendUvarint(torn, 1000)
	torn = binary.AppendUvarint(torn, 6)
	torn = append(torn, 1, 1, 'x', 0xff, 0xff, 0xff)
	seeds = append(seeds, torn, nil, []byte{kindSegment, 1, 3, 0, 0, 0})
	// A torn put whose body embeds a complete, valid frame with the LSN
	// recovery expects: a torn tail, whatever the body holds.
	embedded := wal.AppendRecord(nil, state.TypePut, 1, []byte("embedded"))
	embedded = append(binary.AppendUvarint(nil, uint64(len(embedded))), embedded...)
	outer := wal.AppendRecord(nil, state.TypePut, 1, append(append([]byte("head"), embedded...), "tail-of-the-body"...))
	outer = append(binary.AppendUvarint(nil, uint64(len(outer))), outer...)
	outer = outer[:len(outer)-5]
	bodyTorn := []byte{kindSegment, 1}
	bodyTorn = binary.AppendUvarint(bodyTorn, uint64(len(outer)))
	seeds = append(seeds, append(bodyTorn, outer...))
	return seeds
}
