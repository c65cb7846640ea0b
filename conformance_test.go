package walq_test

import (
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/walqtest"
)

// syncPolicies are the policies the conformance suite runs under.
var syncPolicies = []struct {
	name string
	sync walq.SyncPolicy
}{
	{"always", walq.SyncAlways},
	{"interval", walq.SyncInterval(5 * time.Millisecond)},
	{"never", walq.SyncNever},
}

// walqTarget is walq's Queue as the suite's engine.
func walqTarget(sync walq.SyncPolicy) walqtest.Target {
	return walqtest.Target{
		Open: func(dir string, cfg walqtest.Config) (walqtest.Queue, error) {
			q, err := walq.Open(dir, walq.Options{
				Visibility:  cfg.Visibility,
				MaxAttempts: cfg.MaxAttempts,
				Backoff:     cfg.Backoff,
				KeyWindow:   cfg.KeyWindow,
				Clock:       cfg.Clock,
				Sync:        sync,
			})
			if err != nil {
				return nil, err
			}
			return walqtest.Walq(q), nil
		},
		Caps: walqtest.Capabilities{ManualClock: true, Reopen: true, Processes: true,
			Priority: true, Keys: true, Deadlines: true},
	}
}

// TestConformance holds walq's own Queue to the suite of package walqtest,
// under every sync policy, and once more behind a wrapper that hides its
// fast path, so that Work runs on the Engine methods alone, as it does on
// another engine.
func TestConformance(t *testing.T) {
	for _, p := range syncPolicies {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			walqtest.Run(t, walqTarget(p.sync))
		})
	}
	t.Run("real-time", func(t *testing.T) {
		// As an engine that takes no injected clock is run: every
		// time-based behaviour on the system clock.
		t.Parallel()
		tg := walqTarget(walq.SyncAlways)
		tg.Caps.ManualClock = false
		walqtest.Run(t, tg)
	})
	t.Run("engine-methods-only", func(t *testing.T) {
		t.Parallel()
		walqtest.Run(t, wrappedTarget(walq.SyncAlways, func(q walqtest.Queue) walqtest.Queue { return methodsOnly{q} }))
	})
}

// wrappedTarget is walqTarget with each queue it opens wrapped.
func wrappedTarget(sync walq.SyncPolicy, wrap func(walqtest.Queue) walqtest.Queue) walqtest.Target {
	tg := walqTarget(sync)
	open := tg.Open
	tg.Open = func(dir string, cfg walqtest.Config) (walqtest.Queue, error) {
		q, err := open(dir, cfg)
		if err != nil {
			return nil, err
		}
		return wrap(q), nil
	}
	return tg
}

// methodsOnly passes every call on; embedding the interface, not the
// Queue, it has the interface's methods alone, so Work finds no fast path.
type methodsOnly struct{ walqtest.Queue }
