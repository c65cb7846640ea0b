package main

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestMoveKeepsAnExistingDirsSettings: -key-window and -replicas apply to
// a Dir the move creates. Moving into a Dir that exists (made by the
// service with a 10m key window) with the flags left at their defaults
// keeps its streams as they are; before, OpenDir rewrote them with the
// command's values (a 2m window, and R1 for an R3 Dir).
func TestMoveKeepsAnExistingDirsSettings(t *testing.T) {
	s, err := server.NewServer(&server.Options{
		ServerName: "walq-move-test", Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), SyncAlways: true, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer s.Shutdown()
	ctx := context.Background()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The service's Dir, with its own key window.
	if _, err := walqjs.OpenDir(ctx, js, "app", walqjs.Options{KeyWindow: 10 * time.Minute, FirstSeq: 100}); err != nil {
		t.Fatal(err)
	}
	// A walq directory to move: one item.
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	q.Close()
	// walq-to-jetstream -dir dir -server url -to app (flags at their defaults).
	if err := run(dir, s.ClientURL(), "app", 1, 0, "", 100, 0, false, false); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "WALQ_app")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.Duplicates; got != 10*time.Minute {
		t.Fatalf("the Dir's key window is %v after the move, was 10m: the move rewrote a Dir it did not create", got)
	}
}
