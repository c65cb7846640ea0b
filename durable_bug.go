//go:build walq_bug_early_ack

package walq

import "github.com/walq/walq/wal"

// waitDurable, in this deliberately broken build, reports a record durable
// without waiting for it. Never use it outside the crash harness's
// self-test.
func waitDurable(c *wal.Commit) error { return nil }
