package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Keys: a put that failed never holds its key, and a key walq refuses is
// refused here too.

// failDelayedPut makes a delayed Put of body with key fail after it
// reserved its ID (the schedule's publish is refused by a stream limit the
// operator set, as the README advises for MaxBytes; a crash or a server
// blip between the two publishes does the same), then lifts the limit.
func failDelayedPut(t *testing.T, q *closingQueue, body []byte, key string) njs.Stream {
	t.Helper()
	ctx := context.Background()
	st, err := q.js.Stream(ctx, "WALQ_diff")
	if err != nil {
		t.Fatal(err)
	}
	setMax := func(n int32) {
		cfg := st.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := q.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMax(1000)
	if _, err := q.Put(ctx, body, walq.WithKey(key), walq.WithDelay(time.Hour)); err == nil {
		t.Fatal("precondition: the delayed put of a body over the stream's MaxMsgSize must fail")
	}
	setMax(-1)
	return st
}

// TestFailedDelayedPutFreesItsKey: a keyed delayed Put that failed after
// it reserved its ID stored nothing and holds no key (the key is claimed
// with the schedule, in one atomic batch), so a retry without the delay
// stores the item, which is delivered; a put of the key after that is
// ErrDuplicate with that ID. (Before, the reservation held
// the key for the whole KeyWindow: the retry was ErrDuplicate naming an
// item that did not exist.)
func TestFailedDelayedPutFreesItsKey(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 2000))
	failDelayedPut(t, q, body, "job-7")
	id, err := q.Put(ctx, body, walq.WithKey("job-7"))
	if err != nil {
		t.Fatalf("the retry of a failed Put = %d, %v; want it stored", id, err)
	}
	m := get(t, q, 2*time.Second)
	if m.ID != id || string(m.Body) != string(body) || m.Key != "job-7" {
		t.Fatalf("delivered %d (key %q, %d B); want item %d", m.ID, m.Key, len(m.Body), id)
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	for _, delay := range []time.Duration{0, time.Hour} {
		if again, err := q.Put(ctx, body, walq.WithKey("job-7"), walq.WithDelay(delay)); !errors.Is(err, walq.ErrDuplicate) || again != id {
			t.Fatalf("a put (delay %v) of the key the retry stored = %d, %v; want %d, ErrDuplicate", delay, again, err, id)
		}
	}
}

// TestFailedDelayedPutRetriedAfterASecond: the same delayed Put retried
// once a second has passed (the TTL reservations have) is stored, its
// schedule under its own ID, and a put of the key after it is
// ErrDuplicate with that ID. (Before, the reservation was gone after 1 s
// while its key stayed held for the KeyWindow: the retry was ErrDuplicate
// and scheduled nothing.)
func TestFailedDelayedPutRetriedAfterASecond(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 2000))
	st := failDelayedPut(t, q, body, "job-8")
	time.Sleep(1100 * time.Millisecond)
	id, err := q.Put(ctx, body, walq.WithKey("job-8"), walq.WithDelay(time.Hour))
	if err != nil {
		t.Fatalf("the retried delayed Put = %d, %v; want it stored", id, err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("walq.diff.s.jobs.%d", id)); err != nil {
		t.Fatalf("the schedule of item %d: %v", id, err)
	}
	if again, err := q.Put(ctx, body, walq.WithKey("job-8")); !errors.Is(err, walq.ErrDuplicate) || again != id {
		t.Fatalf("a put of the key the retry stored = %d, %v; want %d, ErrDuplicate", again, err, id)
	}
}

// TestKeyOverMaxKeySizeRefused: a key over walq.MaxKeySize (1 KiB) is
// ErrInvalid, as on walq, and one of MaxKeySize is taken. (Before, the
// adapter stored it.)
func TestKeyOverMaxKeySizeRefused(t *testing.T) {
	key := strings.Repeat("k", walq.MaxKeySize+1)
	wq, err := walq.Open(t.TempDir(), walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wq.Close()
	_, werr := wq.Put(context.Background(), []byte("x"), walq.WithKey(key))
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	_, jerr := q.Put(context.Background(), []byte("x"), walq.WithKey(key))
	if !errors.Is(werr, walq.ErrInvalid) || !errors.Is(jerr, walq.ErrInvalid) {
		t.Fatalf("a %d-byte key: walq's Put = %v; the adapter's Put = %v; want ErrInvalid from both", len(key), werr, jerr)
	}
	for _, delay := range []time.Duration{0, time.Hour} {
		if _, err := q.Put(context.Background(), []byte("x"), walq.WithKey(key[1:]), walq.WithDelay(delay)); err != nil && !errors.Is(err, walq.ErrDuplicate) {
			t.Fatalf("a key of MaxKeySize bytes (delay %v): %v", delay, err)
		}
	}
}

// restartServer stops s and starts a server on the same store and port,
// then waits until q's connection is back.
func restartServer(t *testing.T, s *server.Server, store string, port int, q *closingQueue) *server.Server {
	t.Helper()
	s.Shutdown()
	s.WaitForShutdown()
	s = startServer(t, store, port)
	t.Cleanup(s.Shutdown)
	deadline := time.Now().Add(5 * time.Second)
	for q.nc.Status() != nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatalf("the connection did not come back: %v", q.nc.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// putRetrying is Put, tried again while JetStream is not ready after a
// restart.
func putRetrying(t *testing.T, q *closingQueue, body string, opts ...walq.PutOption) (uint64, error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, err := q.Put(context.Background(), []byte(body), opts...)
		if err == nil || !errors.Is(err, walqjs.ErrUnavailable) || time.Now().After(deadline) {
			return id, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDelayedKeyHeldAcrossServerRestart: a keyed delayed Put stores item
// R; its schedule fires and the item is acked. A Put of the key is
// ErrDuplicate with R, before and after a restart of the server on the
// same store, and stores nothing: the key's claim, stored with the
// schedule in one atomic batch, lives the KeyWindow, and the restarted
// server rebuilds its duplicate window from it. (Before, the key was held
// by the reservation, and after the restart, which forgot the fired
// schedule, the Put took the reservation for a failed put and stored a
// second item under R.)
func TestDelayedKeyHeldAcrossServerRestart(t *testing.T) {
	store, port := t.TempDir(), freePort(t)
	s := startServer(t, store, port)
	t.Cleanup(s.Shutdown)
	q, err := openQueue(s.ClientURL(), "rkey", "jobs", walqjs.Options{}, walqjs.QueueOptions{Visibility: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ctx := context.Background()
	id := put(t, q, "first", walq.WithKey("order-1"), walq.WithDelay(300*time.Millisecond))
	m := get(t, q, 3*time.Second)
	if m.ID != id || string(m.Body) != "first" {
		t.Fatalf("delivered %d %q, want %d", m.ID, m.Body, id)
	}
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	if again, err := q.Put(ctx, []byte("second"), walq.WithKey("order-1")); !errors.Is(err, walq.ErrDuplicate) || again != id {
		t.Fatalf("a put of the held key before the restart = %d, %v; want %d, ErrDuplicate", again, err, id)
	}
	restartServer(t, s, store, port, q)
	for _, delay := range []time.Duration{0, time.Hour} {
		again, err := putRetrying(t, q, "second", walq.WithKey("order-1"), walq.WithDelay(delay))
		if !errors.Is(err, walq.ErrDuplicate) || again != id {
			t.Fatalf("after a server restart, Put (delay %v) of key %q, held by item %d (acked, KeyWindow 2m) = %d, %v; want %d, ErrDuplicate",
				delay, "order-1", id, again, err, id)
		}
	}
	if m, ok, err := q.TryGet(); ok || err != nil {
		t.Fatalf("after the restart, TryGet = %d %q, %v, %v; want nothing (no second item)", m.ID, m.Body, ok, err)
	}
}

// TestServerRestartHoldsKeysOfRemovedItems: JetStream rebuilds its
// duplicate window at a restart from the messages the stream still holds,
// so a key must not live in the item's own message, which an ack or a
// dead letter removes: a ready item's key is held by a claim stored with
// it in one atomic batch, living the KeyWindow, and a restarted server
// still answers "duplicate" with the item's ID.
func TestServerRestartHoldsKeysOfRemovedItems(t *testing.T) {
	store, port := t.TempDir(), freePort(t)
	s := startServer(t, store, port)
	t.Cleanup(s.Shutdown)
	q, err := openQueue(s.ClientURL(), "rkey2", "jobs", walqjs.Options{}, walqjs.QueueOptions{Visibility: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ctx := context.Background()
	acked := put(t, q, "acked", walq.WithKey("pay-1"))
	dead := put(t, q, "dead", walq.WithKey("pay-2"))
	for range 2 {
		m := get(t, q, 2*time.Second)
		var err error
		if m.ID == acked {
			err = q.Ack(m.Receipt)
		} else {
			err = q.DeadLetter(m.Receipt, errors.New("poison"))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for key, id := range map[string]uint64{"pay-1": acked, "pay-2": dead} {
		if again, err := q.Put(ctx, []byte("second"), walq.WithKey(key)); !errors.Is(err, walq.ErrDuplicate) || again != id {
			t.Fatalf("before the restart, Put of key %q = %d, %v; want %d, ErrDuplicate", key, again, err, id)
		}
	}
	restartServer(t, s, store, port, q)
	for key, id := range map[string]uint64{"pay-1": acked, "pay-2": dead} {
		again, err := putRetrying(t, q, "third", walq.WithKey(key))
		if !errors.Is(err, walq.ErrDuplicate) || again != id {
			t.Fatalf("after a server restart, Put of key %q, whose item was removed = %d, %v; want %d, ErrDuplicate", key, again, err, id)
		}
	}
}

// gateConn holds a write that publishes on a subject holding match until
// release is closed (a slow link, a GC pause between the reservation and
// the schedule of a delayed put).
type gateConn struct {
	net.Conn
	match   []byte
	armed   *bool
	mu      *sync.Mutex
	hit     chan struct{}
	release chan struct{}
	once    *sync.Once
}

func (c *gateConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	armed := *c.armed
	c.mu.Unlock()
	if armed && bytes.Contains(b, c.match) {
		c.once.Do(func() { close(c.hit) })
		<-c.release
	}
	return c.Conn.Write(b)
}

type gateDialer struct{ g gateConn }

func (d *gateDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	g := d.g
	g.Conn = c
	return &g, nil
}

// TestConcurrentKeyedPutsOneWins: two processes put the same key at the
// same time, the first a delayed put slowed between its reservation and
// its schedule (a slow link, a GC pause), the second ready or delayed:
// exactly one of them returns nil and its body is the stored item, the
// other is ErrDuplicate naming that item's ID. (Before, the second took
// the first's reservation for a failed put and stored its item under the
// reserved ID, and the first's schedule, a duplicate of it, was reported
// stored: both returned nil, and the first's body was never stored.)
func TestConcurrentKeyedPutsOneWins(t *testing.T) {
	for i, p2delay := range []time.Duration{time.Hour, 0} {
		t.Run("p2delay="+p2delay.String(), func(t *testing.T) {
			s := startServer(t, t.TempDir(), 0)
			t.Cleanup(s.Shutdown)
			dir := []string{"raceA", "raceB"}[i]
			p2, err := openQueue(s.ClientURL(), dir, "jobs", walqjs.Options{}, walqjs.QueueOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p2.Close() })
			armed := false
			g := gateConn{match: []byte("walq." + dir + ".s.jobs."), armed: &armed, mu: &sync.Mutex{},
				hit: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
			nc, err := nats.Connect(s.ClientURL(), nats.SetCustomDialer(&gateDialer{g: g}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, _ := njs.New(nc)
			ctx := context.Background()
			d, err := walqjs.OpenDir(ctx, js, dir, walqjs.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p1, err := d.OpenQueue(ctx, "jobs", walqjs.QueueOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p1.Close() })
			g.mu.Lock()
			armed = true
			g.mu.Unlock()
			type res struct {
				id  uint64
				err error
			}
			r1 := make(chan res, 1)
			go func() {
				id, err := p1.Put(ctx, []byte("from P1"), walq.WithKey("k"), walq.WithDelay(time.Hour))
				r1 <- res{id, err}
			}()
			select {
			case <-g.hit:
			case <-time.After(5 * time.Second):
				t.Fatal("P1's schedule publish never came")
			}
			id2, err2 := p2.Put(ctx, []byte("from P2"), walq.WithKey("k"), walq.WithDelay(p2delay))
			close(g.release)
			got := <-r1
			var winner uint64
			var body string
			var winnerDelay time.Duration
			switch {
			case got.err == nil && errors.Is(err2, walq.ErrDuplicate) && id2 == got.id:
				winner, body, winnerDelay = got.id, "from P1", time.Hour
			case err2 == nil && errors.Is(got.err, walq.ErrDuplicate) && got.id == id2:
				winner, body, winnerDelay = id2, "from P2", p2delay
			default:
				t.Fatalf("two puts of key %q at the same time: P1 = %d, %v and P2 = %d, %v; want one nil and the other ErrDuplicate with its ID", "k", got.id, got.err, id2, err2)
			}
			stored := ""
			if winnerDelay > 0 {
				st, _ := p2.js.Stream(ctx, "WALQ_"+dir)
				sm, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("walq.%s.s.jobs.%d", dir, winner))
				if err != nil {
					t.Fatalf("the schedule of item %d, which the put that won stored: %v", winner, err)
				}
				stored = string(sm.Data)
			} else if m, ok, _ := p2.TryGet(); ok && m.ID == winner {
				stored = string(m.Body)
			}
			if stored != body {
				t.Fatalf("item %d holds %q; want %q, the body of the put that returned nil", winner, stored, body)
			}
		})
	}
}

// TestRetriedPutHoldsKeyFromItsOwnPut: a keyed delayed Put fails after it
// reserved its ID (its schedule refused); its retry, 0.6 s later, is
// stored; the key is then held for the KeyWindow (1 s) from the retry: a
// put of the key 0.8 s after it is ErrDuplicate with its ID. (Before, the
// key was held by the failed put's reservation, whose window the retry
// inherited: the put 0.8 s after the retry, 1.4 s after the failed put,
// stored a second item.)
func TestRetriedPutHoldsKeyFromItsOwnPut(t *testing.T) {
	q := newQueue(t, walqjs.Options{KeyWindow: time.Second}, walqjs.QueueOptions{})
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 2000))
	t0 := time.Now()
	failDelayedPut(t, q, body, "job-9")
	time.Sleep(time.Until(t0.Add(600 * time.Millisecond)))
	id, err := q.Put(ctx, body, walq.WithKey("job-9"))
	stored := time.Now()
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	time.Sleep(time.Until(stored.Add(800 * time.Millisecond)))
	again, err := q.Put(ctx, []byte("dup"), walq.WithKey("job-9"))
	if !errors.Is(err, walq.ErrDuplicate) || again != id {
		t.Fatalf("a put of key %q %v after the put that stored item %d (KeyWindow 1s) = %d, %v; want %d, ErrDuplicate",
			"job-9", time.Since(stored).Round(10*time.Millisecond), id, again, err, id)
	}
}
