package walqtest

import (
	"errors"
	"testing"
	"time"

	"github.com/walq/walq"
)

// testSettingsKept: a queue opened again with a zero Visibility and
// MaxAttempts keeps those it was created with, whatever the engine's
// defaults; one opened with a differing Visibility or MaxAttempts is
// refused with walq.ErrInvalid and changes nothing.
func testSettingsKept(t *testing.T, tg Target) {
	e := newEnv(t, tg, Config{Visibility: 4 * time.Second, MaxAttempts: 3, Backoff: noBackoff, KeyWindow: time.Minute})
	created := e.cfg
	id := e.put("kept")
	zero := created
	zero.Visibility, zero.MaxAttempts = 0, 0
	e.reopenWith(zero)
	if got := e.q.Visibility(); got != created.Visibility {
		t.Fatalf("opened with a zero Visibility: the queue's is %v, want the %v it was created with", got, created.Visibility)
	}
	// The lease lasts the recorded visibility: not less...
	m := e.getID("attempt 1", id)
	e.advance(e.units(3))
	e.noneNow("3 units into a lease of 4")
	// ...and not more.
	e.advance(e.units(2))
	m = e.getID("attempt 2, after the lease of 4 units ended", id)
	if m.Attempt != 2 {
		t.Fatalf("after an expired lease: attempt %d, want 2", m.Attempt)
	}
	// Three attempts, as recorded: the third failure dead-letters.
	mustOK(t, "nack attempt 2", e.q.Nack(m.Receipt, errors.New("fails")))
	m = e.getID("attempt 3", id)
	mustOK(t, "nack attempt 3", e.q.Nack(m.Receipt, errors.New("fails for good")))
	eventually(t, "the item dead after the recorded 3 attempts", func() (bool, error) {
		dl, err := deadLettersByID(e.q)
		return dl[id].Attempts == 3, err
	})

	// Opening with settings that differ is refused and records nothing.
	for _, c := range []struct {
		field string
		cfg   func(*Config)
	}{
		{"Visibility", func(c *Config) { c.Visibility = e.units(1) }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = 7 }},
	} {
		q := e.q
		e.q = nil
		mustOK(t, "close", q.Close())
		cfg := created
		c.cfg(&cfg)
		if q, err := e.tg.Open(e.name, cfg); !errors.Is(err, walq.ErrInvalid) {
			if err == nil {
				q.Close()
			}
			t.Fatalf("opened with a %s that differs from the recorded one: %v, want ErrInvalid", c.field, err)
		}
		e.cfg = zero
		e.open()
		if got := e.q.Visibility(); got != created.Visibility {
			t.Fatalf("after an open with another %s was refused: Visibility %v, want %v", c.field, got, created.Visibility)
		}
	}
	id2 := e.put("after the refused opens")
	for want := 1; want <= 3; want++ {
		m := e.getID("the next item", id2)
		if m.Attempt != want {
			t.Fatalf("attempt %d, want %d", m.Attempt, want)
		}
		mustOK(t, "nack", e.q.Nack(m.Receipt, errors.New("fails")))
	}
	eventually(t, "the next item dead after 3 attempts", func() (bool, error) {
		dl, err := deadLettersByID(e.q)
		return dl[id2].Attempts == 3, err
	})
}
