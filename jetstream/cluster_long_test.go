//go:build long

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// buildServer builds nats-server from the module this one requires, once
// per test binary.
var buildServer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "walq-nats-server-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build nats-server: %v: %s", err, out)
	}
	return bin, nil
})

// node is one nats-server process of a test cluster.
type node struct {
	name string
	port int
	cmd  *exec.Cmd
	log  string
}

// startCluster starts three nats-server processes as one cluster, each
// with its file store in a temporary directory and sync_interval: always.
func startCluster(t *testing.T) []*node {
	t.Helper()
	bin, err := buildServer()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	var nodes []*node
	var routes []string
	cports := make([]int, 3)
	for i := range 3 {
		nodes = append(nodes, &node{name: fmt.Sprintf("n%d", i+1), port: freePort(t)})
		cports[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[i]))
	}
	for i, n := range nodes {
		dir := filepath.Join(base, n.name)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: walq-test
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, n.name, n.port, dir, cports[i], strings.Join(routes, ", "))
		path := filepath.Join(base, n.name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		n.log = filepath.Join(base, n.name+".log")
		n.cmd = exec.Command(bin, "-c", path, "-l", n.log)
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.cmd.ProcessState == nil {
				n.cmd.Process.Kill()
				n.cmd.Wait()
			}
		}
	})
	return nodes
}

func clusterURL(nodes []*node) string {
	var urls []string
	for _, n := range nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.port))
	}
	return strings.Join(urls, ",")
}

// openClusterDir opens the Dir name on a fresh cluster, retrying until the
// cluster takes it: it needs a meta leader before it takes a stream, and
// on a loaded 2-core machine the election of three fresh processes has
// taken over a minute.
func openClusterDir(t *testing.T, js njs.JetStream, name string, opts walqjs.Options) *walqjs.Dir {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		dir, err := walqjs.OpenDir(ctx, js, name, opts)
		cancel()
		if err == nil {
			return dir
		}
		if time.Now().After(deadline) {
			t.Fatalf("open the Dir on the cluster: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterRun is the workload of the cluster tests: a producer that puts
// items (retrying with each item's key until a put returns: a put that
// returned is acknowledged), four workers that get, work and ack, and a
// SIGKILL of the node that leads the work stream mid-run. It returns what
// was acknowledged and what was handled.
type clusterResult struct {
	acked    map[uint64]bool // puts that returned (or returned ErrDuplicate), by ID
	handled  map[uint64]int  // deliveries to a worker, by ID
	ackedRun map[uint64]int  // runs whose ack returned nil
	killed   string
	putErrs  int
	lateAcks int
}

func runCluster(t *testing.T, replicas int, items int, drainFor time.Duration) clusterResult {
	nodes := startCluster(t)
	nc, err := nats.Connect(clusterURL(nodes), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := openClusterDir(t, js, "cluster", walqjs.Options{Replicas: replicas})
	q, err := dir.OpenQueue(ctx, "jobs", walqjs.QueueOptions{Visibility: 2 * time.Second, MaxAttempts: 1000, Backoff: zeroBackoff})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	res := clusterResult{acked: map[uint64]bool{}, handled: map[uint64]int{}, ackedRun: map[uint64]int{}}
	var mu sync.Mutex
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	// Producer: half the items before the workers start (a backlog on
	// the stream when the node goes), the rest during the run.
	put := func(i int) {
		key := fmt.Sprintf("item-%d", i)
		for wctx.Err() == nil {
			pctx, cancel := context.WithTimeout(wctx, 2*time.Second)
			id, err := q.Put(pctx, []byte(key), walq.WithKey(key))
			cancel()
			if err == nil || errors.Is(err, walq.ErrDuplicate) {
				mu.Lock()
				res.acked[id] = true
				mu.Unlock()
				return
			}
			mu.Lock()
			res.putErrs++
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range items / 2 {
		put(i)
	}
	produced := make(chan struct{})
	wg.Go(func() {
		defer close(produced)
		for i := items / 2; i < items; i++ {
			put(i)
			time.Sleep(2 * time.Millisecond)
		}
	})
	// Workers.
	for range 4 {
		wg.Go(func() {
			for {
				m, err := q.Get(wctx)
				if err != nil {
					return
				}
				mu.Lock()
				res.handled[m.ID]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				err = q.Ack(m.Receipt)
				mu.Lock()
				if err == nil {
					res.ackedRun[m.ID]++
				} else {
					res.lateAcks++
				}
				mu.Unlock()
			}
		})
	}
	// Kill the stream's leader once a third of the items were handled.
	for {
		mu.Lock()
		n := len(res.handled)
		mu.Unlock()
		if n >= items/3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	info, err := js.Stream(ctx, "WALQ_cluster")
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	for _, n := range nodes {
		if n.name == leader {
			if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			n.cmd.Wait()
			res.killed = leader
		}
	}
	killedAt := time.Now()
	defer func() {
		t.Logf("R%d: the run ended %v after the SIGKILL", replicas, time.Since(killedAt).Round(time.Millisecond))
	}()
	mu.Lock()
	t.Logf("R%d: SIGKILL of %s, the work stream's leader, after %d items acknowledged and %d handled", replicas, leader, len(res.acked), len(res.handled))
	mu.Unlock()
	// Let the workload finish: every acknowledged item handled, or the
	// drain time gone.
	end := time.Now().Add(drainFor)
	for time.Now().Before(end) {
		select {
		case <-produced:
		default:
			time.Sleep(20 * time.Millisecond)
			continue
		}
		mu.Lock()
		missing := 0
		for id := range res.acked {
			if res.handled[id] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopWork()
	wg.Wait()
	return res
}

// lost lists the acknowledged items never handled.
func (r clusterResult) lost() []uint64 {
	var out []uint64
	for id := range r.acked {
		if r.handled[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// TestClusterR3SurvivesSIGKILL: three nats-server processes, an R3 work
// stream, the leader killed with SIGKILL mid-run: the workload goes on, and
// every item whose put was acknowledged is handled.
func TestClusterR3SurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster test starts three servers")
	}
	const items = 600
	res := runCluster(t, 3, items, 90*time.Second)
	lost := res.lost()
	twice := 0
	for _, n := range res.ackedRun {
		if n > 1 {
			twice++
		}
	}
	t.Logf("R3: %d puts acknowledged (%d put calls failed and were retried), %d delivered, %d lost, %d acked twice, %d late acks",
		len(res.acked), res.putErrs, len(res.handled), len(lost), twice, res.lateAcks)
	if len(res.acked) != items {
		t.Errorf("%d of %d puts were acknowledged: the producer could not go on after the kill", len(res.acked), items)
	}
	if len(lost) > 0 {
		t.Fatalf("R3: %d acknowledged items lost after the SIGKILL of %s: %v", len(lost), res.killed, lost[:min(len(lost), 20)])
	}
}

// TestClusterR1LosesWithItsNode is the negative control: the same run on
// an R1 stream, its one node killed. The items it held are gone with it
// (it never comes back), and the check that passes on R3 finds them lost:
// the cluster test can fail.
func TestClusterR1LosesWithItsNode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster test starts three servers")
	}
	res := runCluster(t, 1, 600, 10*time.Second)
	lost := res.lost()
	t.Logf("R1: %d puts acknowledged, %d handled, %d lost with %s", len(res.acked), len(res.handled), len(lost), res.killed)
	if len(lost) == 0 {
		t.Fatalf("R1 with its node killed lost nothing: the check cannot tell a lost item")
	}
}

// TestClusterSettingsKeptByOtherOpeners: a Dir made R3 with a 1h key
// window, its queue with a 45s visibility, opened again by another client
// and by another process with default options, and by walq-to-jetstream
// (another process) moving a directory into it: replicas, key window and
// AckWait are unchanged.
func TestClusterSettingsKeptByOtherOpeners(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster test starts three servers")
	}
	mover, err := buildMover()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t)
	url := clusterURL(nodes)
	connect := func() njs.JetStream {
		t.Helper()
		nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := njs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := context.Background()
	js := connect()
	dir := openClusterDir(t, js, "kept", walqjs.Options{Replicas: 3, KeyWindow: time.Hour, FirstSeq: 1000})
	q, err := dir.OpenQueue(ctx, "jobs", walqjs.QueueOptions{Visibility: 45 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	check := func(who string) {
		t.Helper()
		for _, name := range []string{"WALQ_kept", "WALQ_kept_DLQ", "KV_WALQ_kept_HIST"} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			if cfg.Replicas != 3 {
				t.Errorf("after %s: %s has %d replicas, want 3", who, name, cfg.Replicas)
			}
			if name == "WALQ_kept" && cfg.Duplicates != time.Hour {
				t.Errorf("after %s: the work stream's duplicate window is %v, want 1h", who, cfg.Duplicates)
			}
		}
		c, err := js.Consumer(ctx, "WALQ_kept", walqjs.ConsumerName("jobs", 0))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CachedInfo().Config.AckWait; got != 45*time.Second {
			t.Errorf("after %s: the queue's AckWait is %v, want 45s", who, got)
		}
	}

	// Another client, default options.
	other, err := walqjs.OpenDir(ctx, connect(), "kept", walqjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oq, err := other.OpenQueue(ctx, "jobs", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oq.Close()
	check("an open with default options")

	// Another process, default options: this test binary again, running
	// TestClusterDefaultOpenerChild.
	child := exec.Command(os.Args[0], "-test.run", "^TestClusterDefaultOpenerChild$", "-test.v")
	child.Env = append(os.Environ(), "WALQ_JS_CHILD_URL="+url)
	if out, err := child.CombinedOutput(); err != nil || !strings.Contains(string(out), "opened kept/jobs with default options") {
		t.Fatalf("the opener process: %v: %s", err, out)
	}
	check("another process's open with default options")

	// walq-to-jetstream, moving a directory with a queue of that name.
	src := t.TempDir()
	wq, err := walq.Open(src, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := wq.OpenQueue("jobs", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := jobs.Put(ctx, []byte(fmt.Sprintf("moved %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := wq.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mover, "-dir", src, "-server", url, "-to", "kept").CombinedOutput(); err != nil {
		t.Fatalf("walq-to-jetstream: %v: %s", err, out)
	}
	check("walq-to-jetstream")
}

// TestClusterDefaultOpenerChild is the other process of
// TestClusterSettingsKeptByOtherOpeners: it opens Dir "kept" and its
// queue "jobs" with default options, and closes them.
func TestClusterDefaultOpenerChild(t *testing.T) {
	url := os.Getenv("WALQ_JS_CHILD_URL")
	if url == "" {
		t.Skip("run by TestClusterSettingsKeptByOtherOpeners in a process of its own")
	}
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir, err := walqjs.OpenDir(ctx, js, "kept", walqjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := dir.OpenQueue(ctx, "jobs", walqjs.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	t.Log("opened kept/jobs with default options")
}
