package walq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/internal/testrule"
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
// another engine. The default run leaves out the behaviours that take
// seconds of real time (walqtest.Target.Quick), the policies other than
// SyncAlways and the wrapper; the long tests run them all, and the suite
// once more on the system clock.
func TestConformance(t *testing.T) {
	quick := func(tg walqtest.Target) walqtest.Target {
		tg.Quick = !testrule.Long
		return tg
	}
	for _, p := range syncPolicies {
		if !testrule.Long && p.sync != walq.SyncAlways {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			walqtest.Run(t, quick(walqTarget(p.sync)))
		})
	}
	if testrule.Long {
		t.Run("real-time", func(t *testing.T) {
			// As an engine that takes no injected clock is run: every
			// time-based behaviour on the system clock.
			t.Parallel()
			tg := walqTarget(walq.SyncAlways)
			tg.Caps.ManualClock = false
			walqtest.Run(t, tg)
		})
	}
	if testrule.Long {
		// Work is what the wrapper changes, and only the slow behaviours
		// run it.
		t.Run("engine-methods-only", func(t *testing.T) {
			t.Parallel()
			walqtest.Run(t, wrappedTarget(walq.SyncAlways, func(q walqtest.Queue) walqtest.Queue { return methodsOnly{q} }))
		})
	}
}

// TestConformanceNamed holds a named queue to the suite, beside other
// queues that carry traffic (namedTarget); a test of its own, so that each
// stays within the default run's time limit.
func TestConformanceNamed(t *testing.T) {
	tg := namedTarget(walq.SyncAlways)
	tg.Quick = !testrule.Long
	walqtest.Run(t, tg)
}

// namedTarget gives the suite a named queue, "subject", of a directory in
// which two other named queues and the default queue carry traffic of
// their own all along (puts with the keys the suite uses, leases, acks and
// nacks), so every behaviour runs beside other queues sharing its log,
// sequencer, timer and compaction, and must not see them.
func namedTarget(sync walq.SyncPolicy) walqtest.Target {
	return walqtest.Target{
		Open: func(dir string, cfg walqtest.Config) (walqtest.Queue, error) {
			d, err := walq.Open(dir, walq.Options{Clock: cfg.Clock, Sync: sync, Visibility: 7 * time.Second, MaxAttempts: 2})
			if err != nil {
				return nil, err
			}
			subject, err := d.OpenQueue("subject", walq.QueueOptions{
				Visibility:  cfg.Visibility,
				MaxAttempts: cfg.MaxAttempts,
				Backoff:     cfg.Backoff,
				KeyWindow:   cfg.KeyWindow,
			})
			if err != nil {
				d.Close()
				return nil, err
			}
			neighbours := []*walq.Queue{d}
			for _, name := range []string{"before", "after"} {
				n, err := d.OpenQueue(name, walq.QueueOptions{MaxInFlight: 3})
				if err != nil {
					d.Close()
					return nil, err
				}
				neighbours = append(neighbours, n)
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					n := neighbours[i%len(neighbours)]
					n.Put(context.Background(), []byte("neighbour"), walq.WithKey(fmt.Sprintf("k%d", i%7)), walq.WithPriority(-1))
					if m, ok, err := n.TryGet(); err == nil && ok {
						if i%5 == 0 {
							n.Nack(m.Receipt, errors.New("neighbour fails"))
						} else {
							n.Ack(m.Receipt)
						}
					}
				}
			}()
			return &namedQueue{Queue: walqtest.Walq(subject), dir: d, stop: stop, done: done}, nil
		},
		// A named queue records its settings; the default queue's are
		// the Options it is opened with.
		Caps: walqtest.Capabilities{ManualClock: true, Reopen: true, Processes: true,
			Priority: true, Keys: true, Deadlines: true, RecordedSettings: true},
	}
}

// namedQueue is the suite's queue of namedTarget: Close stops the
// neighbours' traffic and closes the directory.
type namedQueue struct {
	walqtest.Queue
	dir  *walq.Queue
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func (n *namedQueue) Close() error {
	err := walq.ErrClosed
	n.once.Do(func() {
		close(n.stop)
		<-n.done
		err = n.dir.Close()
	})
	return err
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
