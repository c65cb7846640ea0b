package jetstream

import (
	"context"

	"github.com/walq/walq"
)

// For the tests of package jetstream_test.

// LegacyConsumerName is the name an older adapter gave a level's consumer.
var LegacyConsumerName = legacyConsumerName

// DeleteDead deletes the message at seq of d's dead-letter stream as
// Redrive and PurgeDeadLetters do.
func (d *Dir) DeleteDead(ctx context.Context, seq uint64) error { return d.deleteDead(ctx, seq) }

// ReplyOf is the reply subject of the delivery behind the lease r: what a
// call on the lease sends its acks and naks to.
func (q *Queue) ReplyOf(r walq.Receipt) string {
	_, _, n := r.Fields()
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.leases[n]; l != nil {
		return l.msg.Reply
	}
	return ""
}

// SetDeadLetterStored sets what runs between a dead letter's publish and
// the Term of its message (nil: nothing).
func SetDeadLetterStored(f func()) { deadLetterStored = f }
