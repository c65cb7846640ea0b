package crashtest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/state"
)

// The ledger must fail on each kind of lie a recovered queue can tell.
// Each case feeds it a child's report and the state a recovery produced,
// and names the violation it must find ("" for none).
func TestLedger(t *testing.T) {
	const (
		put1   = "I 1 put c1.1/0/0/-\n"
		done1  = "D 1 100 5 1 w1000\n"
		get    = "I 2 get\nD 2 110 6 c1.1 2 1 1\n"
		ack    = "I 3 ack c1.1 2\nD 3 120 7\n"
		ackRun = "I 3 ack c1.1 2\n"
		span1  = "I 1 put c1.1/500000000/0/-\n"
	)
	for _, tc := range []struct {
		name   string
		report string
		state  []stored
		want   string
	}{
		{"put done and stored", put1 + done1, []stored{{tok: "c1.1"}}, ""},
		{"put done and lost", put1 + done1, nil, "lost"},
		{"put in flight, stored", put1, []stored{{tok: "c1.1"}}, ""},
		{"put in flight, not stored", put1, nil, ""},
		{"never put", "", []stored{{tok: "c1.9"}}, "unknown item"},
		{"acked and gone", put1 + done1 + get + ack, []stored{{tok: "c1.1", removed: true}}, ""},
		{"acked, gone, not counted", put1 + done1 + get + ack, nil, "counters grew by 0"},
		{"acked and back", put1 + done1 + get + ack, []stored{{tok: "c1.1", attempts: 1, deliveries: 1}}, "came back"},
		{"ack in flight, back", put1 + done1 + get + ackRun, []stored{{tok: "c1.1", attempts: 1, deliveries: 1}}, ""},
		{"ack in flight, gone", put1 + done1 + get + ackRun, []stored{{tok: "c1.1", removed: true}}, ""},
		{"deliveries backwards", put1 + done1 + get, []stored{{tok: "c1.1"}}, "deliveries went backwards"},
		{"dead-lettered, then waiting", put1 + done1 + get + "I 3 dead c1.1 2\nD 3 120 7\n",
			[]stored{{tok: "c1.1", attempts: 1, deliveries: 1}}, "dead-lettered and reported done"},
		{"dead-lettered, redriven", put1 + done1 + get + "I 3 dead c1.1 2\nI 4 redrive c1.1\nD 3 120 7\n",
			[]stored{{tok: "c1.1", attempts: 0, deliveries: 1}}, ""},
		// A redrive answered ErrNotFound: another call took one of its
		// dead letters first, and the answer waited for that to be durable.
		{"notfound, yet dead as listed", put1 + done1 + get + "I 3 dead c1.1 2\nD 3 120 7\nI 4 redrive c1.1 1\nE 4 notfound 8\n",
			[]stored{{tok: "c1.1", attempts: 1, deliveries: 1, dead: true}}, "answered ErrNotFound"},
		{"notfound, redriven by another", put1 + done1 + get + "I 3 dead c1.1 2\nD 3 120 7\nI 4 redrive c1.1 1\nE 4 notfound 8\n",
			[]stored{{tok: "c1.1", attempts: 0, deliveries: 1}}, ""},
		{"notfound, purged by another", put1 + done1 + get + "I 3 dead c1.1 2\nD 3 120 7\nI 4 purge c1.1 1\nI 5 redrive c1.1 1\nD 4 125 8\nE 5 notfound 8\n",
			[]stored{{tok: "c1.1", removed: true}}, ""},
		{"notfound, listed with other deliveries", put1 + done1 + get + "I 3 dead c1.1 2\nD 3 120 7\nI 4 redrive c1.1 0\nE 4 notfound 8\n",
			[]stored{{tok: "c1.1", attempts: 1, deliveries: 1, dead: true}}, ""},
		{"attempts reset without redrive", put1 + done1 + get, []stored{{tok: "c1.1", deliveries: 1}}, "attempts went from 1 to 0"},
		{"batch half stored", "I 1 putb c1.1/0/0/-,c1.2/0/0/-\n", []stored{{tok: "c1.1"}}, "c1.2 lost"},
		{"batch in flight, keyed item refused", "I 1 putb c1.1/0/0/-,c1.2/0/0/k1\n", []stored{{tok: "c1.1"}}, ""},
		{"duplicate stored", "I 1 put c1.1/0/0/k1\nD 1 100 5 d7 w10\n", []stored{{tok: "c1.1"}}, "stored although its put was refused"},
		{"deadline passed", "I 1 put c1.1/50/0/-\n" + done1, []stored{{tok: "c1.1", removed: true}}, ""},

		// Deadlines are checked by spans of queue time: the stored deadline
		// less the put's time lies in [span - window, span], within the
		// tolerance; the wall clock the child read plays no part.
		{"deadline at the span", span1 + done1, []stored{{tok: "c1.1", deadline: 500e6}}, ""},
		{"deadline at the span less the window", span1 + done1, []stored{{tok: "c1.1", deadline: 500e6 - 1000}}, ""},
		{"deadline past the span", span1 + done1, []stored{{tok: "c1.1", deadline: 500e6 + 2e6}}, "deadline 502ms after the put"},
		{"deadline short of the span", span1 + done1, []stored{{tok: "c1.1", deadline: 500e6 - 3e6}}, "deadline 497ms after the put"},
		{"deadline short, a clock step in the call", span1 + "D 1 100 5 1 w?\n", []stored{{tok: "c1.1", deadline: 400e6}}, ""},
		// A wall clock stepped back inside the call puts the same wall-time
		// deadline further from now: only the sign is known.
		{"deadline past the span, a clock step in the call", span1 + "D 1 100 5 1 w?\n",
			[]stored{{tok: "c1.1", deadline: 8 * 60e9}}, ""},
		{"put refused: a step moved its deadline before its due time", span1 + "E 1 deadline-stepped\n", nil, ""},
		{"stored although its put was refused", span1 + "E 1 deadline-stepped\n",
			[]stored{{tok: "c1.1", deadline: 500e6}}, "stored although its put was refused"},
		{"deadline in flight, within the span", span1, []stored{{tok: "c1.1", deadline: 300e6}}, ""},
		{"deadline dropped", span1 + done1, []stored{{tok: "c1.1", deadline: -1}}, "put with a span of 500ms"},
		{"deadline added", put1 + done1, []stored{{tok: "c1.1", deadline: 500e6}}, "put with a span of 0s"},
		{"discarded when its deadline had come", span1 + done1, []stored{{tok: "c1.1", removed: true, deadline: 500e6}}, ""},
		{"gone long before its deadline", "R 0 0 1000\n" + span1 + done1, nil, "c1.1 lost"},
		{"queue time behind the wall clock at open", "R 0 0 5000\n" + put1 + done1, []stored{{tok: "c1.1"}}, "queue time went back"},
		{"empty body stored", "I 1 put c1.1e/0/0/c1.1e\n" + done1, []stored{{tok: "c1.1e"}}, ""},
		{"empty body stored without its key", "I 1 put c1.1e/0/0/c1.1e\n" + done1, []stored{{tok: "c1.1e", key: "-"}}, "unknown item"},
		{"empty body lost", "I 1 put c1.1e/0/0/c1.1e\n" + done1, nil, "c1.1e lost"},
		// Its key is its own: a batch in flight cannot have been refused for it.
		{"batch in flight, empty body refused", "I 1 putb c1.1/0/0/-,c1.2e/0/0/c1.2e\n", []stored{{tok: "c1.1"}}, "c1.2e lost"},
		{"largest body stored", "I 1 put c1.1b262144f7/0/0/-\n" + done1, []stored{{tok: "c1.1b262144f7"}}, ""},
		{"a violation the child saw", "V item c1.1 ran twice\n", nil, "child saw: item c1.1 ran twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, err := parseReport([]byte(tc.report))
			if err != nil {
				t.Fatal(err)
			}
			l := newLedger()
			l.ingest(events, func(event) bool { return true })
			st := stateWith(t, tc.state, l)
			l.check(st, ledgerBodies(l), "check")
			got := strings.Join(l.violations, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("violations:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("want a violation with %q, got:\n%s", tc.want, got)
			}
		})
	}
}

// stateWith builds a state holding the given items, through records as
// the queue would write them.
func stateWith(t *testing.T, items []stored, l *ledger) *state.State {
	t.Helper()
	st := state.New()
	lsn := uint64(0)
	apply := func(r state.Record) {
		lsn++
		if err := st.ApplyAt(lsn, state.DefaultQueue, r, 4096); err != nil {
			t.Fatalf("apply %T: %v", r, err)
		}
	}
	for _, s := range items {
		e := l.entries[s.tok]
		var n state.NewItem
		n.Body = bodyOf(s.tok)
		const putTime = 1000
		if e != nil {
			n.Priority, n.Key = e.priority, e.key
		}
		switch s.key {
		case "":
		case "-":
			n.Key = ""
		default:
			n.Key = s.key
		}
		if s.deadline > 0 {
			n.Deadline = putTime + s.deadline
		}
		apply(&state.Put{Time: putTime, Items: []state.NewItem{n}})
		id := st.NextID() - 1
		if s.removed {
			if n.Deadline != 0 {
				apply(&state.Discard{Time: n.Deadline, IDs: []uint64{id}})
			} else {
				apply(&state.Lease{Time: 10, ID: id, LeaseEnd: 20})
				apply(&state.Ack{Time: 11, Receipt: lsn})
			}
			continue
		}
		for d := int32(0); d < s.deliveries; d++ {
			apply(&state.Lease{Time: 10, ID: id, LeaseEnd: 20})
			r := lsn
			dead := s.dead || (d == s.deliveries-1 && s.attempts == 0)
			apply(&state.End{Kind: state.TypeExpire, Time: 20, Receipt: r, Due: 20, Dead: dead})
			if dead && s.attempts == 0 {
				apply(&state.Redrive{Time: 21, IDs: []uint64{id}})
			}
		}
	}
	return st
}

// stored is an item of the recovered state in a ledger test.
type stored struct {
	tok                  string
	attempts, deliveries int32
	dead                 bool
	removed              bool   // put and then acked (or discarded, with a deadline): counted, not stored
	deadline             int64  // stored deadline after the put's time (0, -1: none)
	key                  string // stored key, if not the put's ("-": none)
}

func TestParseReportTornLine(t *testing.T) {
	events, err := parseReport([]byte("R 1 0 0\nI 1 put c1.1/0/0/-\nD 1 2 3 4\nI 2 ac"))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || events[2].kind != 'D' || events[2].dlsn != 3 {
		t.Fatalf("events = %+v", events)
	}
	if _, err := parseReport([]byte("Q what\n")); err == nil {
		t.Fatal("a malformed line parsed")
	}
}

func TestBodyToken(t *testing.T) {
	for i := range 100 {
		tok := hostileToken(fmt.Sprintf("c%d.%d", i%7, i), []string{bodyLetters, bodyRandom, bodyFramed}[i%3], uint64(i))
		if got := tokenOf(bodyOf(tok)); got != tok {
			t.Fatalf("tokenOf(bodyOf(%q)) = %q", tok, got)
		}
		if !bytes.Equal(bodyOf(tok), bodyOf(tok)) {
			t.Fatalf("bodyOf(%q) is not reproducible", tok)
		}
	}
	if tokenOf([]byte("something else")) != "" {
		t.Fatal("a foreign body has a token")
	}
	// Frame-copy bodies: the token is found (at the end for bodyStart) and
	// every byte is checked by the filler's hash.
	rng := rand.New(rand.NewPCG(1, 1))
	frame := func() []byte {
		f := []byte(frameMagic + " walq-crashtest c9.9 inside a copied frame ")
		for range 20 + rng.IntN(100) {
			f = append(f, byte(rng.Uint32()))
		}
		return f
	}
	for i := range 100 {
		kind := []string{bodyMirror, bodyStart}[i%2]
		tok, body := mirrorBody(fmt.Sprintf("c1.%d", i), kind, [][]byte{frame(), frame(), frame()}, rng)
		if got := tokenOf(body); got != tok || !checkBody(tok, body) {
			t.Fatalf("%s body: tokenOf = %q, want %q; checks %v", kind, got, tok, checkBody(tok, body))
		}
		if kind == bodyStart && !bytes.HasPrefix(body, []byte(frameMagic)) {
			t.Fatalf("a %s body does not start with a frame copy: %q", kind, body[:8])
		}
		bad := bytes.Clone(body)
		bad[len(bad)/2] ^= 1
		if checkBody(tok, bad) {
			t.Fatalf("%s body with a flipped bit checks", kind)
		}
	}
	if tok, _ := mirrorBody("c1.1", bodyMirror, nil, rng); tok != "" {
		t.Fatal("a frame-copy body made of no frames")
	}
}

// Large and empty bodies: the size (and LSN) a large token carries come
// back out of it, its body is exactly that long and regenerates from the
// token alone; an empty body is named by its key.
func TestLargeAndEmptyBodyToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	// The draw itself is cheap: look at many of them for the sizes that matter.
	sawMax, sawPage := false, false
	for range 5000 {
		size := largeSize(rng)
		if size < minLargeBody || size > maxLargeBody {
			t.Fatalf("largeSize = %d, outside [%d, %d]", size, minLargeBody, maxLargeBody)
		}
		sawMax = sawMax || size == maxLargeBody
		sawPage = sawPage || (size%4096 != 0 && (size%4096 < 64 || size%4096 > 4096-64))
	}
	// Building and checking a body is not (up to 256 KiB under the race
	// detector): every boundary size, then a few drawn ones.
	sizes := []int{minLargeBody, minLargeBody + 1, 4095, 4096, 4097, maxLargeBody - 1, maxLargeBody}
	drawn := 7
	if testrule.Long {
		drawn = 300
	}
	for range drawn {
		sizes = append(sizes, largeSize(rng))
	}
	for i, size := range sizes {
		lsn := uint64(1 + rng.IntN(1e6))
		tok := largeToken(fmt.Sprintf("c%d.%d", i%7, i), size, lsn)
		if spec := parseToken(tok); spec.kind != bodyLarge || spec.size != size || spec.lsn != lsn {
			t.Fatalf("parseToken(%q) = %+v, want size %d lsn %d", tok, spec, size, lsn)
		}
		body := bodyOf(tok)
		if len(body) != size {
			t.Fatalf("bodyOf(%q) has %d bytes, want %d", tok, len(body), size)
		}
		if got := tokenOf(body); got != tok || itemToken(body, "k1") != tok || !checkBody(tok, body) {
			t.Fatalf("large body %q: tokenOf = %q, checks %v", tok, got, checkBody(tok, body))
		}
		if i%5 == 0 && !bytes.Equal(bodyOf(tok), body) {
			t.Fatalf("bodyOf(%q) is not reproducible", tok)
		}
		bad := bytes.Clone(body)
		bad[len(bad)-1-rng.IntN(len(bad)-100)] ^= 0x80
		if checkBody(tok, bad) || checkBody(tok, body[:len(body)-1]) || checkBody(tok, append(bytes.Clone(body), 0)) {
			t.Fatalf("large body %q checks with a flipped bit, one byte short or one byte more", tok)
		}
	}
	if !sawMax || !sawPage {
		t.Errorf("largeSize never drew %d (%v) or a size next to a page boundary (%v)", maxLargeBody, sawMax, sawPage)
	}
	// Sizes out of range are not large tokens.
	for _, tok := range []string{"c1.1b1023f5", fmt.Sprintf("c1.1b%df5", maxLargeBody+1), "c1.1b4096", "c1.1bf5"} {
		if k, _ := tokenKind(tok); k == bodyLarge {
			t.Errorf("tokenKind(%q) = large", tok)
		}
	}

	tok := "c3.17" + bodyEmpty
	if k, _ := tokenKind(tok); k != bodyEmpty || len(bodyOf(tok)) != 0 {
		t.Fatalf("empty token %q: kind %q, body %q", tok, k, bodyOf(tok))
	}
	if !checkBody(tok, nil) || !checkBody(tok, []byte{}) || checkBody(tok, []byte("x")) {
		t.Fatal("an empty body's check")
	}
	for key, want := range map[string]string{tok: tok, "k3": "", "": "", "c3.17": "", "c3.17ex": ""} {
		if got := itemToken(nil, key); got != want {
			t.Errorf("itemToken(empty body, key %q) = %q, want %q", key, got, want)
		}
	}
	if got := itemToken(bodyOf("c1.2"), tok); got != "c1.2" {
		t.Errorf("itemToken of a body that holds its token = %q, the key's", got)
	}
}

func TestParseMix(t *testing.T) {
	m, err := ParseMix(DefaultMix, "producers=4,ack=50,compact=5ms")
	if err != nil || m.Producers != 4 || m.Ack != 50 || m.Compact.Milliseconds() != 5 || m.Consumers != DefaultMix.Consumers {
		t.Fatalf("ParseMix = %+v, %v", m, err)
	}
	for _, bad := range []string{"ack=90,nack=20", "nope=1", "producers=0", "ack"} {
		if _, err := ParseMix(DefaultMix, bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

// The ledger's checks of named queues must fail on each kind of lie a
// recovered directory can tell about them. The report opens q1, which the
// state creates at LSN 1 (so its incarnation is 1); the state is built by
// the given steps, and the case names the violation it must find.
func TestLedgerQueues(t *testing.T) {
	const (
		open1    = "I 1 open q1\nD 1 100 1 1\n"
		putQ1    = "I 2 put @1 c1.1/0/0/k1\nD 2 100 2 1 w10\n"
		putDef   = "I 3 put @0 c1.2/0/0/k1\nD 3 100 3 2 w10\n"
		delQ1    = "I 4 delete @1 force\nD 4 100 4\n"
		reopen   = "I 5 open q1\nD 5 100 5 3\n"
		pauseQ1  = "I 6 pause @1 0\nD 6 100 6 w10\n"
		resumeQ1 = "I 7 resume @1\n"
	)
	create := func(st *state.State, lsn uint64) {
		if err := st.ApplyAt(lsn, state.DefaultQueue, &state.CreateQueue{Time: 10, Name: "q1", Settings: queueSettings(0)}, 4096); err != nil {
			t.Fatal(err)
		}
	}
	put := func(st *state.State, lsn, queue uint64, tok, key string) {
		n := state.NewItem{Body: bodyOf(tok), Key: key}
		if err := st.ApplyAt(lsn, queue, &state.Put{Time: 1000, Items: []state.NewItem{n}}, 4096); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(st *state.State, lsn, queue uint64, r state.Record) {
		if err := st.ApplyAt(lsn, queue, r, 4096); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		report string
		build  func(st *state.State)
		want   string
	}{
		{"queue kept", open1 + putQ1, func(st *state.State) { create(st, 1); put(st, 2, 1, "c1.1", "k1") }, ""},
		{"queue lost", open1, func(st *state.State) {}, "no delete of it was ever started"},
		{"queue deleted", open1 + putQ1 + delQ1, func(st *state.State) {
			create(st, 1)
			put(st, 2, 1, "c1.1", "k1")
			apply(st, 3, 1, &state.DeleteQueue{Time: 20, Force: true})
		}, ""},
		{"deleted queue back", open1 + putQ1 + delQ1, func(st *state.State) { create(st, 1); put(st, 2, 1, "c1.1", "k1") },
			"the delete reported done, but it is there"},
		{"delete in flight, kept", open1 + putQ1 + "I 4 delete @1 soft\n", func(st *state.State) { create(st, 1); put(st, 2, 1, "c1.1", "k1") }, ""},
		{"item in another queue", open1 + putQ1, func(st *state.State) { create(st, 1); put(st, 2, 0, "c1.1", "k1") },
			"stored in queue 0, put into queue 1"},
		{"item under another ID", open1 + putQ1, func(st *state.State) {
			create(st, 1)
			apply(st, 2, 0, &state.Put{Time: 1000, Items: []state.NewItem{{Body: []byte("x")}}})
			put(st, 3, 1, "c1.1", "k1")
		}, "stored under ID 2, its put returned 1"},
		{"old item in the new incarnation", open1 + putQ1 + delQ1 + reopen, func(st *state.State) {
			create(st, 1)
			apply(st, 2, 1, &state.DeleteQueue{Time: 20})
			create(st, 3)
			put(st, 4, 3, "c1.1", "k1")
		}, "stored in queue 3, put into queue 1"},
		{"same key in two queues", open1 + putQ1 + putDef, func(st *state.State) {
			create(st, 1)
			put(st, 2, 1, "c1.1", "k1")
			put(st, 3, 0, "c1.2", "k1")
		}, ""},
		{"duplicate across queues", open1 + putQ1 + "I 3 put @0 c1.2/0/0/k1\nD 3 100 3 d1 w10\n", func(st *state.State) {
			create(st, 1)
			put(st, 2, 1, "c1.1", "k1")
		}, "refused as a duplicate of item c1.1"},
		{"pause kept", open1 + pauseQ1, func(st *state.State) {
			create(st, 1)
			apply(st, 2, 1, &state.PauseQueue{Time: 20, Until: math.MaxInt64})
		}, ""},
		{"pause lost", open1 + pauseQ1, func(st *state.State) { create(st, 1) }, "has PausedUntil 0"},
		{"pause lost, resume in flight", open1 + pauseQ1 + resumeQ1, func(st *state.State) { create(st, 1) }, ""},
		{"timed pause too long", open1 + "I 6 pause @1 1000000000\nD 6 100 6 w10\n", func(st *state.State) {
			create(st, 1)
			apply(st, 2, 1, &state.PauseQueue{Time: 20, Until: 20 + 5e9})
		}, "paused for 1s"},
		{"timed pause", open1 + "I 6 pause @1 1000000000\nD 6 100 6 w10\n", func(st *state.State) {
			create(st, 1)
			apply(st, 2, 1, &state.PauseQueue{Time: 20, Until: 20 + 1e9})
		}, ""},
		{"delivered while paused", open1 + putQ1 + pauseQ1 + "I 8 get @1\nD 8 100 8 c1.1 9 1 1\n", func(st *state.State) {
			create(st, 1)
			put(st, 2, 1, "c1.1", "k1")
			apply(st, 3, 1, &state.PauseQueue{Time: 20, Until: math.MaxInt64})
		}, "started after it was paused until resumed"},
		{"delivered by another queue", open1 + putQ1 + "I 8 get @0\nD 8 100 8 c1.1 9 1 1\n", func(st *state.State) {
			create(st, 1)
			put(st, 2, 1, "c1.1", "k1")
		}, "of queue 1 delivered by a get on queue 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, err := parseReport([]byte(tc.report))
			if err != nil {
				t.Fatal(err)
			}
			l := newLedger()
			l.ingest(events, func(event) bool { return true })
			st := state.New()
			tc.build(st)
			l.check(st, ledgerBodies(l), "check")
			got := strings.Join(l.violations, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("violations:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("want a violation with %q, got:\n%s", tc.want, got)
			}
		})
	}
}

// ledgerBodies reads the bodies of a state built in memory: each is the
// body of one of the ledger's tokens, found by its CRC.
func ledgerBodies(l *ledger) func(*state.Item) ([]byte, error) {
	bySum := make(map[uint32][]byte)
	for tok := range l.entries {
		b := bodyOf(tok)
		bySum[state.BodySum(b)] = b
	}
	return func(it *state.Item) ([]byte, error) {
		if it.Body.Len == 0 {
			return nil, nil
		}
		if b, ok := bySum[it.Body.Sum]; ok {
			return b, nil
		}
		return nil, nil // no token's body: an unknown item
	}
}

// TestLedgerBatchRefusedTwice: a batch holding a key twice, both refused as
// duplicates of an item whose own put was reported without being trusted:
// neither batch member may pass for the holder (the second one did, and the
// check then found "its" ID holding the real holder).
func TestLedgerBatchRefusedTwice(t *testing.T) {
	report := "I 1 put c1.1/0/0/k3\nD 1 100 5 1 w10\n" +
		"I 2 putb c1.2/0/0/k3,c1.3/0/0/k3\nD 2 110 6 d1,d1 w10\n"
	events, err := parseReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	l.ingest(events, func(ev event) bool { return ev.n == 2 })
	st := stateWith(t, []stored{{tok: "c1.1"}}, l)
	l.check(st, ledgerBodies(l), "check")
	if len(l.violations) != 0 {
		t.Fatalf("violations:\n%s", strings.Join(l.violations, "\n"))
	}
}

// TestLedgerHolderSeenWithoutID: a batch in flight put a key twice (the
// second refused within the batch); the first was delivered and acked,
// and a later put was refused as a duplicate of it, within the key
// window. The holder was the delivered item, whose ID the ledger never
// learned: the refused batch member must not pass for it (it did, and was
// then reported lost).
func TestLedgerHolderSeenWithoutID(t *testing.T) {
	report := "I 1 putb c1.1/0/0/k3,c1.2/0/0/k3\n" +
		"I 2 get\nD 2 110 6 c1.1 2 1 1\n" +
		"I 3 ack c1.1 2\nD 3 120 7\n" +
		"I 4 put c1.3/0/0/k3\nD 4 130 8 d1 w10\n"
	events, err := parseReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	l.ingest(events, func(event) bool { return true })
	st := stateWith(t, []stored{{tok: "c1.1", removed: true}}, l)
	l.check(st, ledgerBodies(l), "check")
	if len(l.violations) != 0 {
		t.Fatalf("violations:\n%s", strings.Join(l.violations, "\n"))
	}
}

// TestLedgerHolderKnownByUntrustedID: a put reported ID 1 for c1.1 (key
// k5) past the durable point a power loss kept, so its report is not
// trusted; c1.1 survived. Next cycle two puts of k5 were refused as
// duplicates of item 1, the second reported before the first. The ledger
// took the first, still unreported, for the holder (the one entry of the
// key without an ID), then found it not stored with ID 1 held by c1.1: a
// power-loss soak reported this (seed 3172, cycle 504). The entry whose
// put reported ID 1 is the holder.
func TestLedgerHolderKnownByUntrustedID(t *testing.T) {
	report := "I 1 put c1.1/0/0/k5\nD 1 100 5 1 w10\n" +
		"I 2 put c2.1/0/0/k5\n" +
		"I 3 put c2.2/0/0/k5\nD 3 120 7 d1 w10\n" +
		"D 2 130 8 d1 w10\n"
	events, err := parseReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	l.ingest(events, func(ev event) bool { return ev.n != 1 })
	st := stateWith(t, []stored{{tok: "c1.1"}}, l)
	l.check(st, ledgerBodies(l), "check")
	if len(l.violations) != 0 {
		t.Fatalf("violations:\n%s", strings.Join(l.violations, "\n"))
	}
}

// TestLedgerUnreportedPutNotTakenForHolder: c1.1's put (key k0) never
// reported and was lost; c2.1 took k0 and its put reported ID 1, not
// trusted; a later put of k0 was refused as a duplicate of 1. The old
// ledger took c1.1, the one entry of k0 without an ID, for the holder and
// reported it lost (a power-loss soak, seed 3171, cycle 3089).
func TestLedgerUnreportedPutNotTakenForHolder(t *testing.T) {
	report := "I 1 put c1.1/0/0/k0\n" +
		"I 2 put c2.1/0/0/k0\nD 2 100 5 1 w10\n" +
		"I 3 put c3.1/0/0/k0\nD 3 120 7 d1 w10\n"
	events, err := parseReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	l.ingest(events, func(ev event) bool { return ev.n != 2 })
	st := stateWith(t, []stored{{tok: "c2.1"}}, l)
	l.check(st, ledgerBodies(l), "check")
	if len(l.violations) != 0 {
		t.Fatalf("violations:\n%s", strings.Join(l.violations, "\n"))
	}
}
