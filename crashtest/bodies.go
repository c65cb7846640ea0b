package crashtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Bodies are "walq-crashtest <token> " and a filler whose length and bytes
// follow from the token, so the parent can check every byte of every body
// it finds without having been told it (nor keeping it). The token's
// suffix says what the filler is:
//
//	c3.17        lower-case letters
//	c3.17r       random bytes, any value (newlines, zeros, 0xff...)
//	c3.17f1234   hostile: framed, CRC-valid walq log records, each as the
//	             tidwall/wal entry it would be on disk (uvarint length,
//	             envelope), with LSNs from 1234 on, the log's next LSN when
//	             the body was made, so they look like the records that
//	             follow it in the segment; real record types and bodies
//	             (a put, a lease, an ack, an expiry) encoded as the queue
//	             encodes them, with random bytes in between
//
// A hostile body must change nothing recovery decides: a body is opaque.
const bodyPrefix = "walq-crashtest "

// Body kinds, the token suffix that marks them.
const (
	bodyLetters = ""
	bodyRandom  = "r"
	bodyFramed  = "f"
)

// hostileToken returns the token of an item whose body is of kind; lsn is
// the log's next LSN, for framed bodies.
func hostileToken(base, kind string, lsn uint64) string {
	switch kind {
	case bodyRandom:
		return base + bodyRandom
	case bodyFramed:
		return base + bodyFramed + strconv.FormatUint(lsn, 10)
	}
	return base
}

func bodyOf(token string) []byte {
	h := fnv.New64a()
	h.Write([]byte(token))
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	b := make([]byte, 0, len(bodyPrefix)+len(token)+1+600)
	b = append(b, bodyPrefix...)
	b = append(b, token...)
	b = append(b, ' ')
	switch kind, lsn := tokenKind(token); kind {
	case bodyRandom:
		for n := 1 + rng.IntN(400); n > 0; n-- {
			b = append(b, byte(rng.Uint32()))
		}
	case bodyFramed:
		b = appendFramedRecords(b, rng, lsn, token)
	default:
		for n := rng.IntN(200); n > 0; n-- {
			b = append(b, byte('a'+rng.IntN(26)))
		}
	}
	return b
}

// tokenKind returns the body kind of a token, and for a framed body the
// LSN its records start at.
func tokenKind(token string) (string, uint64) {
	_, seq, ok := strings.Cut(token, ".")
	if !ok {
		return bodyLetters, 0
	}
	i := strings.IndexFunc(seq, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		return bodyLetters, 0
	}
	switch seq[i : i+1] {
	case bodyRandom:
		return bodyRandom, 0
	case bodyFramed:
		lsn, _ := strconv.ParseUint(seq[i+1:], 10, 64)
		return bodyFramed, lsn
	}
	return bodyLetters, 0
}

// appendFramedRecords appends one to four framed records with consecutive
// LSNs from lsn, the last one ending the body, so that a tail cut inside
// the body leaves well-formed records after the cut.
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
		entry := wal.AppendRecord(nil, rec.Type(), lsn+uint64(i), body)
		b = binary.AppendUvarint(b, uint64(len(entry)))
		b = append(b, entry...)
	}
	return b
}

// tokenOf returns the token of a body, or "" when it is not a harness body.
func tokenOf(body []byte) string {
	rest, ok := bytes.CutPrefix(body, []byte(bodyPrefix))
	if !ok {
		return ""
	}
	tok, _, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return ""
	}
	return string(tok)
}
