package wal

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// want is what Scan and Open must do with a damaged log.
type want struct {
	refused bool
	file    string
	index   uint64
	offset  int64
	reason  string // a substring of the CorruptionError's reason

	last   uint64            // opened: the records are 1..last
	bodies map[uint64][]byte // records whose body is not testBody
	cut    *TailInfo         // opened: what is cut (nil: nothing); its Reason is a substring
	opts   Options           // Open's options (Dir is filled in)
	scan   *want             // what Scan must do when it differs from Open (it knows no MustReach)
}

type span struct{ from, to int64 }

// extra is a frame header that verifies inside damaged bytes: a copy of a
// real frame of the segment, at off, stating wm.
type extra struct {
	off int64
	wm  uint64
}

// damage describes the tail segment of a layout after a case damaged it.
type damage struct {
	size   int64  // its size now
	spans  []span // ranges whose bytes changed
	extras []extra
}

// intact reports whether bytes [off, off+n) are there and unchanged.
func (d damage) intact(off, n int64) bool {
	if off+n > d.size {
		return false
	}
	for _, s := range d.spans {
		if off < s.to && s.from < off+n {
			return false
		}
	}
	return true
}

// expectTail applies the rule of repair.go, worked out from the layout of
// the clean log, to damage in its tail segment: the first frame that is not
// intact is the damage, at LSN N; the watermark is the highest stated by
// the frames before it, by its own header when that is intact, by every
// intact frame header after it and by the copies; N above it is cut, at or
// below it refused. bad is the reason the damaged frame fails.
func expectTail(ll logLayout, d damage, bad string) want {
	tail := ll.tail()
	wm := tail.First - 1 // the older segments were fsynced by the roll
	f := frameInfo{Seg: tail.Name, Off: tail.Size, First: ll.last + 1}
	own := false
	for _, g := range tail.Frames {
		if !d.intact(g.Off, g.Size) {
			f, own = g, d.intact(g.Off, FrameHeaderSize)
			break
		}
		wm = max(wm, g.Watermark)
	}
	if d.size == f.Off {
		return want{last: f.First - 1} // a clean end
	}
	var cands []extra
	if own {
		cands = append(cands, extra{f.Off, f.Watermark})
	}
	var later []extra
	for _, g := range tail.Frames {
		if g.Off > f.Off && d.intact(g.Off, FrameHeaderSize) {
			later = append(later, extra{g.Off, g.Watermark})
		}
	}
	for _, e := range d.extras {
		if e.off > f.Off && e.off+FrameHeaderSize <= d.size {
			later = append(later, e)
		}
	}
	sort.Slice(later, func(i, j int) bool { return later[i].off < later[j].off })
	stated := int64(-1)
	for _, c := range append(cands, later...) {
		if c.wm > wm {
			wm, stated = c.wm, c.off
		}
	}
	if f.First <= wm {
		w := want{refused: true, file: tail.Name, index: f.First, offset: f.Off}
		if stated >= 0 {
			w.reason = fmt.Sprintf("%s; the frame at offset %d states records up to %d were fsynced", bad, stated, wm)
		} else {
			w.reason = fmt.Sprintf("%s; records up to %d were promised durable", bad, wm)
		}
		return w
	}
	return want{last: f.First - 1, cut: &TailInfo{File: tail.Name, Offset: f.Off, Bytes: d.size - f.Off,
		Reason: bad, Watermark: wm, Later: len(later)}}
}

// refusedOlder is the refusal of damage in frame f of a segment older than
// the newest.
func refusedOlder(f frameInfo, bad string) want {
	return want{refused: true, file: f.Seg, index: f.First, offset: f.Off,
		reason: bad + ", in a segment older than the newest (all of it was fsynced)"}
}

// mustCut fails the test when the rule says w is refused: the case is one
// that must never be.
func mustCut(t *testing.T, w want) want {
	t.Helper()
	if w.refused {
		t.Fatalf("the rule refuses this case (%s); it must be cut", w.reason)
	}
	return w
}

// corruptionCase damages a copy of a base log and says what recovery must
// do with it.
type corruptionCase struct {
	name string
	base string
	run  func(t *testing.T, ll logLayout) want
}

// flipReason is why a frame whose byte at off (from the frame's start) was
// flipped fails: the frame header (magic, then MAC), the record headers
// (their CRC) or the body of record lsn.
func flipReason(f frameInfo, off int64) string {
	switch rel := off - f.Off; {
	case rel < 4:
		return "bad frame magic"
	case rel < FrameHeaderSize:
		return "frame mac mismatch"
	case rel < FrameHeaderSize+int64(f.Count)*RecordHeaderSize:
		return "record headers crc mismatch"
	}
	for i := len(f.Bodies) - 1; i >= 0; i-- {
		if off >= f.Bodies[i] {
			return fmt.Sprintf("record %d: body crc mismatch", f.First+uint64(i))
		}
	}
	panic("unreachable")
}

// flipCase flips bit off%8 of the byte at off in the frame holding lsn
// (off from the frame's start) and applies the rule.
func flipCase(name, base string, lsn uint64, off func(f frameInfo) int64) corruptionCase {
	return corruptionCase{name: name, base: base, run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(lsn)
		at := f.Off + off(f)
		flipBit(t, ll.path(f.Seg), at, uint(at%8))
		bad := flipReason(f, at)
		if f.Seg != ll.tail().Name {
			return refusedOlder(f, bad)
		}
		return expectTail(ll, damage{size: ll.tail().Size, spans: []span{{at, at + 1}}}, bad)
	}}
}

// field names the field at byte i of a layout given as (end, name) pairs.
func field(i int64, layout ...any) string {
	for j := 0; j < len(layout); j += 2 {
		if i < int64(layout[j].(int)) {
			return layout[j+1].(string)
		}
	}
	return "past_the_end"
}

func frameField(i int64) string {
	return field(i, frOffCount, "magic", frOffFirst, "count", frOffWatermark, "first_lsn", frOffPayload, "watermark",
		frOffHeaderCRC, "payload_length", frOffMAC, "header_crc", FrameHeaderSize, "mac")
}

func recordField(i int64) string {
	return field(i, rhOffFlags, "type", 2, "flags", rhOffLength, "reserved", rhOffQueue, "body_length",
		rhOffCRC, "queue", 20, "body_crc", RecordHeaderSize, "reserved")
}

func segmentField(i int64) string {
	return field(i, segOffVersion, "magic", segOffDir, "version", segOffFirst, "directory_id", segOffSalt, "first_lsn",
		segOffCRC, "salt", SegmentHeaderSize, "crc")
}

// flipCases flips a bit in the frame holding lsn: in every byte of its
// frame header and of lsn's record header when full is set (else in a
// sample), and in the first, a middle and the last byte of lsn's body.
func flipCases(base string, lsn uint64, full bool) []corruptionCase {
	hdrBytes := []int64{0, 3, 4, 7, 8, 15, 16, 23, 24, 27, 28, 31, 32, 39}
	recBytes := []int64{0, 1, 2, 3, 4, 7, 8, 15, 16, 19, 20, 23}
	if full {
		hdrBytes, recBytes = nil, nil
		for i := range int64(FrameHeaderSize) {
			hdrBytes = append(hdrBytes, i)
		}
		for i := range int64(RecordHeaderSize) {
			recBytes = append(recBytes, i)
		}
	}
	prefix := fmt.Sprintf("flip/%s/lsn_%d/", base, lsn)
	var cases []corruptionCase
	for _, i := range hdrBytes {
		cases = append(cases, flipCase(fmt.Sprintf("%sframe_header_byte_%d_%s", prefix, i, frameField(i)), base, lsn,
			func(frameInfo) int64 { return i }))
	}
	for _, i := range recBytes {
		cases = append(cases, flipCase(fmt.Sprintf("%srecord_header_byte_%d_%s", prefix, i, recordField(i)), base, lsn,
			func(f frameInfo) int64 { return f.recHeaderOff(int(lsn-f.First)) - f.Off + i }))
	}
	n := int64(len(testBody(lsn)))
	for _, b := range []struct {
		name string
		at   int64
	}{{"first", 0}, {"middle", n / 2}, {"last", n - 1}} {
		cases = append(cases, flipCase(fmt.Sprintf("%sbody_%s_byte", prefix, b.name), base, lsn,
			func(f frameInfo) int64 { return f.Bodies[lsn-f.First] - f.Off + b.at }))
	}
	return cases
}

// headerFlipCases flips a bit in every byte of the header of the segment
// holding lsn.
func headerFlipCases(base string, lsn uint64, what string) []corruptionCase {
	var cases []corruptionCase
	for i := range int64(SegmentHeaderSize) {
		cases = append(cases, corruptionCase{
			name: fmt.Sprintf("segment_header/%s/%s_byte_%d_%s", base, what, i, segmentField(i)), base: base,
			run: func(t *testing.T, ll logLayout) want {
				seg := ll.seg(ll.frameOf(lsn).Seg)
				flipBit(t, seg.Path, i, uint(i%8))
				reason := "segment header crc mismatch"
				if i < 8 {
					reason = "bad segment magic"
				}
				return want{refused: true, file: seg.Name, index: seg.First, offset: 0, reason: reason}
			}})
	}
	return cases
}

// rewriteHeader changes the header of segment seg and fixes its CRC.
func rewriteHeader(t *testing.T, path string, change func(h []byte)) {
	t.Helper()
	data := readFileT(t, path)
	change(data[:SegmentHeaderSize])
	binary.BigEndian.PutUint32(data[segOffCRC:], crc32.Checksum(data[:segOffCRC], castagnoli))
	writeFileT(t, path, data)
}

// cutFile truncates the file at size.
func cutFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// spliceFile replaces bytes [from, to) of the file with b.
func spliceFile(t *testing.T, path string, from, to int64, b []byte) {
	t.Helper()
	data := readFileT(t, path)
	writeFileT(t, path, slices.Concat(data[:from], b, data[to:]))
}

func garbage(seed uint64, n int64) []byte {
	rng := mrand.New(mrand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// tornReason is why a frame of size bytes, of which keep are there, fails.
func tornReason(size, keep int64) string {
	if keep < FrameHeaderSize {
		return fmt.Sprintf("frame header cut short: %d of %d bytes", keep, FrameHeaderSize)
	}
	return fmt.Sprintf("frame of %d bytes runs past the end of the segment (%d bytes left)", size, keep)
}

// tornCases cuts the tail inside the frame holding lsn at every length, as
// a kill -9 during its write leaves it (later frames never written).
func tornCases(base string, lsn uint64, size int) []corruptionCase {
	var cases []corruptionCase
	for keep := range int64(size) {
		cases = append(cases, corruptionCase{
			name: fmt.Sprintf("torn_write/%s/frame_of_lsn_%d/keep_%d", base, lsn, keep), base: base,
			run: func(t *testing.T, ll logLayout) want {
				f := ll.frameOf(lsn)
				cutFile(t, ll.path(f.Seg), f.Off+keep)
				return mustCut(t, expectTail(ll, damage{size: f.Off + keep}, tornReason(f.Size, keep)))
			}})
	}
	return cases
}

// pageCases damages pages of the tail of a page log past the last page
// holding anything stated fsynced, as a power loss can.
func pageCases(base string) []corruptionCase {
	type pc struct {
		name string
		// damage returns the new contents of the tail and the damage, given
		// the tail's bytes and p0, its first unsynced page.
		damage func(ll logLayout, data []byte, p0 int64) ([]byte, damage)
	}
	zero := func(data []byte, from, to int64) { clear(data[from:to]) }
	pcs := []pc{
		{"zeros_from_the_first_unsynced_page_to_the_end", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			zero(data, p0, int64(len(data)))
			return data, damage{size: int64(len(data)), spans: []span{{p0, int64(len(data))}}}
		}},
		{"first_unsynced_page_zero_later_pages_whole", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			zero(data, p0, p0+pageSize)
			return data, damage{size: int64(len(data)), spans: []span{{p0, p0 + pageSize}}}
		}},
		{"hole_of_zeros_earlier_and_later_pages_whole", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			zero(data, p0+pageSize, p0+2*pageSize)
			return data, damage{size: int64(len(data)), spans: []span{{p0 + pageSize, p0 + 2*pageSize}}}
		}},
		{"only_the_last_page_reached_the_disk", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			last := (int64(len(data)) - 1) / pageSize * pageSize
			zero(data, p0, last)
			return data, damage{size: int64(len(data)), spans: []span{{p0, last}}}
		}},
		{"garbage_from_the_first_unsynced_page_to_the_end", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			copy(data[p0:], garbage(1, int64(len(data))-p0))
			return data, damage{size: int64(len(data)), spans: []span{{p0, int64(len(data))}}}
		}},
		{"garbage_page_earlier_and_later_pages_whole", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			copy(data[p0+pageSize:], garbage(2, pageSize))
			return data, damage{size: int64(len(data)), spans: []span{{p0 + pageSize, p0 + 2*pageSize}}}
		}},
		{"stale_copy_of_a_synced_page_later_pages_whole", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			// The page holds what an earlier page of the segment held: real
			// frames of this segment, whose headers verify where they lie.
			src, dst := p0-pageSize, p0+pageSize
			copy(data[dst:dst+pageSize], data[src:src+pageSize])
			d := damage{size: int64(len(data)), spans: []span{{dst, dst + pageSize}}}
			for _, f := range ll.tail().Frames {
				if f.Off >= src && f.Off+FrameHeaderSize <= src+pageSize {
					d.extras = append(d.extras, extra{f.Off - src + dst, f.Watermark})
				}
			}
			return data, d
		}},
		{"size_short_at_a_page_boundary", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			return data[:p0+pageSize], damage{size: p0 + pageSize}
		}},
		{"zeros_and_size_short", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			zero(data, p0, p0+pageSize)
			return data[:p0+pageSize+100], damage{size: p0 + pageSize + 100, spans: []span{{p0, p0 + pageSize}}}
		}},
		{"zero_pages_past_the_end", func(ll logLayout, data []byte, p0 int64) ([]byte, damage) {
			n := int64(len(data))
			return append(data, make([]byte, 2*pageSize)...), damage{size: n + 2*pageSize, spans: []span{{n, n + 2*pageSize}}}
		}},
	}
	var cases []corruptionCase
	for _, p := range pcs {
		cases = append(cases, corruptionCase{name: "pages/" + base + "/" + p.name, base: "pages-" + base,
			run: func(t *testing.T, ll logLayout) want {
				tail := ll.tail()
				data, d := p.damage(ll, readFileT(t, tail.Path), unsyncedPage(ll))
				writeFileT(t, tail.Path, data)
				// Why the first damaged frame fails: read it from the bytes.
				w := expectTail(ll, d, "")
				if w.cut == nil {
					t.Fatalf("no cut: %+v", w)
				}
				_, err := decodeFrame(newMacer(tail.Hdr.salt), data[w.cut.Offset:])
				if err == nil {
					err = errors.New("bad frame magic") // zeros past the end of the last frame
				}
				return mustCut(t, expectTail(ll, d, err.Error()))
			}})
	}
	return cases
}

// appendRecord opens the log of ll, appends one record with body and
// closes it; it returns the new layout and the frame of the record.
func appendRecord(t *testing.T, ll logLayout, body []byte) (logLayout, frameInfo) {
	t.Helper()
	l, _ := openLog(t, ll.dir, Options{})
	lsn, c := l.Append(1, body)
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	nl := readLayout(t, ll.dir)
	return nl, nl.frameOf(lsn)
}

// frameBytes returns the bytes of frame f of its log.
func frameBytes(t *testing.T, ll logLayout, f frameInfo) []byte {
	return readFileT(t, ll.path(f.Seg))[f.Off:f.End()]
}

// copyCases appends a record whose body holds copies of real frames of the
// tail segment (the frame before it, a single and the batch frame), of an
// older segment and of another directory's log, and cuts it at lengths
// around every copy: the copies are never records, never make the torn
// write refused, and only the tail's own count as later frames.
func copyCases(base string, foreign logLayout) []corruptionCase {
	type piece struct {
		name   string
		frame  func(ll logLayout) (frameInfo, logLayout)
		sameSg bool
	}
	pieces := []piece{
		{"tail_frame_33", func(ll logLayout) (frameInfo, logLayout) { return ll.frameOf(33), ll }, true},
		{"older_segment_frame_20", func(ll logLayout) (frameInfo, logLayout) { return ll.frameOf(20), ll }, false},
		{"foreign_directory_frame_33", func(ll logLayout) (frameInfo, logLayout) { return foreign.frameOf(33), foreign }, false},
		{"batch_frame", func(ll logLayout) (frameInfo, logLayout) { return ll.frameOf(batchFirst), ll }, true},
		{"previous_frame_45", func(ll logLayout) (frameInfo, logLayout) { return ll.frameOf(baseLast), ll }, true},
	}
	// build appends the record and returns the layout, its frame, its body
	// and where each copy lies from the start of the frame.
	type built struct {
		ll     logLayout
		f      frameInfo
		body   []byte
		at     []int64
		extras []extra
	}
	build := func(t *testing.T, ll logLayout) built {
		var b built
		b.body = []byte("head")
		var rel []int64
		for _, p := range pieces {
			src, sl := p.frame(ll)
			b.body = append(b.body, '-')
			rel = append(rel, int64(len(b.body)))
			b.body = append(b.body, frameBytes(t, sl, src)...)
		}
		b.body = append(b.body, "-end"...)
		b.ll, b.f = appendRecord(t, ll, b.body)
		bodyAt := b.f.Bodies[0] - b.f.Off
		for i, p := range pieces {
			b.at = append(b.at, bodyAt+rel[i])
			if p.sameSg {
				src, _ := p.frame(ll)
				b.extras = append(b.extras, extra{b.f.Off + bodyAt + rel[i], src.Watermark})
			}
		}
		return b
	}
	name := func(s string) string { return "copies_in_a_body/" + base + "/" + s }
	cases := []corruptionCase{{name: name("whole"), base: base, run: func(t *testing.T, ll logLayout) want {
		b := build(t, ll)
		return want{last: b.f.First, bodies: map[uint64][]byte{b.f.First: b.body}}
	}}}
	// Cut points: inside the frame header and the record header, and
	// around the start, header end and end of every copy.
	for _, k := range []int64{1, 39, 40, 63, 64, 65} {
		cases = append(cases, corruptionCase{name: name(fmt.Sprintf("torn_keep_%d", k)), base: base,
			run: func(t *testing.T, ll logLayout) want {
				b := build(t, ll)
				cutFile(t, ll.path(b.f.Seg), b.f.Off+k)
				return mustCut(t, expectTail(b.ll, damage{size: b.f.Off + k, extras: b.extras}, tornReason(b.f.Size, k)))
			}})
	}
	for i, p := range pieces {
		for _, pos := range []struct {
			name string
			rel  func(n int64) int64
		}{
			{"at_its_start", func(int64) int64 { return 0 }},
			{"in_its_header", func(int64) int64 { return 20 }},
			{"after_its_header", func(int64) int64 { return FrameHeaderSize }},
			{"before_its_end", func(n int64) int64 { return n - 1 }},
			{"after_it", func(n int64) int64 { return n }},
		} {
			cases = append(cases, corruptionCase{name: name(fmt.Sprintf("torn_%s_copy_of_%s", pos.name, p.name)), base: base,
				run: func(t *testing.T, ll logLayout) want {
					b := build(t, ll)
					src, sl := p.frame(ll)
					keep := b.at[i] + pos.rel(int64(len(frameBytes(t, sl, src))))
					cutFile(t, ll.path(b.f.Seg), b.f.Off+keep)
					return mustCut(t, expectTail(b.ll, damage{size: b.f.Off + keep, extras: b.extras}, tornReason(b.f.Size, keep)))
				}})
		}
	}
	cases = append(cases, corruptionCase{name: name("torn_one_byte_short"), base: base,
		run: func(t *testing.T, ll logLayout) want {
			b := build(t, ll)
			keep := b.f.Size - 1
			cutFile(t, ll.path(b.f.Seg), b.f.Off+keep)
			return mustCut(t, expectTail(b.ll, damage{size: b.f.Off + keep, extras: b.extras}, tornReason(b.f.Size, keep)))
		}})
	return cases
}

// forgedHeader is a frame header for the tail segment with a correct MAC,
// as only someone who knows the salt can compute.
func forgedHeader(ll logLayout, first, watermark uint64, count, payload uint32) []byte {
	h := make([]byte, FrameHeaderSize)
	copy(h, frameMagic)
	binary.BigEndian.PutUint32(h[frOffCount:], count)
	binary.BigEndian.PutUint64(h[frOffFirst:], first)
	binary.BigEndian.PutUint64(h[frOffWatermark:], watermark)
	binary.BigEndian.PutUint32(h[frOffPayload:], payload)
	newSealer(ll.tail().Hdr).remac(h)
	return h
}

// forgerCases document that only the salt protects the rule from a body:
// a producer who knew it could put a header in a body that makes its own
// torn write refused (though never misread).
func forgerCases() []corruptionCase {
	const high = 1 << 40
	name := func(s string) string { return "forged_mac_in_a_body/always/" + s }
	body := func(ll logLayout, wm uint64) []byte {
		return slices.Concat([]byte("x"), forgedHeader(ll, baseLast+1, wm, 1, 100), bytes.Repeat([]byte{'y'}, 60))
	}
	return []corruptionCase{
		{name: name("high_watermark/whole_frame_opens"), base: "always", run: func(t *testing.T, ll logLayout) want {
			b := body(ll, high)
			_, f := appendRecord(t, ll, b)
			return want{last: f.First, bodies: map[uint64][]byte{f.First: b}}
		}},
		{name: name("high_watermark/torn_write_refused"), base: "always", run: func(t *testing.T, ll logLayout) want {
			nl, f := appendRecord(t, ll, body(ll, high))
			keep := f.Size - 10
			cutFile(t, ll.path(f.Seg), f.Off+keep)
			w := expectTail(nl, damage{size: f.Off + keep, extras: []extra{{f.Bodies[0] + 1, high}}}, tornReason(f.Size, keep))
			if !w.refused || !strings.Contains(w.reason, fmt.Sprintf("the frame at offset %d states records up to %d", f.Bodies[0]+1, uint64(high))) {
				t.Fatalf("the forged header does not decide: %+v", w)
			}
			return w
		}},
		{name: name("low_watermark/torn_write_cut"), base: "always", run: func(t *testing.T, ll logLayout) want {
			nl, f := appendRecord(t, ll, body(ll, 0))
			keep := f.Size - 10
			cutFile(t, ll.path(f.Seg), f.Off+keep)
			return mustCut(t, expectTail(nl, damage{size: f.Off + keep, extras: []extra{{f.Bodies[0] + 1, 0}}}, tornReason(f.Size, keep)))
		}},
		{name: name("whole_frame_at_the_next_lsn/torn_write_cut_not_misread"), base: "always", run: func(t *testing.T, ll logLayout) want {
			// A complete frame for the LSN recovery expects next, MAC and
			// all: the reader never looks for frames inside a body, so it
			// never becomes record 46.
			forged := newSealer(ll.tail().Hdr).frame(baseLast+1, 1, baseLast)
			nl, f := appendRecord(t, ll, slices.Concat([]byte("x"), forged, []byte("tail")))
			keep := f.Size - 2
			cutFile(t, ll.path(f.Seg), f.Off+keep)
			return mustCut(t, expectTail(nl, damage{size: f.Off + keep, extras: []extra{{f.Bodies[0] + 1, baseLast}}}, tornReason(f.Size, keep)))
		}},
	}
}

// craftedCases append, after the tail's last frame, a frame with a correct
// MAC that does not verify for another reason; once as the last frame
// (nothing states it: cut) and once followed by a frame stating it
// fsynced (refused).
func craftedCases() []corruptionCase {
	const next = baseLast + 1
	type craft struct {
		name        string
		build       func(s sealer, ll logLayout) []byte
		bad         string // as the last frame
		badFollowed string // followed by another ("" = bad)
		wm          uint64 // its own header's watermark when that verifies, else 0
	}
	two := func(s sealer) []byte { return s.frame(next, 2, baseLast) }
	setByte := func(off int, v byte) func(s sealer, ll logLayout) []byte {
		return func(s sealer, ll logLayout) []byte {
			f := two(s)
			f[off] = v
			s.fixHeaderCRC(f)
			return f
		}
	}
	setHeader := func(change func(f []byte)) func(s sealer, ll logLayout) []byte {
		return func(s sealer, ll logLayout) []byte {
			f := two(s)
			change(f)
			s.remac(f)
			return f
		}
	}
	payloadOf := func(f []byte) uint32 { return binary.BigEndian.Uint32(f[frOffPayload:]) }
	twoPayload := 2*RecordHeaderSize + len(testBody(next)) + len(testBody(next+1))
	r0, r1 := FrameHeaderSize, FrameHeaderSize+RecordHeaderSize
	crafts := []craft{
		{"record_flags_set", setByte(r0+rhOffFlags, 1), "record 46: record header reserved bits set", "", baseLast},
		{"record_reserved_byte_2_set", setByte(r0+2, 0x10), "record 46: record header reserved bits set", "", baseLast},
		{"record_reserved_byte_3_set_in_second_record", setByte(r1+3, 0x80), "record 47: record header reserved bits set", "", baseLast},
		{"record_reserved_tail_set", setByte(r0+23, 1), "record 46: record header reserved bits set", "", baseLast},
		{"record_type_0", setByte(r0+rhOffType, 0), "record 46: record type 0", "", baseLast},
		{"record_empty_body", func(s sealer, ll logLayout) []byte {
			f := two(s)
			binary.BigEndian.PutUint32(f[r0+rhOffLength:], 0)
			s.fixHeaderCRC(f)
			return f
		}, "record 46: record with an empty body", "", baseLast},
		{"record_body_length_lying", func(s sealer, ll logLayout) []byte {
			f := two(s)
			binary.BigEndian.PutUint32(f[r0+rhOffLength:], binary.BigEndian.Uint32(f[r0+rhOffLength:])+1)
			s.fixHeaderCRC(f)
			return f
		}, "record 46: body crc mismatch", "", baseLast},
		{"record_body_crc_field_wrong", func(s sealer, ll logLayout) []byte {
			f := two(s)
			f[r1+rhOffCRC] ^= 1
			s.fixHeaderCRC(f)
			return f
		}, "record 47: body crc mismatch", "", baseLast},
		{"header_crc_field_wrong", setHeader(func(f []byte) { f[frOffHeaderCRC] ^= 1 }), "record headers crc mismatch", "", baseLast},
		{"count_0", setHeader(func(f []byte) { binary.BigEndian.PutUint32(f[frOffCount:], 0) }), "frame of 0 records", "", 0},
		{"count_more_than_the_payload_holds", setHeader(func(f []byte) {
			binary.BigEndian.PutUint32(f[frOffCount:], payloadOf(f)/(RecordHeaderSize+1)+1)
		}), fmt.Sprintf("frame of 4 records cannot have a payload of %d bytes", twoPayload), "", 0},
		{"payload_length_one_longer", setHeader(func(f []byte) {
			binary.BigEndian.PutUint32(f[frOffPayload:], payloadOf(f)+1)
		}), "runs past the end of the segment",
			fmt.Sprintf("frame payload of %d bytes, its records hold %d", twoPayload+1, twoPayload), baseLast},
		{"payload_length_one_shorter", setHeader(func(f []byte) {
			binary.BigEndian.PutUint32(f[frOffPayload:], payloadOf(f)-1)
		}), "record 47: body runs past its frame", "", baseLast},
		{"payload_length_past_the_maximum", setHeader(func(f []byte) {
			binary.BigEndian.PutUint32(f[frOffPayload:], MaxFramePayload+1)
		}), "records cannot have a payload of 1073741825 bytes", "", 0},
		{"lsn_0", setHeader(func(f []byte) { binary.BigEndian.PutUint64(f[frOffFirst:], 0) }), "frame at LSN 0", "", 0},
		{"lsns_overflow", setHeader(func(f []byte) { binary.BigEndian.PutUint64(f[frOffFirst:], ^uint64(0)) }), "frame LSNs overflow", "", 0},
		{"lsn_gap_of_one", func(s sealer, ll logLayout) []byte { return s.frame(next+1, 1, baseLast) }, "lsn gap: want 46, got 47", "", baseLast},
		{"lsn_far_ahead", func(s sealer, ll logLayout) []byte { return s.frame(1000, 1, baseLast) }, "lsn gap: want 46, got 1000", "", baseLast},
		{"lsn_regression_sealed", func(s sealer, ll logLayout) []byte { return s.frame(40, 1, baseLast) }, "lsn out of order: want 46, got 40", "", baseLast},
		// Real frames of the segment, copied after its end (build nil: the
		// case copies them).
		{"lsn_regression_copy_of_the_last_frame", nil, "lsn out of order: want 46, got 45", "", baseLast - 1},
		{"lsn_regression_copy_of_an_older_frame", nil, "lsn out of order: want 46, got 33", "", 32},
	}
	var cases []corruptionCase
	for _, c := range crafts {
		for _, followed := range []bool{false, true} {
			place := "as_the_last_frame"
			if followed {
				place = "followed_by_a_frame_stating_it_fsynced"
			}
			cases = append(cases, corruptionCase{name: "crafted_frame/always/" + c.name + "/" + place, base: "always",
				run: func(t *testing.T, ll logLayout) want {
					tail := ll.tail()
					s := newSealer(tail.Hdr)
					var frame []byte
					switch c.name {
					case "lsn_regression_copy_of_the_last_frame":
						frame = frameBytes(t, ll, ll.frameOf(baseLast))
					case "lsn_regression_copy_of_an_older_frame":
						frame = frameBytes(t, ll, ll.frameOf(33))
					default:
						frame = c.build(s, ll)
					}
					extra := frame
					if followed {
						extra = slices.Concat(frame, s.frame(next+2, 1, next))
					}
					writeFileT(t, tail.Path, slices.Concat(readFileT(t, tail.Path), extra))
					if !followed {
						return want{last: baseLast, cut: &TailInfo{File: tail.Name, Offset: tail.Size, Bytes: int64(len(frame)),
							Reason: c.bad, Watermark: max(baseLast-1, c.wm)}}
					}
					bad := c.bad
					if c.badFollowed != "" {
						bad = c.badFollowed
					}
					return want{refused: true, file: tail.Name, index: next, offset: tail.Size,
						reason: fmt.Sprintf("%s; the frame at offset %d states records up to %d were fsynced", bad, tail.Size+int64(len(frame)), next)}
				}})
		}
	}
	return cases
}

func TestRecoveryCorruptionTable(t *testing.T) {
	templates := map[string]string{}
	layouts := map[string]logLayout{}
	for _, p := range []string{"always", "never", "mixed"} {
		templates[p], layouts[p] = baseLog(t, p, testDir)
	}
	templates["foreign"], layouts["foreign"] = baseLog(t, "always", foreignDir)
	for _, p := range []string{"never", "interval"} {
		templates["pages-"+p], layouts["pages-"+p] = pageLog(t, p)
	}
	foreign := layouts["foreign"]

	var cases []corruptionCase
	add := func(cs ...corruptionCase) { cases = append(cases, cs...) }

	add(corruptionCase{name: "clean/always", base: "always", run: func(*testing.T, logLayout) want { return want{last: baseLast} }})
	add(corruptionCase{name: "clean/never", base: "never", run: func(*testing.T, logLayout) want { return want{last: baseLast} }})

	// A flipped bit in a promised record (a later frame states it fsynced):
	// refused, whichever byte of its frame it is in.
	add(flipCases("always", batchFirst+2, true)...) // a record of the multi-record frame
	add(flipCases("always", 33, false)...)
	add(flipCases("always", 31, false)...)          // the tail's first frame
	add(flipCases("always", baseLast-1, false)...)  // the one the last frame states
	add(flipCases("mixed", batchFirst+1, false)...) // promised by the Sync after 41
	add(flipCases("mixed", baseSyncAt, false)...)   // the last record it promised
	add(flipCases("never", batchFirst+2, true)...)  // nothing fsynced past the roll: cut
	add(flipCases("never", 31, false)...)           // the first frame of the tail: cut, all later dropped
	add(flipCases("never", baseLast, false)...)     // the last frame
	add(flipCases("mixed", baseSyncAt+1, false)...) // the first record after the Sync: cut
	add(flipCases("always", baseLast, false)...)    // the rule's blind spot: nothing states the last batch fsynced
	add(flipCases("never", 5, false)...)            // an older segment: refused
	add(flipCases("never", 15, false)...)           // the last frame of the first segment
	add(flipCases("always", 30, false)...)          // the last frame of the second segment
	add(flipCases("never", 16, false)...)           // the first frame of the second segment

	// A flipped bit in a watermark: the MAC fails, so the frame is damage,
	// and what it claimed counts for nothing.
	for _, wc := range []struct {
		name string
		base string
		lsn  uint64
		byte int64 // in the watermark field
		bit  uint
	}{
		{"promised/low_bit", "always", batchFirst, 7, 0},            // 35 -> 34: refused, the later frames state it
		{"promised/high_bit", "always", batchFirst, 0, 7},           // 35 -> 2^63+35: refused all the same
		{"promised/by_the_sync/low_bit", "mixed", batchFirst, 7, 1}, // refused, frames after the Sync state 41
		{"unpromised/low_bit", "never", batchFirst, 7, 0},           // cut, later frames dropped
		{"unpromised/raised_past_its_own_lsn", "never", 43, 7, 4},   // 30 -> 46 would claim all: the MAC fails, cut
		{"unpromised/high_bit", "mixed", 43, 0, 7},                  // cut
		{"last_frame/always_raised", "always", baseLast, 7, 5},      // 44 -> 12: cut (the blind spot)
		{"last_frame/always_low_bit", "always", baseLast, 7, 0},
	} {
		add(corruptionCase{name: "watermark_field/" + wc.base + "/" + wc.name, base: wc.base,
			run: func(t *testing.T, ll logLayout) want {
				f := ll.frameOf(wc.lsn)
				at := f.Off + frOffWatermark + wc.byte
				flipBit(t, ll.path(f.Seg), at, wc.bit)
				return expectTail(ll, damage{size: ll.tail().Size, spans: []span{{at, at + 1}}}, "frame mac mismatch")
			}})
	}

	// The segment header: any damage refuses, in any segment.
	add(headerFlipCases("always", 1, "first_segment")...)
	add(headerFlipCases("never", 20, "middle_segment")...)
	add(headerFlipCases("always", baseLast, "tail_segment")...)
	add(headerFlipCases("never", baseLast, "tail_segment")...)
	for _, n := range []int64{0, 1, SegmentHeaderSize - 1} {
		add(corruptionCase{name: fmt.Sprintf("segment_header/never/tail_cut_short_to_%d", n), base: "never",
			run: func(t *testing.T, ll logLayout) want {
				tail := ll.tail()
				cutFile(t, tail.Path, n)
				return want{refused: true, file: tail.Name, index: tail.First,
					reason: fmt.Sprintf("segment header cut short: %d of %d bytes", n, SegmentHeaderSize)}
			}})
	}
	headerCase := func(name string, lsn uint64, change func(h []byte), reason func(seg segInfo) string) corruptionCase {
		return corruptionCase{name: "segment_header/always/" + name, base: "always", run: func(t *testing.T, ll logLayout) want {
			seg := ll.seg(ll.frameOf(lsn).Seg)
			rewriteHeader(t, seg.Path, change)
			return want{refused: true, file: seg.Name, index: seg.First, reason: reason(seg)}
		}}
	}
	otherDir := func(h []byte) { copy(h[segOffDir:], foreignDir[:]) }
	add(headerCase("other_directory_id/tail", baseLast, otherDir, func(segInfo) string {
		return fmt.Sprintf("segment belongs to directory %s, not %s", foreignDir, testDir)
	}))
	add(headerCase("other_directory_id/middle", 20, otherDir, func(segInfo) string {
		return fmt.Sprintf("segment belongs to directory %s, not %s", foreignDir, testDir)
	}))
	add(corruptionCase{name: "segment_header/always/other_directory_id/first", base: "always",
		run: func(t *testing.T, ll logLayout) want {
			rewriteHeader(t, ll.segs[0].Path, otherDir)
			w := want{refused: true, file: ll.segs[0].Name, index: 1,
				reason: fmt.Sprintf("segment belongs to directory %s, not %s", foreignDir, testDir)}
			// Scan takes the first segment's directory as the log's, and
			// refuses the second.
			w.scan = &want{refused: true, file: ll.segs[1].Name, index: ll.segs[1].First,
				reason: fmt.Sprintf("segment belongs to directory %s, not %s", testDir, foreignDir)}
			return w
		}})
	for _, which := range []struct {
		name string
		i    int
	}{{"middle", 1}, {"tail", 2}} {
		add(corruptionCase{name: "segment_header/always/segment_copied_from_another_directory/" + which.name, base: "always",
			run: func(t *testing.T, ll logLayout) want {
				seg := ll.segs[which.i]
				writeFileT(t, seg.Path, readFileT(t, foreign.segs[which.i].Path))
				return want{refused: true, file: seg.Name, index: seg.First,
					reason: fmt.Sprintf("segment belongs to directory %s, not %s", foreignDir, testDir)}
			}})
	}
	add(headerCase("name_and_header_disagree/tail", baseLast, func(h []byte) {
		binary.BigEndian.PutUint64(h[segOffFirst:], 32)
	}, func(seg segInfo) string { return "segment header says first LSN 32, its name 31" }))
	add(headerCase("first_lsn_0", baseLast, func(h []byte) { binary.BigEndian.PutUint64(h[segOffFirst:], 0) },
		func(segInfo) string { return "segment header says first LSN 0" }))
	add(headerCase("version_3", baseLast, func(h []byte) { binary.BigEndian.PutUint32(h[segOffVersion:], 3) },
		func(segInfo) string { return "segment of format version 3, this build reads 2" }))
	add(headerCase("version_1", 1, func(h []byte) { binary.BigEndian.PutUint32(h[segOffVersion:], 1) },
		func(segInfo) string { return "segment of format version 1, this build reads 2" }))
	add(corruptionCase{name: "segment_header/always/name_and_header_disagree/first_renamed", base: "always",
		run: func(t *testing.T, ll logLayout) want {
			if err := os.Rename(ll.segs[0].Path, ll.path(SegmentName(2))); err != nil {
				t.Fatal(err)
			}
			return want{refused: true, file: SegmentName(2), index: 2, reason: "segment header says first LSN 1, its name 2"}
		}})

	// Segments that do not follow each other.
	add(corruptionCase{name: "segments/always/missing_middle_segment", base: "always", run: func(t *testing.T, ll logLayout) want {
		if err := os.Remove(ll.segs[1].Path); err != nil {
			t.Fatal(err)
		}
		return want{refused: true, file: ll.tail().Name, index: ll.tail().First,
			reason: fmt.Sprintf("lsn gap: segment starts at %d, want %d", ll.tail().First, ll.segs[1].First)}
	}})
	newSegment := func(t *testing.T, ll logLayout, first uint64) {
		h := segmentHeader{dir: testDir, first: first}
		rand.Read(h.salt[:])
		writeFileT(t, ll.path(SegmentName(first)), appendSegmentHeader(nil, h))
	}
	add(corruptionCase{name: "segments/always/segment_after_a_gap", base: "always", run: func(t *testing.T, ll logLayout) want {
		newSegment(t, ll, baseLast+5)
		return want{refused: true, file: SegmentName(baseLast + 5), index: baseLast + 5,
			reason: fmt.Sprintf("lsn gap: segment starts at %d, want %d", baseLast+5, baseLast+1)}
	}})
	add(corruptionCase{name: "segments/always/overlapping_segment", base: "always", run: func(t *testing.T, ll logLayout) want {
		newSegment(t, ll, 40)
		return want{refused: true, file: SegmentName(40), index: 40,
			reason: fmt.Sprintf("lsn overlap: segment starts at 40, want %d", baseLast+1)}
	}})
	add(corruptionCase{name: "segments/never/empty_segment_after_a_clean_roll", base: "never", run: func(t *testing.T, ll logLayout) want {
		newSegment(t, ll, baseLast+1) // a roll whose first frame never came
		return want{last: baseLast}
	}})
	add(corruptionCase{name: "segments/never/foreign_files_ignored", base: "never", run: func(t *testing.T, ll logLayout) want {
		writeFileT(t, ll.path("notes.txt"), []byte("not a segment"))
		writeFileT(t, ll.path(SegmentName(1)+".broken"), []byte("an old repair"))
		writeFileT(t, ll.path("00000000000000000000.seg"), []byte("LSN 0 is no segment"))
		writeFileT(t, ll.path("0000000000000000003.seg"), []byte("19 digits"))
		writeFileT(t, ll.path(Format1SegmentName(1)), []byte("a format-1 name"))
		writeFileT(t, ll.path(SnapshotName(3)), []byte("a snapshot"))
		if err := os.Mkdir(ll.path(SegmentName(99)), 0o700); err != nil {
			t.Fatal(err)
		}
		return want{last: baseLast}
	}})

	// Damage in a segment older than the newest: all of it was fsynced.
	add(corruptionCase{name: "older_segment/never/torn_first_segment", base: "never", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(15)
		cutFile(t, ll.path(f.Seg), f.End()-1)
		return refusedOlder(f, tornReason(f.Size, f.Size-1))
	}})
	add(corruptionCase{name: "older_segment/never/zeros_appended_to_the_first_segment", base: "never", run: func(t *testing.T, ll logLayout) want {
		s := ll.segs[0]
		writeFileT(t, s.Path, append(readFileT(t, s.Path), make([]byte, 100)...))
		return refusedOlder(frameInfo{Seg: s.Name, Off: s.Size, First: 16}, "bad frame magic")
	}})
	add(corruptionCase{name: "older_segment/never/zero_page_in_the_middle_segment", base: "never", run: func(t *testing.T, ll logLayout) want {
		s := ll.segs[1]
		data := readFileT(t, s.Path)
		clear(data[512:1024])
		writeFileT(t, s.Path, data)
		for _, f := range s.Frames {
			if f.End() > 512 {
				// The zeros start after its header: its last body fails.
				return refusedOlder(f, fmt.Sprintf("record %d: body crc mismatch", f.Last))
			}
		}
		panic("unreachable")
	}})
	add(corruptionCase{name: "older_segment/never/last_frame_removed", base: "never", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(15)
		cutFile(t, ll.path(f.Seg), f.Off) // the segment ends cleanly, one record short
		return want{refused: true, file: ll.segs[1].Name, index: 16, reason: "lsn gap: segment starts at 16, want 15"}
	}})
	add(corruptionCase{name: "older_segment/always/frame_removed", base: "always", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(20)
		spliceFile(t, ll.path(f.Seg), f.Off, f.End(), nil)
		return refusedOlder(frameInfo{Seg: f.Seg, Off: f.Off, First: 20}, "lsn gap: want 20, got 21")
	}})

	// kill -9 in the middle of a write: a prefix of the frame, of any
	// length, and nothing after it.
	add(tornCases("always", batchFirst, int(layouts["always"].frameOf(batchFirst).Size))...)
	add(tornCases("always", baseLast, int(layouts["always"].frameOf(baseLast).Size))...)
	add(tornCases("never", batchFirst, int(layouts["never"].frameOf(batchFirst).Size))...)
	add(tornCases("never", 31, int(layouts["never"].frameOf(31).Size))...)

	// Power loss: pages of the unsynced end, in any state and order.
	add(pageCases("never")...)
	add(pageCases("interval")...)

	// Bodies holding copies of real frames, and bodies holding a header
	// with a MAC only the salt's owner could compute.
	add(copyCases("always", foreign)...)
	add(copyCases("never", foreign)...)
	add(forgerCases()...)

	// Frames with a good MAC that break another rule.
	add(craftedCases()...)

	// Real frames at the wrong LSN inside the last segment.
	removeFrame := func(t *testing.T, ll logLayout, lsn uint64) frameInfo {
		f := ll.frameOf(lsn)
		spliceFile(t, ll.path(f.Seg), f.Off, f.End(), nil)
		return f
	}
	add(corruptionCase{name: "lsn_gap/always/frame_removed_mid_tail", base: "always", run: func(t *testing.T, ll logLayout) want {
		f := removeFrame(t, ll, 41)
		return want{refused: true, file: f.Seg, index: 41, offset: f.Off,
			reason: fmt.Sprintf("lsn gap: want 41, got 42; the frame at offset %d states records up to 44 were fsynced", ll.frameOf(baseLast).Off-f.Size)}
	}})
	add(corruptionCase{name: "lsn_gap/always/batch_frame_removed", base: "always", run: func(t *testing.T, ll logLayout) want {
		f := removeFrame(t, ll, batchFirst)
		return want{refused: true, file: f.Seg, index: batchFirst, offset: f.Off,
			reason: fmt.Sprintf("lsn gap: want %d, got %d; the frame at offset %d states records up to 44 were fsynced",
				batchFirst, batchFirst+baseBatch, ll.frameOf(baseLast).Off-f.Size)}
	}})
	add(corruptionCase{name: "lsn_gap/always/second_to_last_frame_removed", base: "always", run: func(t *testing.T, ll logLayout) want {
		// The last frame, at the wrong LSN, is the only one that states
		// the lost record 44 fsynced: its own header counts.
		f := removeFrame(t, ll, baseLast-1)
		return want{refused: true, file: f.Seg, index: baseLast - 1, offset: f.Off,
			reason: fmt.Sprintf("lsn gap: want 44, got 45; the frame at offset %d states records up to 44 were fsynced", f.Off)}
	}})
	add(corruptionCase{name: "lsn_gap/never/frame_removed_mid_tail", base: "never", run: func(t *testing.T, ll logLayout) want {
		f := removeFrame(t, ll, 43)
		return want{last: 42, cut: &TailInfo{File: f.Seg, Offset: f.Off, Bytes: ll.tail().Size - f.End(),
			Reason: "lsn gap: want 43, got 44", Watermark: 30, Later: 1}}
	}})
	add(corruptionCase{name: "lsn_regression/always/frame_repeated_mid_tail", base: "always", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(41)
		spliceFile(t, ll.path(f.Seg), f.End(), f.End(), frameBytes(t, ll, f))
		return want{refused: true, file: f.Seg, index: 42, offset: f.End(),
			reason: fmt.Sprintf("lsn out of order: want 42, got 41; the frame at offset %d states records up to 44 were fsynced", ll.frameOf(baseLast).Off+f.Size)}
	}})
	add(corruptionCase{name: "lsn_regression/never/frame_repeated_mid_tail", base: "never", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(41)
		spliceFile(t, ll.path(f.Seg), f.End(), f.End(), frameBytes(t, ll, f))
		return want{last: 41, cut: &TailInfo{File: f.Seg, Offset: f.End(), Bytes: ll.tail().Size + f.Size - f.End(),
			Reason: "lsn out of order: want 42, got 41", Watermark: 30, Later: 4}}
	}})
	add(corruptionCase{name: "lsn_regression/always/last_frame_repeated", base: "always", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(baseLast)
		spliceFile(t, ll.path(f.Seg), f.End(), f.End(), frameBytes(t, ll, f))
		return want{last: baseLast, cut: &TailInfo{File: f.Seg, Offset: f.End(), Bytes: f.Size,
			Reason: "lsn out of order: want 46, got 45", Watermark: 44}}
	}})

	// What the owner knows was promised (a snapshot's covered LSN) makes
	// damage below it refused even where no frame states it; Scan knows
	// nothing of it.
	add(corruptionCase{name: "must_reach/never/damage_below_it_refused", base: "never", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(43)
		flipBit(t, ll.path(f.Seg), f.Bodies[0], 0)
		cut := expectTail(ll, damage{size: ll.tail().Size, spans: []span{{f.Bodies[0], f.Bodies[0] + 1}}}, "record 43: body crc mismatch")
		return want{refused: true, file: f.Seg, index: 43, offset: f.Off, opts: Options{MustReach: 43},
			reason: "record 43: body crc mismatch; records up to 43 were promised durable", scan: &cut}
	}})
	add(corruptionCase{name: "must_reach/never/damage_above_it_cut", base: "never", run: func(t *testing.T, ll logLayout) want {
		f := ll.frameOf(43)
		flipBit(t, ll.path(f.Seg), f.Bodies[0], 0)
		w := expectTail(ll, damage{size: ll.tail().Size, spans: []span{{f.Bodies[0], f.Bodies[0] + 1}}}, "record 43: body crc mismatch")
		scan := w
		// Open counts MustReach as stated: the cut says 42.
		cut := *w.cut
		cut.Watermark = 42
		w.cut, w.opts, w.scan = &cut, Options{MustReach: 42}, &scan
		return w
	}})
	add(corruptionCase{name: "must_reach/never/log_shorter_than_it", base: "never", run: func(t *testing.T, ll logLayout) want {
		return want{refused: true, file: ll.tail().Name, index: baseLast + 1, opts: Options{MustReach: baseLast + 1},
			reason: fmt.Sprintf("log ends at %d before %d, which it must reach", baseLast, baseLast+1), scan: &want{last: baseLast}}
	}})

	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %s", tc.name)
		}
		seen[tc.name] = true
	}
	if !testrule.Long {
		cases = sampleCases(cases, 2)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case damages a copy of its own
			ll := layouts[tc.base]
			ll.dir = copyDir(t, templates[tc.base])
			ll.segs = slices.Clone(ll.segs)
			for i := range ll.segs {
				ll.segs[i].Path = ll.path(ll.segs[i].Name)
			}
			w := tc.run(t, ll)
			checkCase(t, ll.dir, w)
		})
	}
}

// sampleCases keeps, of each family of cases (the cases whose names differ
// only after the last slash: one damage at every byte of a field, say), its
// first and last case and an even spread between them, perFamily in all;
// families that small are kept whole. The default run takes this sample
// (every kind of damage, at its boundaries) and the long tests every case.
func sampleCases(cases []corruptionCase, perFamily int) []corruptionCase {
	family := func(name string) string { return name[:max(strings.LastIndexByte(name, '/'), 0)] }
	size := map[string]int{}
	for _, tc := range cases {
		size[family(tc.name)]++
	}
	var kept []corruptionCase
	index := map[string]int{}
	for _, tc := range cases {
		f := family(tc.name)
		i, n := index[f], size[f]
		index[f]++
		// The i-th of n is kept when it is the first of its share of the
		// family: perFamily shares, the last ending at the last case.
		if n <= perFamily || i == n-1 || i*(perFamily-1)/(n-1) != (i-1)*(perFamily-1)/(n-1) || i == 0 {
			kept = append(kept, tc)
		}
	}
	return kept
}

// checkRecordsWith is checkRecords with bodies of some LSNs given.
func checkRecordsWith(t *testing.T, recs []Record, first, last uint64, bodies map[uint64][]byte) {
	t.Helper()
	if want := int(last + 1 - first); len(recs) != want {
		t.Fatalf("got %d records, want %d (%d..%d)", len(recs), want, first, last)
	}
	for i, r := range recs {
		lsn := first + uint64(i)
		body, ok := bodies[lsn]
		if !ok {
			body = testBody(lsn)
		}
		if r.LSN != lsn || r.Type != 1 || r.Queue != 0 || !bytes.Equal(r.Body, body) {
			t.Fatalf("record %d: got lsn %d type %d queue %d body %q, want lsn %d", i, r.LSN, r.Type, r.Queue, r.Body, lsn)
		}
	}
}

func checkRefusal(t *testing.T, what, dir string, err error, w want) {
	t.Helper()
	ce := asCorruption(t, what, err)
	if ce.Dir != dir || ce.File != w.file || ce.Index != w.index || ce.Offset != w.offset || !strings.Contains(ce.Err.Error(), w.reason) {
		t.Fatalf("%s: got %q\n(file %s index %d offset %d)\nwant file %s index %d offset %d reason %q",
			what, err, ce.File, ce.Index, ce.Offset, w.file, w.index, w.offset, w.reason)
	}
}

func checkTail(t *testing.T, what string, got, want *TailInfo) {
	t.Helper()
	if got == nil && want == nil {
		return
	}
	if got == nil || want == nil {
		t.Fatalf("%s: cut %+v, want %+v", what, got, want)
	}
	g, w := *got, *want
	g.Reason, w.Reason = "", ""
	if g != w || !strings.Contains(got.Reason, want.Reason) {
		t.Fatalf("%s: cut %+v\nwant %+v", what, *got, *want)
	}
}

// checkCase runs Scan and Open on the damaged log in dir and checks that
// they do what w says: a refusal changes no byte of the directory; a cut
// keeps exactly the records expected, cuts exactly the bytes expected,
// keeps a copy of their start, and leaves a log that takes the next record
// and reopens without another cut.
func checkCase(t *testing.T, dir string, w want) {
	t.Helper()
	before := dirContents(t, dir)
	sw := w
	if w.scan != nil {
		sw = *w.scan
	}
	var scanned replayed
	res, err := Scan(dir, 0, 0, scanned.apply)
	if sw.refused {
		checkRefusal(t, "scan", dir, err, sw)
	} else {
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		checkRecordsWith(t, scanned.recs, 1, sw.last, sw.bodies)
		checkTail(t, "scan", res.Tail, sw.cut)
		if res.Records != len(scanned.recs) || res.Last != sw.last || res.First != 1 {
			t.Fatalf("scan result %+v", res)
		}
	}
	if d := diffContents(before, dirContents(t, dir)); d != "" {
		t.Fatalf("Scan changed the directory: %s", d)
	}

	var r replayed
	opts := withDir(w.opts)
	if opts.FS == nil {
		opts.FS = noSyncFS{OSFS()} // what Open decides is the question, not its fsyncs
	}
	l, info, err := Open(dir, opts, 0, r.apply)
	if w.refused {
		if err == nil {
			l.Close()
		}
		checkRefusal(t, "open", dir, err, w)
		if d := diffContents(before, dirContents(t, dir)); d != "" {
			t.Fatalf("a refused Open changed the directory: %s", d)
		}
		return
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if len(r.bad) > 0 {
		t.Fatalf("replay passed records without their positions: %v", r.bad)
	}
	checkRecordsWith(t, r.recs, 1, w.last, w.bodies)
	if info.First != 1 || info.Last != w.last || info.Replayed != len(r.recs) {
		t.Fatalf("info %+v, want 1..%d", info, w.last)
	}
	checkTail(t, "open", info.Cut, w.cut)
	after := dirContents(t, dir)
	if w.cut == nil {
		if info.CutBytes != 0 || info.BrokenFile != "" {
			t.Fatalf("cut %d bytes (%q) of a clean log", info.CutBytes, info.BrokenFile)
		}
		if d := diffContents(before, after); d != "" {
			t.Fatalf("Open changed a clean log: %s", d)
		}
	} else {
		if info.CutBytes != w.cut.Bytes {
			t.Fatalf("CutBytes %d, want %d", info.CutBytes, w.cut.Bytes)
		}
		orig := before[w.cut.File]
		if after[w.cut.File] != orig[:w.cut.Offset] {
			t.Fatalf("segment holds %d bytes, want the first %d it held", len(after[w.cut.File]), w.cut.Offset)
		}
		if info.BrokenFile != w.cut.File+".broken" {
			t.Fatalf("broken file %q", info.BrokenFile)
		}
		keep := orig[w.cut.Offset:]
		keep = keep[:min(len(keep), brokenKeep)]
		if after[info.BrokenFile] != keep {
			t.Fatalf("%s holds %d bytes, not the first %d cut", info.BrokenFile, len(after[info.BrokenFile]), len(keep))
		}
		delete(after, info.BrokenFile)
		after[w.cut.File] = orig
		if d := diffContents(before, after); d != "" {
			t.Fatalf("Open changed more than the cut: %s", d)
		}
	}
	if lsn, c := l.Append(1, testBody(w.last+1)); lsn != w.last+1 || c.Wait() != nil {
		t.Fatalf("append after open: lsn %d, %v", lsn, c.Wait())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs, info := reopen(t, dir, Options{FS: noSyncFS{OSFS()}})
	checkRecordsWith(t, recs, 1, w.last+1, w.bodies)
	if info.CutBytes != 0 {
		t.Fatalf("second open cut again: %+v", info.Cut)
	}
}

// TestMarkerCorruption: the marker decodes only as written. Every single
// bit flip is refused: as a newer format when it makes the version field
// say more than 2, as corruption otherwise; so is every truncation and
// extension.
func TestMarkerCorruption(t *testing.T) {
	id := DirID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	good := EncodeMarker(id)
	if got, err := DecodeMarker(good); err != nil || got != id {
		t.Fatalf("round trip: %v %v", got, err)
	}
	withCRC := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
		return b
	}
	type mc struct {
		name  string
		data  []byte
		newer bool
	}
	var cases []mc
	for bit := range MarkerSize * 8 {
		b := bytes.Clone(good)
		b[bit/8] ^= 1 << (bit % 8)
		v := binary.BigEndian.Uint32(b[8:])
		cases = append(cases, mc{fmt.Sprintf("bit_flip/byte_%d_bit_%d", bit/8, bit%8), b, bit/8 >= 8 && bit/8 < 12 && v > FormatVersion})
	}
	for n := range MarkerSize {
		cases = append(cases, mc{fmt.Sprintf("truncated_to_%d", n), good[:n], false})
	}
	cases = append(cases,
		mc{"extended_by_one_zero", append(bytes.Clone(good), 0), false},
		mc{"twice", slices.Concat(good, good), false},
		mc{"zero_directory_id", withCRC(slices.Concat([]byte(markerMagic), []byte{0, 0, 0, 2}, make([]byte, 20))), false},
		mc{"version_1", withCRC(slices.Concat([]byte(markerMagic), []byte{0, 0, 0, 1}, id[:], make([]byte, 4))), false},
		mc{"version_0", withCRC(slices.Concat([]byte(markerMagic), []byte{0, 0, 0, 0}, id[:], make([]byte, 4))), false},
		mc{"version_3_longer", slices.Concat([]byte(markerMagic), []byte{0, 0, 0, 3}, make([]byte, 40)), true},
		mc{"version_3_short", slices.Concat([]byte(markerMagic), []byte{0, 0, 0, 3}), true},
		mc{"empty", nil, false},
		mc{"segment_header", appendSegmentHeader(nil, segmentHeader{dir: id, first: 1}), false},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeMarker(tc.data)
			switch {
			case err == nil:
				t.Fatalf("accepted, id %v", got)
			case tc.newer && (!errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt)):
				t.Fatalf("got %v, want ErrNewerFormat", err)
			case !tc.newer && (!errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNewerFormat)):
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}
