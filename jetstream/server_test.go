package jetstream_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	walqjs "github.com/walq/walq/jetstream"
	"github.com/walq/walq/walqtest"
)

// startServer runs a JetStream server in the test's process: file store in
// a temporary directory, fsync on every write (sync_interval: always),
// loopback only. port 0 picks one.
// Caps declares what the adapter offers: everything but the manual clock
// (the server's timers run in real time).
var caps = walqtest.Capabilities{ManualClock: false, Reopen: true, Processes: true,
	Priority: true, Keys: true, Deadlines: true, RecordedSettings: true}

func startServer(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	return startServerWith(t, dir, port, nil)
}

// startServerWith is startServer with the options changed by set.
func startServerWith(t testing.TB, dir string, port int, set func(*server.Options)) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	opts := &server.Options{
		ServerName: "walq-test",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: true,
		NoLog:      true,
		NoSigs:     true,
	}
	if set != nil {
		set(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats-server did not start")
	}
	return s
}

// openQueue opens queue of the Dir called dir on a connection of its own;
// closing the queue closes the connection.
func openQueue(url, dir, queue string, do walqjs.Options, qo walqjs.QueueOptions) (*closingQueue, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	js, err := njs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := walqjs.OpenDir(ctx, js, dir, do)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open dir %s: %w", dir, err)
	}
	q, err := d.OpenQueue(ctx, queue, qo)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open queue %q: %w", queue, err)
	}
	return &closingQueue{Queue: q, nc: nc, js: js, dir: d}, nil
}

type closingQueue struct {
	*walqjs.Queue
	nc  *nats.Conn
	js  njs.JetStream
	dir *walqjs.Dir
}

func (c *closingQueue) Close() error {
	err := c.Queue.Close()
	c.nc.Close()
	return err
}

// freePort finds a loopback port to restart a server on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
