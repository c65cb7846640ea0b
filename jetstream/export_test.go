package jetstream

import "context"

// For the tests of package jetstream_test.

// LegacyConsumerName is the name an older adapter gave a level's consumer.
var LegacyConsumerName = legacyConsumerName

// DeleteDead deletes the message at seq of d's dead-letter stream as
// Redrive and PurgeDeadLetters do.
func (d *Dir) DeleteDead(ctx context.Context, seq uint64) error { return d.deleteDead(ctx, seq) }
