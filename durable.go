//go:build !walq_bug_early_ack

package walq

import "github.com/walq/walq/wal"

// waitDurable blocks until the record behind c is durable under the sync
// policy. (Built with the tag walq_bug_early_ack it does not wait: the crash
// harness uses that build to show that it catches a queue that reports work
// done before it is on disk.)
func waitDurable(c *wal.Commit) error { return c.Wait() }
