package wal

import (
	"fmt"
	"time"
)

// SyncPolicy says when a call's record is durable enough for the call to
// return: when a Commit is released, and when the tail is fsynced. The zero
// value is SyncAlways. The root package exports this type as
// walq.SyncPolicy.
type SyncPolicy struct {
	mode  syncMode
	every time.Duration // the fsync period of SyncInterval
}

type syncMode uint8

const (
	syncAlways syncMode = iota
	syncInterval
	syncNever
)

var (
	// SyncAlways returns from a call only after its record is fsynced: a
	// Commit is released after the fsync that covers it. Concurrent calls
	// share one fsync (group commit). What a call reported done survives
	// kill -9 and power loss.
	SyncAlways = SyncPolicy{mode: syncAlways}

	// SyncNever returns once the record is written to the operating system
	// (a Commit is released once its batch is written): it survives kill -9
	// of the process but not a power loss or kernel crash, where everything
	// since the last fsync (Sync, Close, a segment roll, a compaction) may
	// be lost. The log stays consistent either way.
	SyncNever = SyncPolicy{mode: syncNever}
)

// SyncInterval returns once the record is written to the operating system
// and fsyncs every d while there is unsynced data: like SyncNever, but a
// power loss loses at most the last d of calls.
func SyncInterval(d time.Duration) SyncPolicy {
	return SyncPolicy{mode: syncInterval, every: d}
}

// Check reports a policy that cannot work: SyncInterval with an interval
// that is not positive, or a value not made by this package.
func (p SyncPolicy) Check() error {
	switch {
	case p.mode > syncNever:
		return fmt.Errorf("unknown sync policy %d", p.mode)
	case p.mode == syncInterval && p.every <= 0:
		return fmt.Errorf("SyncInterval needs a positive interval, not %v", p.every)
	case p.mode != syncInterval && p.every != 0:
		return fmt.Errorf("an interval (%v) only goes with SyncInterval", p.every)
	}
	return nil
}

func (p SyncPolicy) String() string {
	switch p.mode {
	case syncAlways:
		return "always"
	case syncInterval:
		return fmt.Sprintf("interval(%v)", p.every)
	case syncNever:
		return "never"
	}
	return "unknown"
}
