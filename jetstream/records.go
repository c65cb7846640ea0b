package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An item's record: the fence.
//
// JetStream's acks, InProgress and Naks find a delivery by stream sequence,
// and a consumer's memory of its deliveries is flushed to disk
// asynchronously, so neither a reply subject nor the server's delivery
// count can say whether a lease is still the current one. The record can:
// every delivery of a message that a caller is handed is first written
// into the Dir's bucket (WALQ_<dir>_HIST) under =l.<stream sequence> with
// compare-and-swap, and its revision is the lease. Every call on a lease
// (Ack, Nack, Extend, DeadLetter, an expiry on the last attempt) writes the
// record again with the revision it holds, and acts on the server only
// once that write is stored: a receipt whose record another delivery took
// gets walq.ErrLeaseLost and sends nothing. JetStream's deliveries are then
// only offers: a delivery that finds the record held by a lease that has
// not ended (a server that lost its consumer state, a stale Nak) is sent
// back until that lease's end, and one that finds the item finished (acked,
// dead-lettered) finishes the message without running it.
//
// Attempts and the history live in the record too, so MaxAttempts holds
// whatever the server's delivery count says.

// Record states.
const (
	recLease = "lease" // held by the lease Tok until End
	recFree  = "free"  // between leases (nacked)
	recDone  = "done"  // acked or discarded: the message is to be acked
	recDead  = "dead"  // dead-lettered: the dead letter is to be stored, the message terminated
)

// record is the value of an item's record, as JSON.
type record struct {
	V     int    `json:"v"`
	Seq   uint64 `json:"q"` // the stream sequence of the message
	ID    uint64 `json:"i"` // the item's ID
	Att   int    `json:"a"` // the attempt of the latest lease
	Deliv int    `json:"d,omitempty"`
	St    string `json:"s"`
	// End is when the lease ends (Unix ns, the holder's clock: the
	// request time plus the Visibility, or an Extend's time plus its
	// duration): a delivery that arrives before it finds the item held.
	// The processes' clocks must agree within the Fence.
	End   int64     `json:"e,omitempty"`
	Start int64     `json:"t,omitempty"` // when the lease began (Unix ns), for the history
	Tok   uint64    `json:"k,omitempty"` // the lease's token: tells a write of its own
	Hist  []attempt `json:"h,omitempty"`
	Cause string    `json:"c,omitempty"` // dead: the cause
}

const recordVersion = 1

// recordKey is the key of the record of the message at seq of the work
// stream. No queue's history key starts with '=' (queue names hold
// letters, digits, '.', '_' and '-').
func recordKey(seq uint64) string { return "=l." + strconv.FormatUint(seq, 10) }

// errRecordMoved says that the record is no longer at the revision a
// write expected: another delivery took it.
var errRecordMoved = errors.New("walq/jetstream: another delivery took the item's record")

// readItem reads the record of the message at seq: nil when there is
// none.
func (d *Dir) readItem(ctx context.Context, seq uint64) (*record, uint64, error) {
	e, err := d.hist.Get(ctx, recordKey(seq))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, unavailable("read the item's record", err)
	}
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.V != recordVersion {
		return nil, 0, fmt.Errorf("walq/jetstream: the record %s of the bucket %s is not one this build reads (%q)", recordKey(seq), histBucket(d.name), cutError(string(e.Value())))
	}
	return &r, e.Revision(), nil
}

// writeItem stores r if the record is still at rev (0: there is none)
// and returns its new revision; errRecordMoved if it is not. A write whose
// answer was lost is tried again until ctx ends: if the first try was
// stored, the record holds this very write (its token, state and
// attempt), which counts as stored.
func (d *Dir) writeItem(ctx context.Context, r *record, rev uint64) (uint64, error) {
	r.V = recordVersion
	b, _ := json.Marshal(r)
	key := recordKey(r.Seq)
	for {
		nrev, err := d.hist.Update(ctx, key, b, rev)
		if err == nil {
			return nrev, nil
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			cur, crev, rerr := d.readItem(ctx, r.Seq)
			if rerr == nil && cur != nil && cur.Tok == r.Tok && cur.St == r.St && cur.Att == r.Att && cur.End == r.End {
				return crev, nil
			}
			return 0, errRecordMoved
		}
		if !isUnavailable(err) || ctx.Err() != nil {
			return 0, unavailable("write the item's record", err)
		}
		select {
		case <-ctx.Done():
			return 0, unavailable("write the item's record", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dropItem removes the record of the message at seq, once the message
// is gone: a purge of its subject, which leaves no marker.
func (d *Dir) dropItem(ctx context.Context, seq uint64) {
	if err := d.histStream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+histBucket(d.name)+"."+recordKey(seq))); err != nil {
		d.log.Debug("walq/jetstream: could not drop an item's record", "seq", seq, "err", err)
	}
}

// newToken is a lease's token: random, never 0.
func newToken() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}
