package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/wal"
)

// The queue directories the tests inspect are built through the public
// walq API with a ManualClock and a fixed backoff, so that every record, and
// so every byte of the log, is the same on every run.

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture is a queue directory built once per test binary.
type fixture struct {
	name  string
	dir   string
	now   time.Time // the clock when the queue closed: the --now of the golden runs
	build func(dir string) (time.Time, error)
}

var fixtures = []*fixture{
	{name: "normal", build: buildNormal},
	{name: "empty", build: buildEmpty},
	{name: "torn", build: buildTorn},
	{name: "segments", build: buildSegments},
	{name: "twin", build: buildSegments}, // the same records in a directory of another ID; before foreign
	{name: "badcrc", build: buildBadCRC},
	{name: "compacting", build: buildCompacting},
	{name: "synced", build: buildSynced},
	{name: "promised", build: buildPromised},
	{name: "outoforder", build: buildOutOfOrder},
	{name: "future", build: buildFuture},
	{name: "foreign", build: buildForeignSegment},
	{name: "format1", build: buildFormat1},
	{name: "named", build: buildNamed},
}

func fixtureNamed(t *testing.T, name string) *fixture {
	t.Helper()
	for _, f := range fixtures {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no fixture %q", name)
	return nil
}

func TestMain(m *testing.M) { testrule.MainFunc(func() int { return runWithFixtures(m) }) }

// runWithFixtures builds the fixtures, runs the tests and removes them.
func runWithFixtures(m *testing.M) int {
	root, err := os.MkdirTemp("", "walq-inspect-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := func() int {
		for _, f := range fixtures {
			f.dir = filepath.Join(root, f.name)
			if f.now, err = f.build(f.dir); err != nil {
				fmt.Fprintf(os.Stderr, "build fixture %s: %v\n", f.name, err)
				return 1
			}
		}
		return m.Run()
	}()
	os.RemoveAll(root)
	return code
}

// testOptions are the options of every fixture queue.
func testOptions(clock walq.Clock) walq.Options {
	return walq.Options{
		Clock:              clock,
		Visibility:         30 * time.Second,
		MaxAttempts:        2,
		Backoff:            func(int) time.Duration { return time.Second },
		Sync:               walq.SyncNever, // the records are the same; Close syncs
		DisableAutoCompact: true,
	}
}

// script runs queue calls and keeps the first error.
type script struct {
	q   *walq.Queue
	err error
}

func (s *script) put(body string, opts ...walq.PutOption) uint64 {
	if s.err != nil {
		return 0
	}
	id, err := s.q.Put(context.Background(), []byte(body), opts...)
	if err != nil {
		s.err = fmt.Errorf("put %q: %w", body, err)
	}
	return id
}

func (s *script) get(wantID uint64) walq.Message {
	if s.err != nil {
		return walq.Message{}
	}
	m, ok, err := s.q.TryGet()
	switch {
	case err != nil:
		s.err = fmt.Errorf("get: %w", err)
	case !ok:
		s.err = errors.New("get: nothing ready")
	case wantID != 0 && m.ID != wantID:
		s.err = fmt.Errorf("get: item %d, want %d", m.ID, wantID)
	}
	return m
}

func (s *script) do(what string, err error) {
	if s.err == nil && err != nil {
		s.err = fmt.Errorf("%s: %w", what, err)
	}
}

// waitFor waits until the queue's timer loop has written what cond checks.
func (s *script) waitFor(what string, cond func(walq.Stats) bool) {
	if s.err != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	// The records the condition sees applied must be on disk too before the
	// script goes on: a call appended while they wait for the committer
	// would share their frame, and frame offsets in the goldens would
	// depend on the machine's load.
	settled := func(st walq.Stats) bool { return cond(st) && st.DurableLSN == st.LastLSN }
	for !settled(s.q.Stats()) {
		if time.Now().After(deadline) {
			s.err = fmt.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *script) close() error {
	if err := s.q.Close(); s.err == nil {
		s.err = err
	}
	return s.err
}

// buildNormal makes a queue that went through every kind of record:
//
//	1 "resize image 1" key img-1        leased, extended, acked
//	2 "send welcome mail" priority -1   nacked twice: dead letter
//	3 "delayed report" delay 1h         still delayed
//	4 "expiring offer" deadline +10s    discarded at its deadline
//	5 control bytes, key with an escape dead-lettered, then redriven: ready
//	6 a 300-byte body                   lease expired: back after the backoff
//	7-9 one PutBatch                    7 dead-lettered and purged, 8 leased at
//	                                    the close, 9 ready
//	10 a long Greek body                dead-lettered with a long cause
func buildNormal(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	q, err := walq.Open(dir, testOptions(clock))
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	ctx := context.Background()
	s.put("resize image 1", walq.WithKey("img-1"))
	s.put("send welcome mail", walq.WithPriority(-1))
	s.put("delayed report", walq.WithDelay(time.Hour))
	s.put("expiring offer", walq.WithPriority(5), walq.WithDeadline(epoch.Add(10*time.Second)))
	s.put("\x00\x1b[31mred\x1b[0m \xff\xfe \u202eevil", walq.WithKey("k\x1b]0;title\x07"))
	s.put(strings.Repeat("long body ", 30))
	if s.err == nil {
		_, err := q.PutBatch(ctx, []walq.Item{{Body: []byte("batch a")}, {Body: []byte("batch b"), Key: "b"},
			{Body: []byte("batch c"), Priority: 2}})
		s.do("put batch", err)
	}
	if _, err := q.Put(ctx, []byte("resize image 1 again"), walq.WithKey("img-1")); !errors.Is(err, walq.ErrDuplicate) {
		s.do("duplicate put", fmt.Errorf("got %v, want ErrDuplicate", err))
	}

	m := s.get(2)
	s.do("nack", q.Nack(m.Receipt, errors.New("smtp: connection refused")))
	m = s.get(1)
	s.do("extend", q.Extend(m.Receipt, time.Minute))
	s.do("ack", q.Ack(m.Receipt))
	clock.Advance(time.Second)
	m = s.get(2)
	s.do("nack", q.Nack(m.Receipt, errors.New("smtp: connection refused")))
	m = s.get(5)
	s.do("dead-letter", q.DeadLetter(m.Receipt, errors.New("bad input\n\x1b[2J")))
	s.get(6)
	// Item 4's deadline is +10s, item 6's lease ends at +31s. Two steps of
	// the clock, so that the discard and the expiry are two frames whatever
	// the load (one tick would append both, in one frame or two).
	clock.Advance(9 * time.Second)
	s.waitFor("discard", func(st walq.Stats) bool { return st.Discarded == 1 })
	clock.Advance(22 * time.Second)
	s.waitFor("lease expiry", func(st walq.Stats) bool { return st.Expired == 1 })
	s.do("redrive", q.Redrive(5))
	m = s.get(7)
	s.do("dead-letter", q.DeadLetter(m.Receipt, errors.New("unparseable")))
	s.do("purge", q.PurgeDeadLetters(7))
	s.get(8)
	s.put(strings.Repeat("διαδικασία ", 10), walq.WithPriority(-2))
	m = s.get(10)
	s.do("dead-letter", q.DeadLetter(m.Receipt, errors.New(strings.Repeat("stack frame\t", 8))))
	return clock.Now(), s.close()
}

func buildEmpty(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	q, err := walq.Open(dir, testOptions(clock))
	if err != nil {
		return time.Time{}, err
	}
	return clock.Now(), q.Close()
}

// buildTorn leaves the last frame cut short, as a crash in the middle of a
// write would: the frame runs past the end of the segment, and no frame
// states its record promised, so recovery would cut it.
func buildTorn(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	q, err := walq.Open(dir, testOptions(clock))
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	s.put("first")
	s.put("second")
	m := s.get(1)
	clock.Advance(time.Second)
	s.do("ack", q.Ack(m.Receipt))
	s.put("third, torn")
	if err := s.close(); err != nil {
		return time.Time{}, err
	}
	return clock.Now(), cutLastSegment(dir, 5)
}

// cutLastSegment drops the last n bytes of the newest segment.
func cutLastSegment(dir string, n int64) error {
	segs, _, err := wal.ListSegments(filepath.Join(dir, layout.LogDirName))
	if err != nil {
		return err
	}
	last := segs[len(segs)-1]
	return os.Truncate(last.Path, last.Size-n)
}

// buildSegments fills three segments of 8 KiB with puts, leases and acks.
func buildSegments(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	opts := testOptions(clock)
	opts.SegmentSize = 8192
	q, err := walq.Open(dir, opts)
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	for i := 1; i <= 120; i++ {
		s.put(fmt.Sprintf("item %03d with some padding to fill segments", i))
		if i%4 == 0 {
			m := s.get(uint64(i / 4))
			s.do("ack", q.Ack(m.Receipt))
		}
	}
	return clock.Now(), s.close()
}

// buildBadCRC flips one byte in the body of record 10, in the oldest of
// several segments: every record of an older segment was fsynced before the
// next segment was made, so recovery refuses it.
func buildBadCRC(dir string) (time.Time, error) {
	now, err := buildSegments(dir)
	if err != nil {
		return now, err
	}
	return now, damageRecord(dir, 10, 0x40)
}

// damageRecord xors mask into the last byte of record index's body, so
// that the frame and the record headers stay intact and only the body's CRC
// catches it.
func damageRecord(dir string, index uint64, mask byte) error {
	pos, err := recordPositions(dir)
	if err != nil {
		return err
	}
	return flipRecordByte(dir, pos, index, mask)
}

func flipRecordByte(dir string, pos map[uint64]recordPos, index uint64, mask byte) error {
	p, ok := pos[index]
	if !ok {
		return fmt.Errorf("no record %d", index)
	}
	path := filepath.Join(dir, layout.LogDirName, p.File)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	data[p.End()-1] ^= mask
	return os.WriteFile(path, data, 0o600)
}

// recordPos is where a record is, and how long its body is.
type recordPos struct {
	wal.Position
	BodyLen int64
}

// End is the offset just after the record's body.
func (p recordPos) End() int64 { return p.Offset + p.BodyLen }

// recordPositions returns where each record of a sound log is.
func recordPositions(dir string) (map[uint64]recordPos, error) {
	pos := make(map[uint64]recordPos)
	_, err := wal.Scan(filepath.Join(dir, layout.LogDirName), 0, 0, func(p wal.Position, rec wal.Record) error {
		pos[p.Index] = recordPos{Position: p, BodyLen: int64(len(rec.Body))}
		return nil
	})
	return pos, err
}

// syncedOptions are testOptions with every commit fsynced, so that each
// frame's watermark is the last LSN of the frame before it.
func syncedOptions(clock walq.Clock) walq.Options {
	opts := testOptions(clock)
	opts.Sync = walq.SyncAlways
	return opts
}

// buildSynced makes a queue whose every commit was fsynced: one frame per
// call, each stating the records before it promised.
func buildSynced(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	q, err := walq.Open(dir, syncedOptions(clock))
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	for i := 1; i <= 4; i++ {
		s.put(fmt.Sprintf("synced job %d", i))
	}
	if s.err == nil {
		_, err := q.PutBatch(context.Background(), []walq.Item{{Body: []byte("batch x")}, {Body: []byte("batch y")}})
		s.do("put batch", err)
	}
	m := s.get(1)
	clock.Advance(time.Second)
	s.do("ack", q.Ack(m.Receipt))
	m = s.get(2)
	s.do("nack", q.Nack(m.Receipt, errors.New("later")))
	s.put("synced job 7")
	return clock.Now(), s.close()
}

// buildPromised flips a bit in the body of record 3 of a synced queue: the
// frame of record 5 (and every one after it) states that records up to 4
// were fsynced, so recovery refuses the damage rather than cut it.
func buildPromised(dir string) (time.Time, error) {
	now, err := buildSynced(dir)
	if err != nil {
		return now, err
	}
	return now, damageRecord(dir, 3, 0x10)
}

// buildOutOfOrder flips a bit in the body of the third frame from the end
// of a queue that never fsynced between commits (SyncNever): as if power
// was lost while the last three frames' pages were reaching the disk in any
// order. Every watermark on disk is below the damage, so recovery would cut
// from there, with the two frames after it that still verify.
func buildOutOfOrder(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	q, err := walq.Open(dir, testOptions(clock))
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	for i := 1; i <= 6; i++ {
		s.put(fmt.Sprintf("unsynced job %d", i))
	}
	if err := s.close(); err != nil {
		return time.Time{}, err
	}
	return clock.Now(), damageRecord(dir, 4, 0x02)
}

// buildFuture gives a queue a marker of format version 3, as a later walq
// would write it.
func buildFuture(dir string) (time.Time, error) {
	now, err := buildEmpty(dir)
	if err != nil {
		return now, err
	}
	marker := append([]byte("WALQDIR\n"), 0, 0, 0, 3)
	marker = append(marker, bytes.Repeat([]byte{0xab}, 16)...)
	marker = binary.BigEndian.AppendUint32(marker, crc32.Checksum(marker, crc32.MakeTable(crc32.Castagnoli)))
	return now, os.WriteFile(filepath.Join(dir, layout.MarkerName), marker, 0o600)
}

// buildForeignSegment makes the segments fixture and puts in place of its
// first segment the first segment of another queue with the same records
// (the twin fixture): every frame verifies, but the segment carries the
// other directory's ID.
func buildForeignSegment(dir string) (time.Time, error) {
	now, err := buildSegments(dir)
	if err != nil {
		return now, err
	}
	twin := filepath.Join(filepath.Dir(dir), "twin") // built before this one
	name := wal.SegmentName(1)
	data, err := os.ReadFile(filepath.Join(twin, layout.LogDirName, name))
	if err != nil {
		return now, err
	}
	return now, os.WriteFile(filepath.Join(dir, layout.LogDirName, name), data, 0o600)
}

// format1Time is the wall clock at which the root package's
// testdata/format1 was written (fixtureTime in format_test.go).
var format1Time = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// buildFormat1 copies the root package's format-1 fixture, a directory
// written by walq before format 2 (no marker, tidwall/wal segments).
func buildFormat1(dir string) (time.Time, error) {
	src := filepath.Join("..", "..", "testdata", "format1")
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dir, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
	return format1Time.Add(2 * time.Hour), err
}

// buildCompacting leaves a compacted queue with the temp file of a second
// compaction that was interrupted half-way through writing its snapshot.
func buildCompacting(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	opts := testOptions(clock)
	opts.SegmentSize = 8192
	q, err := walq.Open(dir, opts)
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	for i := 1; i <= 60; i++ {
		s.put(fmt.Sprintf("job %02d %s", i, strings.Repeat("x", 40)))
	}
	for i := 1; i <= 40; i++ {
		m := s.get(uint64(i))
		if i%10 == 0 {
			s.do("nack", q.Nack(m.Receipt, fmt.Errorf("transient failure %d", i)))
			continue
		}
		s.do("ack", q.Ack(m.Receipt))
	}
	s.do("compact", q.Compact())
	clock.Advance(time.Minute)
	for i := 61; i <= 65; i++ {
		s.put(fmt.Sprintf("job %02d after the compaction", i))
	}
	s.get(41)
	last := q.Stats().LastLSN
	if err := s.close(); err != nil {
		return time.Time{}, err
	}
	snaps, err := wal.ListSnapshots(dir)
	if err != nil || len(snaps) != 1 {
		return time.Time{}, fmt.Errorf("want one snapshot after the compaction, got %d (%v)", len(snaps), err)
	}
	data, err := os.ReadFile(snaps[0].Path)
	if err != nil {
		return time.Time{}, err
	}
	tmp := filepath.Join(dir, strings.TrimSuffix(wal.SnapshotName(last), ".snap")+".tmp")
	return clock.Now(), os.WriteFile(tmp, data[:len(data)/2], 0o600)
}

// copyDir copies a fixture so that a test can damage it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// inspect runs the tool in-process.
func inspect(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}
