package jetstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestOpenQueueCreatedAtOnce: handles that create a queue at the same
// moment agree on one set of settings: those with the winner's open, the
// others are refused, and none rewrites the consumers.
func TestOpenQueueCreatedAtOnce(t *testing.T) {
	q := newQueue(t, walqjs.Options{}, walqjs.QueueOptions{})
	ctx := context.Background()
	for round, vis := range [][]time.Duration{{time.Second, time.Second, time.Second, time.Second}, {time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}} {
		name := []string{"same", "differ"}[round]
		var wg sync.WaitGroup
		errs := make([]error, len(vis))
		got := make([]time.Duration, len(vis))
		for i, v := range vis {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := q.dir.OpenQueue(ctx, name, walqjs.QueueOptions{Visibility: v, Priorities: []int{0, 1}})
				errs[i] = err
				if err == nil {
					got[i] = h.Settings().Visibility
					h.Close()
				}
			}()
		}
		wg.Wait()
		h, err := q.dir.OpenQueue(ctx, name, walqjs.QueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec := h.Settings().Visibility
		h.Close()
		opened := 0
		for i, err := range errs {
			switch {
			case err == nil:
				opened++
				if got[i] != rec || vis[i] != rec {
					t.Errorf("%s: handle %d opened with %v, has %v; the queue's is %v", name, i, vis[i], got[i], rec)
				}
			case !errors.Is(err, walq.ErrInvalid) || vis[i] == rec:
				t.Errorf("%s: handle %d (%v): %v", name, i, vis[i], err)
			}
		}
		if opened == 0 || round == 0 && opened != len(vis) {
			t.Errorf("%s: %d of %d opened", name, opened, len(vis))
		}
	}
}

// TestOpenDirKeepsSettings: opening a Dir that exists never changes its
// key window (nor its replicas): a zero field takes the Dir's, a differing
// one is refused; a Dir made by an older adapter keeps its settings and
// gains what the adapter needs; SetSettings is the change.
func TestOpenDirKeepsSettings(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dup := func(dir string) time.Duration {
		t.Helper()
		st, err := js.Stream(ctx, "WALQ_"+dir)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.Duplicates
	}
	if _, err := walqjs.OpenDir(ctx, js, "keep", walqjs.Options{KeyWindow: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []walqjs.Options{{KeyWindow: 2 * time.Minute}, {Replicas: 3}} {
		if _, err := walqjs.OpenDir(ctx, js, "keep", o); !errors.Is(err, walq.ErrInvalid) {
			t.Fatalf("OpenDir(%+v) of a Dir with a 1h key window, R1: %v, want ErrInvalid", o, err)
		}
	}
	d, err := walqjs.OpenDir(ctx, js, "keep", walqjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Settings(); got.KeyWindow != time.Hour || got.Replicas != 1 || dup("keep") != time.Hour {
		t.Fatalf("opened with zero options: %+v, stream duplicates %v; want the 1h it was created with", got, dup("keep"))
	}
	s2 := d.Settings()
	s2.KeyWindow = 5 * time.Minute
	if err := d.SetSettings(ctx, s2); err != nil {
		t.Fatal(err)
	}
	if got := dup("keep"); got != 5*time.Minute || d.Settings().KeyWindow != 5*time.Minute {
		t.Fatalf("after SetSettings: stream duplicates %v, Settings %+v", got, d.Settings())
	}

	// A Dir an older adapter made: no layout metadata, no atomic publish.
	if _, err := js.CreateStream(ctx, njs.StreamConfig{
		Name: "WALQ_old", Subjects: []string{"walq.old.>"}, Retention: njs.WorkQueuePolicy,
		Storage: njs.FileStorage, Duplicates: 45 * time.Minute, AllowMsgSchedules: true, AllowMsgTTL: true, AllowDirect: true,
	}); err != nil {
		t.Fatal(err)
	}
	old, err := walqjs.OpenDir(ctx, js, "old", walqjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "WALQ_old")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Duplicates != 45*time.Minute || !cfg.AllowAtomicPublish || !cfg.AllowRollup || old.Settings().KeyWindow != 45*time.Minute {
		t.Fatalf("an older Dir opened: duplicates %v, atomic publish %v, rollup %v", cfg.Duplicates, cfg.AllowAtomicPublish, cfg.AllowRollup)
	}
}

// TestDirSetSettingsRefusesStaleSettings: Dir.SetSettings on a handle
// whose settings another process changed since it read them is ErrInvalid
// and changes nothing; the handle then holds the settings as they are, and
// a SetSettings of what Settings now returns goes through, the other
// process's change kept. (Before, the second process, changing only the
// replicas in what Settings returned, wrote back the key window it had read
// at OpenDir and silently undid the first process's change.)
func TestDirSetSettingsRefusesStaleSettings(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	t.Cleanup(s.Shutdown)
	ctx := context.Background()
	open := func() (*walqjs.Dir, njs.JetStream) {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := njs.New(nc)
		d, err := walqjs.OpenDir(ctx, js, "cfg", walqjs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return d, js
	}
	d1, js := open()
	d2, _ := open()
	s1 := d1.Settings()
	s1.KeyWindow = 10 * time.Minute
	if err := d1.SetSettings(ctx, s1); err != nil {
		t.Fatal(err)
	}
	window := func() time.Duration {
		t.Helper()
		st, err := js.Stream(ctx, "WALQ_cfg")
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.Duplicates
	}
	s2 := d2.Settings()
	s2.Replicas = 1 // "change one field": the Dir must be R1
	if err := d2.SetSettings(ctx, s2); !errors.Is(err, walq.ErrInvalid) {
		t.Fatalf("SetSettings of settings read before another process changed them = %v, want ErrInvalid", err)
	}
	if got := window(); got != 10*time.Minute {
		t.Fatalf("after the refused SetSettings the key window is %v, want the other process's 10m", got)
	}
	s2 = d2.Settings()
	if s2.KeyWindow != 10*time.Minute {
		t.Fatalf("after the refusal the handle holds %+v, want the key window as it is (10m)", s2)
	}
	s2.Replicas = 1
	if err := d2.SetSettings(ctx, s2); err != nil {
		t.Fatal(err)
	}
	if got := window(); got != 10*time.Minute {
		t.Fatalf("the key window is %v, want 10m kept", got)
	}
}
