package crashtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Bodies carry a token: "walq-crashtest <token> " and then a filler, or
// for one kind the filler first and " walq-crashtest <token>" at the end.
// The token's suffix says what the filler is, so the parent can check
// every byte of every body it finds without having been told it (nor
// keeping it):
//
//	c3.17        lower-case letters, regenerated from the token
//	c3.17r       random bytes, any value (newlines, zeros, 0xff...), regenerated
//	c3.17f1234   hostile, regenerated: lookalike log records with LSNs from
//	             1234 on (the log's next LSN when the body was made, so they
//	             look like what follows it in the segment), each either a
//	             format-1 entry as tidwall/wal framed it (uvarint length,
//	             CRC-valid envelope) or a format-2 frame with valid record
//	             headers, header CRC and body CRCs, a watermark claiming
//	             its own records fsynced, and a MAC made without the
//	             segment's salt; real record types and bodies (a put, a
//	             lease, an ack, an expiry) encoded as the queue encodes
//	             them, with random bytes in between
//	c3.17m<hash> hostile: copies of real frames of this queue, read by the
//	             child from the queue's own segment files while it runs,
//	             whole or cut short as a torn write leaves a frame, with
//	             random bytes in between
//	c3.17s<hash> the same, but the body starts with a frame copy and the
//	             token comes last
//	c3.17b65536f1234
//	             large: exactly 65536 bytes in all (up to maxLargeBody),
//	             regenerated: runs of random bytes, of zeros (what a lost
//	             page reads as), of letters, and lookalike records with LSNs
//	             from 1234 on, spread over many pages
//	c3.17e       empty: a body of 0 bytes, which cannot hold its token, so
//	             the item's key is the token (itemToken)
//
// Frame copies cannot be regenerated from the token: for m and s the token
// carries the first 8 bytes of the SHA-256 of the filler, and the check
// compares that. A frame copy that lands in the segment it was copied from
// verifies as a frame header (MAC and all) and states its original's
// watermark: recovery must still take it for body bytes, or for a true
// statement about the disk after damage (wal/repair.go). A hostile body
// must change nothing recovery decides: a body is opaque.
const bodyPrefix = "walq-crashtest "

// Body kinds, the token suffix that marks them.
const (
	bodyLetters = ""
	bodyRandom  = "r"
	bodyFramed  = "f"
	bodyMirror  = "m" // copies of real frames after the token
	bodyStart   = "s" // copies of real frames before the token, one at the very start
	bodyLarge   = "b" // b<size>f<lsn>: size bytes in all
	bodyEmpty   = "e" // no bytes; the token is the item's key
)

// maxLargeBody is the largest body the workload puts (walq's MaxBodySize
// is 1 MiB by default; a PutBatch of four of them is far below its 64 MiB).
const maxLargeBody = 256 << 10

// largeToken returns the token of a large body of size bytes (at least
// minLargeBody); lsn is the log's next LSN, for its lookalike records.
func largeToken(base string, size int, lsn uint64) string {
	return base + bodyLarge + strconv.Itoa(size) + bodyFramed + strconv.FormatUint(lsn, 10)
}

// minLargeBody is the smallest size largeToken is given: the token and
// its prefix always fit.
const minLargeBody = 1 << 10

// largeSize draws the size of a large body: a quarter maxLargeBody
// itself, a quarter within 64 bytes of a multiple of the 4 KiB page,
// the rest spread evenly over the powers of two from 1 KiB up.
func largeSize(rng *rand.Rand) int {
	switch rng.IntN(4) {
	case 0:
		return maxLargeBody
	case 1:
		n := 4096*(1+rng.IntN(maxLargeBody/4096)) + rng.IntN(129) - 64
		return min(max(n, minLargeBody), maxLargeBody)
	}
	shift := 10 + rng.IntN(8) // 1 KiB to 128 KiB, then up to twice that
	return min(1<<shift+rng.IntN(1<<shift), maxLargeBody)
}

// hostileToken returns the token of an item whose body is of a kind
// bodyOf regenerates; lsn is the log's next LSN, for framed bodies.
func hostileToken(base, kind string, lsn uint64) string {
	switch kind {
	case bodyRandom:
		return base + bodyRandom
	case bodyFramed:
		return base + bodyFramed + strconv.FormatUint(lsn, 10)
	}
	return base
}

// bodyOf returns the body of a token of a regenerated kind (nil for the
// frame-copy kinds, which checkBody checks by their hash).
func bodyOf(token string) []byte {
	h := fnv.New64a()
	h.Write([]byte(token))
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	spec := parseToken(token)
	if spec.kind == bodyEmpty {
		return []byte{}
	}
	b := make([]byte, 0, max(len(bodyPrefix)+len(token)+1+600, spec.size))
	b = append(b, bodyPrefix...)
	b = append(b, token...)
	b = append(b, ' ')
	switch kind, lsn := spec.kind, spec.lsn; kind {
	case bodyLarge:
		b = appendLarge(b, rng, spec.size, lsn, token)
	case bodyRandom:
		for n := 1 + rng.IntN(400); n > 0; n-- {
			b = append(b, byte(rng.Uint32()))
		}
	case bodyFramed:
		b = appendFramedRecords(b, rng, lsn, token)
	case bodyMirror, bodyStart:
		return nil
	default:
		for n := rng.IntN(200); n > 0; n-- {
			b = append(b, byte('a'+rng.IntN(26)))
		}
	}
	return b
}

// checkBody reports whether body is the body of token.
func checkBody(token string, body []byte) bool {
	kind, _ := tokenKind(token)
	var filler []byte
	switch kind {
	case bodyMirror:
		rest, ok := bytes.CutPrefix(body, []byte(bodyPrefix+token+" "))
		if !ok {
			return false
		}
		filler = rest
	case bodyStart:
		rest, ok := bytes.CutSuffix(body, []byte(" "+bodyPrefix+token))
		if !ok {
			return false
		}
		filler = rest
	default:
		return bytes.Equal(body, bodyOf(token))
	}
	_, seq, _ := strings.Cut(token, ".")
	i := strings.IndexAny(seq, bodyMirror+bodyStart)
	return len(filler) > 0 && seq[i+1:] == fillerHash(filler)
}

func fillerHash(filler []byte) string {
	sum := sha256.Sum256(filler)
	return hex.EncodeToString(sum[:8])
}

// tokenKind returns the body kind of a token, and for a framed or large
// body the LSN its records start at.
func tokenKind(token string) (string, uint64) {
	spec := parseToken(token)
	return spec.kind, spec.lsn
}

// tokenSpec is what a token's suffix says of its body.
type tokenSpec struct {
	kind string
	lsn  uint64 // framed and large: the LSN the lookalike records start at
	size int    // large: the body's length
}

func parseToken(token string) tokenSpec {
	_, seq, ok := strings.Cut(token, ".")
	if !ok {
		return tokenSpec{kind: bodyLetters}
	}
	i := strings.IndexFunc(seq, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		return tokenSpec{kind: bodyLetters}
	}
	switch k, rest := seq[i:i+1], seq[i+1:]; k {
	case bodyRandom, bodyMirror, bodyStart:
		return tokenSpec{kind: k}
	case bodyEmpty:
		if rest == "" {
			return tokenSpec{kind: bodyEmpty}
		}
	case bodyFramed:
		lsn, _ := strconv.ParseUint(rest, 10, 64)
		return tokenSpec{kind: bodyFramed, lsn: lsn}
	case bodyLarge:
		size, lsn, ok := strings.Cut(rest, bodyFramed)
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < minLargeBody || n > maxLargeBody {
			break
		}
		l, _ := strconv.ParseUint(lsn, 10, 64)
		return tokenSpec{kind: bodyLarge, lsn: l, size: n}
	}
	return tokenSpec{kind: bodyLetters}
}

// appendLarge appends the filler of a large body until b holds size
// bytes: runs of random bytes, of zeros, of letters, and lookalike
// records (LSNs from lsn on), the last run cut where the body ends.
func appendLarge(b []byte, rng *rand.Rand, size int, lsn uint64, token string) []byte {
	for len(b) < size {
		switch rng.IntN(6) {
		case 0, 1:
			for n := 1 + rng.IntN(2048); n > 0; n-- {
				b = binary.LittleEndian.AppendUint64(b, rng.Uint64())
			}
		case 2:
			b = append(b, make([]byte, 1+rng.IntN(16<<10))...)
		case 3:
			for n := 1 + rng.IntN(4<<10); n > 0; n-- {
				b = append(b, byte('a'+rng.IntN(26)))
			}
		default:
			b = appendFramedRecords(b, rng, lsn, token)
			lsn += 4
		}
	}
	return b[:max(size, len(bodyPrefix)+len(token)+1)]
}

// appendFramedRecords appends one to four lookalike records with
// consecutive LSNs from lsn, the last one ending the body, so that a tail
// cut inside the body leaves well-formed lookalikes after the cut.
func appendFramedRecords(b []byte, rng *rand.Rand, lsn uint64, token string) []byte {
	now := int64(1_760_000_000_000_000_000) + rng.Int64N(1e15)
	n := 1 + rng.IntN(4)
	for i := range n {
		if i > 0 || rng.IntN(2) == 0 {
			for k := rng.IntN(24); k > 0; k-- {
				b = append(b, byte(rng.Uint32()))
			}
		}
		var rec state.Record
		switch rng.IntN(4) {
		case 0:
			body := fmt.Appendf(nil, "%sforged-%s-%d ", bodyPrefix, token, i)
			rec = &state.Put{Time: now, Items: []state.NewItem{{Body: body, Due: now, Priority: 1, Key: "k" + strconv.Itoa(i)}}}
		case 1:
			rec = &state.Lease{Time: now, ID: 1 + rng.Uint64N(lsn+1), LeaseEnd: now + int64(visibility)}
		case 2:
			rec = &state.Ack{Time: now, Receipt: 1 + rng.Uint64N(lsn+1)}
		default:
			rec = &state.End{Kind: state.TypeExpire, Time: now, Receipt: 1 + rng.Uint64N(lsn+1), Cause: "lease open at recovery", Due: now}
		}
		body, err := state.Encode(nil, rec)
		if err != nil {
			panic(err) // every record above encodes
		}
		if rng.IntN(2) == 0 {
			entry := wal.AppendRecord(nil, rec.Type(), lsn+uint64(i), body)
			b = binary.AppendUvarint(b, uint64(len(entry)))
			b = append(b, entry...)
		} else {
			b = appendLookalikeFrame(b, rng, lsn+uint64(i), rec.Type(), body)
		}
	}
	return b
}

// appendLookalikeFrame appends a format-2 frame of one record at lsn that is
// right in every field a producer can compute (record header, its CRC, the
// body CRC, the payload length) and claims the record fsynced (a watermark
// at or past it), with a MAC that is not the segment's: it made its MAC
// with a salt of its own, or it is random bytes.
func appendLookalikeFrame(b []byte, rng *rand.Rand, lsn uint64, typ byte, body []byte) []byte {
	var rh [recHeaderSize]byte
	rh[0] = typ
	binary.BigEndian.PutUint32(rh[4:], uint32(len(body)))
	binary.BigEndian.PutUint32(rh[16:], crc32.Checksum(body, castagnoli))
	start := len(b)
	b = append(b, frameMagic...)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, lsn+rng.Uint64N(1000))
	b = binary.BigEndian.AppendUint32(b, uint32(len(rh)+len(body)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(rh[:], castagnoli))
	if rng.IntN(2) == 0 {
		salt := make([]byte, 16)
		for i := range salt {
			salt[i] = byte(rng.Uint32())
		}
		b = append(b, frameMAC(salt, b[start:])...)
	} else {
		for range 8 {
			b = append(b, byte(rng.Uint32()))
		}
	}
	b = append(b, rh[:]...)
	return append(b, body...)
}

// maxCopiedFrame bounds a frame the child copies into a body (copies of
// bodies that hold copies would otherwise grow without end).
const maxCopiedFrame = 4 << 10

// readFrames returns copies of the frames of one of the queue's segment
// files as they are now, walked by their payload length (rawFrames): the
// newest segment most often, another one sometimes.
func readFrames(queueDir string, rng *rand.Rand) [][]byte {
	segs, _, err := wal.ListSegments(filepath.Join(queueDir, layout.LogDirName))
	if err != nil || len(segs) == 0 {
		return nil
	}
	s := segs[len(segs)-1]
	if rng.IntN(4) == 0 {
		s = segs[rng.IntN(len(segs))]
	}
	data, err := os.ReadFile(s.Path)
	if err != nil {
		return nil // removed by a compaction meanwhile
	}
	return rawFrames(data, maxCopiedFrame)
}

// mirrorBody makes a body of kind bodyMirror or bodyStart from frames
// copied out of the queue's segments, and returns its token (base plus the
// kind and the hash of the filler). With no frames it returns "".
func mirrorBody(base, kind string, frames [][]byte, rng *rand.Rand) (string, []byte) {
	if len(frames) == 0 {
		return "", nil
	}
	var filler []byte
	for i := range 1 + rng.IntN(3) {
		if i > 0 || (kind == bodyMirror && rng.IntN(2) == 0) {
			for k := rng.IntN(24); k > 0; k-- {
				filler = append(filler, byte(rng.Uint32()))
			}
		}
		// The newest frames most often: copies of the frames right before
		// the body's own are the likeliest to meet it in recovery.
		f := frames[len(frames)-1-min(rng.IntN(len(frames)), rng.IntN(4))]
		if rng.IntN(3) == 0 {
			f = f[:1+rng.IntN(len(f)-1)] // torn: a prefix of the frame
		}
		filler = append(filler, f...)
	}
	tok := base + kind + fillerHash(filler)
	if kind == bodyStart {
		return tok, append(filler, " "+bodyPrefix+tok...)
	}
	return tok, append([]byte(bodyPrefix+tok+" "), filler...)
}

// itemToken returns the token of an item by its body and key: the key for
// an empty body, else tokenOf(body). "": not an item of the workload.
func itemToken(body []byte, key string) string {
	if len(body) == 0 {
		if _, _, ok := strings.Cut(key, "."); ok && parseToken(key).kind == bodyEmpty {
			return key
		}
		return ""
	}
	return tokenOf(body)
}

// tokenOf returns the token of a body, or "" when it is not a harness body.
func tokenOf(body []byte) string {
	if rest, ok := bytes.CutPrefix(body, []byte(bodyPrefix)); ok {
		tok, _, ok := bytes.Cut(rest, []byte(" "))
		if !ok {
			return ""
		}
		return string(tok)
	}
	// A body that starts with a frame copy ends with its token.
	i := bytes.LastIndex(body, []byte(" "+bodyPrefix))
	if i < 0 {
		return ""
	}
	tok := body[i+1+len(bodyPrefix):]
	if len(tok) == 0 || bytes.IndexByte(tok, ' ') >= 0 {
		return ""
	}
	if kind, _ := tokenKind(string(tok)); kind != bodyStart {
		return ""
	}
	return string(tok)
}
