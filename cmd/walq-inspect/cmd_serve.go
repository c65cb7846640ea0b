package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/walq/walq/web"
)

var serveCmd = &command{
	name:  "serve",
	args:  "DIR",
	short: "the web dashboard over the directory, read-only, on loopback",
	long: `
Serves the dashboard (the pages of package web) over the queue directory:
every queue with its counts and the last hour of its records, items by
state, the head of each queue, items with their history and bodies, dead
letters. It reads the directory as every command does (no lock, no writes,
never wal.Open), so it runs next to a live queue, and replays what the
queue appends every --refresh; over a directory no queue runs on, it shows
the state the last run left. Nothing can be changed from it.

It listens on a loopback address only (--addr, 127.0.0.1:8080 by default;
reach it from elsewhere through an SSH tunnel), and answers only requests
whose Host header is a loopback name or address, so a page of another site
cannot reach it by pointing a name at 127.0.0.1 (DNS rebinding).`,
	flags: func(fs *flag.FlagSet) any {
		o := &serveOpts{}
		fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen on `host:port`, a loopback address")
		fs.DurationVar(&o.refresh, "refresh", 2*time.Second, "replay what the queue appended every `d`")
		return o
	},
	run: runServe,
}

type serveOpts struct {
	addr    string
	refresh time.Duration
}

func runServe(c *cmdEnv) int {
	o := c.opts.(*serveOpts)
	if !c.wantArgs(0) {
		return c.usageErrorf("serve takes one argument, the queue directory")
	}
	if err := checkLoopbackAddr(o.addr); err != nil {
		return c.usageErrorf("%v", err)
	}
	if o.refresh <= 0 {
		return c.usageErrorf("--refresh %v: must be positive", o.refresh)
	}
	srv, err := newServer(c.dir, o.refresh)
	if err != nil {
		return c.errorf("%v", err)
	}
	defer srv.close()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return c.errorf("%v", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.close() // ends the event streams, which Shutdown would wait for
		hs.Shutdown(shut)
	}()
	c.notef("serving %s read-only on http://%s/ (Ctrl-C stops)", c.dir, ln.Addr())
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return c.errorf("%v", err)
	}
	return exitOK
}

// checkLoopbackAddr refuses a listen address that is not on loopback.
func checkLoopbackAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if !loopbackHost(host) {
		return fmt.Errorf("--addr %q: not a loopback address (127.0.0.1, ::1 or localhost); serve shows bodies to whoever reaches it, so it stays on this machine", addr)
	}
	return nil
}

// loopbackHost reports whether host (no port) is a loopback name or
// address: localhost, a name under .localhost, or an IP in 127.0.0.0/8
// or ::1.
func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// server is the dashboard over a directory, behind the Host check, with
// the loop that keeps its state up to date.
type server struct {
	src  *dirSource
	h    *web.Handler
	stop chan struct{}
	done chan struct{}
}

func newServer(dir string, refresh time.Duration) (*server, error) {
	qf, err := listQueue(dir)
	if err != nil {
		return nil, err
	}
	src, err := newDirSource(qf)
	if err != nil {
		return nil, err
	}
	h, err := web.New(src, web.Options{Access: web.ReadOnlyAccess, Title: "walq " + dir})
	if err != nil {
		return nil, err
	}
	s := &server{src: src, h: h, stop: make(chan struct{}), done: make(chan struct{})}
	go s.refreshLoop(refresh)
	return s, nil
}

func (s *server) refreshLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			// An error stays in the source, which keeps showing the last
			// state it rebuilt and reports the error where it has none.
			s.src.refresh()
		}
	}
}

func (s *server) close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	<-s.done
	s.h.Close()
}

// ServeHTTP answers only requests for a loopback Host.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !loopbackHost(host) {
		http.Error(w, fmt.Sprintf("walq-inspect serve answers only requests for a loopback host (localhost, 127.0.0.1, [::1]), not %q", r.Host), http.StatusMisdirectedRequest)
		return
	}
	s.h.ServeHTTP(w, r)
}
