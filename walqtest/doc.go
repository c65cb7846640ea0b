// Package walqtest holds the behaviours a queue engine must show for
// walq.Work to run on it, and checks them, in the manner of testing/fstest:
// give Run a way to open a fresh queue and it runs each behaviour as a
// subtest.
//
// The behaviours:
//
//   - ReferenceScenario: the reference articles' run — 500 items, 10
//     workers, 2% hanging until a 2 s per-item timeout, 10% taking 0.6 s,
//     a visibility of 0.5 s, 3 attempts. Under walq.Work (its heartbeat
//     extends the leases) no item is lost and none runs twice, and the 10
//     hung items are dead letters with their timeout and 3 attempts.
//     Without a heartbeat no item is lost or acked twice, items do run
//     again, and every run of an item but its last ends in a late ack or
//     nack (walq.ErrLeaseLost), so its worker learns the work may be done
//     twice.
//   - Leases: an acked item never comes back; Extend holds a lease past
//     its first visibility; receipts of a lease that expired, or of an
//     item since dead-lettered and redriven, change nothing and return
//     walq.ErrLeaseLost; a nack's backoff is never cut short; an attempt
//     counts when its lease starts (an expired lease counts, and so does
//     one open at a close, where the engine reopens).
//   - Dead letters: out of attempts or sent at once, each with its last
//     error and attempts; redrive (attempts from 1, same ID and body);
//     purge; walq.ErrNotFound for what is no dead letter.
//   - Time: a delay is never early; a put due sooner wakes a consumer that
//     sleeps on a later one; an item whose deadline passes before it is
//     taken is discarded, never delivered, and a deadline before the due
//     time is refused; ready items come smallest priority first, then in
//     the order they became ready.
//   - Keys: a key holds its item's ID across a reopen and for the key
//     window after the ack.
//   - OpeningKeepsSettings: a queue opened again with a zero Visibility
//     and MaxAttempts runs on those it was created with; one opened with
//     a differing one is refused with walq.ErrInvalid and changes nothing.
//   - KilledWorker: a worker process killed with SIGKILL mid-run: its
//     items come back after a reopen, none lost, none whose ack returned
//     delivered again.
//
// An engine that cannot offer one declares so in Capabilities, and the
// behaviours that need it are skipped with the reason. Time-based
// behaviours run on a walq.ManualClock where the engine accepts one
// (Capabilities.ManualClock), in real time otherwise, with bounds that
// hold on a loaded machine; the reference scenario always runs in real
// time (about 25 s).
//
// walq runs the suite on its own Queue (its conformance_test.go, under
// each sync policy in the long tests), in this shape:
//
//	func TestConformance(t *testing.T) {
//		walqtest.Run(t, walqtest.Target{
//			Open: func(dir string, cfg walqtest.Config) (walqtest.Queue, error) {
//				q, err := walq.Open(dir, walq.Options{
//					Visibility: cfg.Visibility, MaxAttempts: cfg.MaxAttempts,
//					Backoff: cfg.Backoff, KeyWindow: cfg.KeyWindow, Clock: cfg.Clock,
//				})
//				if err != nil {
//					return nil, err
//				}
//				return walqtest.Walq(q), nil
//			},
//			Caps: walqtest.Capabilities{ManualClock: true, Reopen: true,
//				Processes: true, Priority: true, Keys: true, Deadlines: true},
//		})
//	}
//
// Another engine plugs in the same way: implement Queue (walq.Engine and
// the calls that fill and inspect it), make Open give a fresh queue for
// each new name, declare what it offers, and call Run from a test. The
// KilledWorker behaviour starts the test binary again with an environment
// variable set, so the test that calls Run must call it the same way in
// that process.
package walqtest
