package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// The adapter beside raw JetStream, on one server embedded in this process
// (started by the first of these benchmarks and shared by all of them, the
// settings of startServer: file store, sync_interval: always, R1,
// loopback):
//
//	go test -run XXX -bench 'Raw|Adapter|WaitingGet|IdleWorkQueues' -benchmem -count 3 ./jetstream
//
// BenchmarkRawCycle is the floor of one item's cycle on nats.go's
// jetstream package (publish, Fetch(1) on a durable pull consumer with
// explicit ack, DoubleAck); BenchmarkRawCycleWithKV adds one key-value
// compare-and-swap per cycle, the floor of a fence that writes one
// replicated record per call; BenchmarkAdapterCycle is the adapter's Put,
// Get and Ack.
//
// allocs/op and B/op are the runtime's counts for the whole process, so
// they include what the embedded server allocates to serve the cycle. The
// client-allocs/op and client-B/op metrics are the part whose stacks hold
// no nats-server frame, estimated from the runtime's sampled heap profile
// (exact under -memprofilerate=1, which slows the run).

// rbShared is the one server of these benchmarks.
var rbShared struct {
	once sync.Once
	srv  *server.Server
	seq  atomic.Int64 // numbers the streams and Dirs of each run
}

// rbStorePrefix names the store directories of the shared server:
// rbStorePrefix<pid>-<random>.
const rbStorePrefix = "walq-bench-raw-"

// rbServer is the shared server, started on first use. Its store is a
// directory of its own under the system's temporary directory: the
// server outlives each benchmark, and no hook runs at the end of the test
// binary to remove it, so each start removes the directories of earlier
// runs whose process is gone.
func rbServer(b *testing.B) *server.Server {
	b.Helper()
	rbShared.once.Do(func() {
		rbSweep()
		dir, err := os.MkdirTemp("", rbStorePrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			b.Fatal(err)
		}
		rbShared.srv = startServerWith(b, dir, 0, nil)
	})
	if rbShared.srv == nil {
		b.Fatal("the shared nats-server did not start")
	}
	return rbShared.srv
}

// rbSweep removes the store directories of the shared servers of earlier
// runs whose process has ended.
func rbSweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), rbStorePrefix+"*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), rbStorePrefix), "-")
		n, err := strconv.Atoi(pid)
		if err != nil || n == os.Getpid() {
			continue
		}
		p, err := os.FindProcess(n)
		if err != nil {
			continue
		}
		if err := p.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) {
			os.RemoveAll(d)
		}
	}
}

// rbConn is a connection of its own to s, with openQueue's options,
// closed when the benchmark ends.
func rbConn(b *testing.B, s *server.Server) (*nats.Conn, njs.JetStream) {
	b.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return nc, js
}

// rbName is a name no earlier run of these benchmarks used on the shared
// server.
func rbName(prefix string) string {
	return prefix + strconv.FormatInt(rbShared.seq.Add(1), 10)
}

// rbDir opens a new Dir on js, whose streams and bucket are deleted when
// the benchmark ends (after the queues opened later are closed).
func rbDir(b *testing.B, js njs.JetStream, prefix string) (*walqjs.Dir, string) {
	b.Helper()
	name := rbName(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := walqjs.OpenDir(ctx, js, name, walqjs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		js.DeleteStream(ctx, "WALQ_"+name)
		js.DeleteStream(ctx, "WALQ_"+name+"_DLQ")
		js.DeleteKeyValue(ctx, "WALQ_"+name+"_HIST")
	})
	return d, name
}

// rbQueueOptions are the settings of every adapter queue here: the raw
// consumers' AckWait as Visibility, the rest the adapter's defaults.
var rbQueueOptions = walqjs.QueueOptions{Visibility: 30 * time.Second}

// rbBody is the body of every item: walq-bench's 128 bytes.
var rbBody = make([]byte, 128)

// rbRecord is the value of the raw fence's write: the size of the
// adapter's item record (JSON, about 100 bytes).
var rbRecord = []byte(`{"v":1,"q":123456,"i":123456,"a":1,"s":"lease","e":1765000000000000000,"t":1765000000000000000,"k":1234567890123456789}`)

// BenchmarkRawCycle: one op is a publish of a 128-byte message to a
// work-queue stream (waiting for its PubAck), a Fetch(1) on a durable pull
// consumer with explicit ack (AckWait 30s), and a DoubleAck of the message.
func BenchmarkRawCycle(b *testing.B) { rbRawCycle(b, false) }

// BenchmarkRawCycleWithKV: BenchmarkRawCycle and, between the fetch and
// the ack, one compare-and-swap (KeyValue.Update with the revision last
// written) of a small value in a bucket on the same server.
func BenchmarkRawCycleWithKV(b *testing.B) { rbRawCycle(b, true) }

func rbRawCycle(b *testing.B, withKV bool) {
	s := rbServer(b)
	_, js := rbConn(b, s)
	ctx := context.Background()
	name := rbName("RAW")
	subject := name + ".q"
	st, err := js.CreateStream(ctx, njs.StreamConfig{
		Name:       name,
		Subjects:   []string{name + ".>"},
		Retention:  njs.WorkQueuePolicy,
		Storage:    njs.FileStorage,
		Replicas:   1,
		Duplicates: 2 * time.Minute, // the adapter's default KeyWindow
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { js.DeleteStream(context.Background(), name) })
	cons, err := st.CreateOrUpdateConsumer(ctx, njs.ConsumerConfig{
		Durable:       "cycle",
		FilterSubject: subject,
		AckPolicy:     njs.AckExplicitPolicy,
		AckWait:       rbQueueOptions.Visibility,
	})
	if err != nil {
		b.Fatal(err)
	}
	var kv njs.KeyValue
	var rev uint64
	if withKV {
		kv, err = js.CreateKeyValue(ctx, njs.KeyValueConfig{Bucket: name, Storage: njs.FileStorage, Replicas: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { js.DeleteKeyValue(context.Background(), name) })
		if rev, err = kv.Create(ctx, "record", rbRecord); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	split := rbStartSplit()
	ops := 0
	for b.Loop() {
		ops++
		if _, err := js.Publish(ctx, subject, rbBody); err != nil {
			b.Fatal(err)
		}
		// The adapter's Get waits at most 5 s on a pull request at this
		// Visibility: the same expiry.
		batch, err := cons.Fetch(1, njs.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if withKV {
				if rev, err = kv.Update(ctx, "record", rbRecord, rev); err != nil {
					b.Fatal(err)
				}
			}
			if err := m.DoubleAck(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
		if got != 1 {
			b.Fatalf("Fetch(1) brought %d messages", got)
		}
	}
	split.report(b, ops)
}

// BenchmarkAdapterCycle: one op is the adapter's Put of a 128-byte body,
// Get and Ack, on one queue of a Dir of the same server (Visibility 30s,
// the raw consumer's AckWait; the Dir's and queue's other settings their
// defaults).
func BenchmarkAdapterCycle(b *testing.B) {
	s := rbServer(b)
	_, js := rbConn(b, s)
	ctx := context.Background()
	d, _ := rbDir(b, js, "adp")
	q, err := d.OpenQueue(ctx, "cycle", rbQueueOptions)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	b.ReportAllocs()
	split := rbStartSplit()
	ops := 0
	for b.Loop() {
		ops++
		if _, err := q.Put(ctx, rbBody); err != nil {
			b.Fatal(err)
		}
		m, err := q.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Ack(m.Receipt); err != nil {
			b.Fatal(err)
		}
	}
	split.report(b, ops)
}

// rbWaitingGets is how many Gets BenchmarkWaitingGetHeap keeps waiting.
const rbWaitingGets = 200

// BenchmarkWaitingGetHeap: rbWaitingGets goroutines each blocked in the
// adapter's Get on one empty queue. Once the server counts them all among
// the consumer's waiting pull requests (NumWaiting of its info: the adapter
// offers no event to wait on), it reports the live heap (HeapAlloc after a
// GC) over the baseline before they started, per waiting Get: the
// process's, which holds the embedded server's share (its waiting
// requests, the subscriptions of their reply subjects), and the client's
// alone, estimated from the sampled heap profile as above. The goroutines'
// stacks are not heap: stack-B/waiting-get is StackInuse over its
// baseline, per Get. Each op then cancels the Gets and waits until the
// server counts none.
func BenchmarkWaitingGetHeap(b *testing.B) {
	s := rbServer(b)
	_, js := rbConn(b, s)
	ctx := context.Background()
	d, name := rbDir(b, js, "wait")
	q, err := d.OpenQueue(ctx, "idle", rbQueueOptions)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	cons, err := js.Consumer(ctx, "WALQ_"+name, walqjs.ConsumerName("idle", 0))
	if err != nil {
		b.Fatal(err)
	}
	var heap, clientHeap, stack float64
	ops := 0
	for b.Loop() {
		ops++
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		inuse0 := rbInuse()
		gctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		errs := make(chan error, rbWaitingGets)
		for range rbWaitingGets {
			wg.Go(func() {
				m, err := q.Get(gctx)
				switch {
				case err == nil:
					errs <- fmt.Errorf("Get on an empty queue returned item %d", m.ID)
				case !errors.Is(err, context.Canceled):
					errs <- err
				}
			})
		}
		err := rbWaitFor(cons, func(n int) bool { return n == rbWaitingGets })
		if err == nil {
			runtime.GC()
			runtime.ReadMemStats(&after)
			inuse1 := rbInuse()
			heap += float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / rbWaitingGets
			clientHeap += (inuse1 - inuse0) / rbWaitingGets
			stack += float64(int64(after.StackInuse)-int64(before.StackInuse)) / rbWaitingGets
		}
		cancel()
		wg.Wait()
		close(errs)
		for e := range errs {
			b.Fatal(e)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := rbWaitFor(cons, func(n int) bool { return n == 0 }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(heap/float64(ops), "heap-B/waiting-get")
	if !math.IsNaN(clientHeap) {
		b.ReportMetric(clientHeap/float64(ops), "client-heap-B/waiting-get")
	}
	b.ReportMetric(stack/float64(ops), "stack-B/waiting-get")
}

// rbWaitFor polls the consumer's info every 2 ms until its count of
// waiting pull requests (the server prunes those whose reply subject has
// no interest as it answers) satisfies done, for at most 10 s.
func rbWaitFor(cons njs.Consumer, done func(int) bool) error {
	limit := time.Now().Add(10 * time.Second)
	last := -1
	for time.Now().Before(limit) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := cons.Info(ctx)
		cancel()
		if err != nil {
			return err
		}
		if last = info.NumWaiting; done(last) {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("the consumer's waiting pull requests stayed at %d", last)
}

// rbIdleQueues is how many queues BenchmarkIdleWorkQueuesRequests serves.
const rbIdleQueues = 200

// rbIdleWindow is how long BenchmarkIdleWorkQueuesRequests counts.
const rbIdleWindow = time.Second

// BenchmarkIdleWorkQueuesRequests: rbIdleQueues empty queues of one Dir
// (each the adapter's defaults but the Visibility, so PollInterval 50ms),
// served by one walq.WorkQueues pool of 10 shared workers, as the README
// runs workers over many queues. Each op counts, over a window of
// rbIdleWindow once the pool has sent at least one message per queue, what
// the server received:
//
//   - requests/s: the messages the server received on the pool's
//     connection (Connz in_msgs of its client ID): pull requests, and any
//     ack or API request (SUB and UNSUB are protocol operations, not
//     messages, and are not counted);
//   - server-in-msgs/s: the server's in_msgs of Varz over all its
//     connections, a check on the first (nothing else runs meanwhile);
//   - api-requests/s: the JetStream API requests the server counted
//     (Jsz api.total), which do not include pull requests.
//
// alloc-B/s is what the process allocated in the window (TotalAlloc, the
// embedded server's share in it), client-alloc-B/s the part outside
// nats-server's frames, estimated from the sampled heap profile.
func BenchmarkIdleWorkQueuesRequests(b *testing.B) {
	s := rbServer(b)
	nc, js := rbConn(b, s)
	ctx := context.Background()
	d, _ := rbDir(b, js, "idle")
	queues := make([]walq.WorkQueue, rbIdleQueues)
	var wg sync.WaitGroup
	var failed atomic.Value
	sem := make(chan struct{}, 8)
	for i := range queues {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			q, err := d.OpenQueue(ctx, fmt.Sprintf("q%03d", i), rbQueueOptions)
			if err != nil {
				failed.Store(err)
				return
			}
			queues[i] = walq.WorkQueue{Queue: q}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	for _, wq := range queues {
		b.Cleanup(func() { wq.Queue.(*walqjs.Queue).Close() })
	}
	cid, err := nc.GetClientID()
	if err != nil {
		b.Fatal(err)
	}
	inMsgs := func() int64 {
		c, err := s.Connz(&server.ConnzOptions{CID: cid})
		if err != nil || len(c.Conns) != 1 {
			b.Fatalf("connz of client %d: %v", cid, err)
		}
		return c.Conns[0].InMsgs
	}
	serverIn := func() int64 {
		v, err := s.Varz(nil)
		if err != nil {
			b.Fatal(err)
		}
		return v.InMsgs
	}
	apiTotal := func() uint64 {
		j, err := s.Jsz(nil)
		if err != nil {
			b.Fatal(err)
		}
		return j.API.Total
	}

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- walq.WorkQueues(wctx, queues, 10, func(context.Context, walq.Message) error {
			return errors.New("an idle queue leased an item")
		}, walq.WorkOptions{})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	// Started: the pool has sent a message per queue since it began.
	start := inMsgs()
	for limit := time.Now().Add(10 * time.Second); inMsgs()-start < rbIdleQueues; {
		if time.Now().After(limit) {
			b.Fatalf("the pool sent %d messages in 10 s", inMsgs()-start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var reqs, srv, api, alloc, clientAlloc float64
	ops := 0
	for b.Loop() {
		ops++
		var m0, m1 runtime.MemStats
		c0 := rbAllocated()
		runtime.ReadMemStats(&m0)
		in0, srv0, api0 := inMsgs(), serverIn(), apiTotal()
		t0 := time.Now()
		time.Sleep(rbIdleWindow)
		in1, srv1, api1 := inMsgs(), serverIn(), apiTotal()
		sec := time.Since(t0).Seconds()
		runtime.ReadMemStats(&m1)
		c1 := rbAllocated()
		reqs += float64(in1-in0) / sec
		srv += float64(srv1-srv0) / sec
		api += float64(api1-api0) / sec
		alloc += float64(m1.TotalAlloc-m0.TotalAlloc) / sec
		clientAlloc += (c1.bytes - c0.bytes) / sec
	}
	n := float64(ops)
	b.ReportMetric(reqs/n, "requests/s")
	b.ReportMetric(srv/n, "server-in-msgs/s")
	b.ReportMetric(api/n, "api-requests/s")
	b.ReportMetric(alloc/n, "alloc-B/s")
	if !math.IsNaN(clientAlloc) {
		b.ReportMetric(clientAlloc/n, "client-alloc-B/s")
	}
}

// The client's share of the process's allocations, from the runtime's
// sampled heap profile: a record whose stack holds a frame of nats-server
// is the embedded server's, any other the client's (nats.go, the adapter,
// walq, the benchmark, the runtime on their behalf). Each record is scaled
// as pprof scales a sample: by 1/(1-exp(-size/rate)) for its average
// object size.

// rbCount is an estimate of what the client allocated: objects and bytes.
type rbCount struct{ objects, bytes float64 }

// rbFrames caches whether a PC is nats-server code.
var rbFrames sync.Map // uintptr -> bool

func rbServerPC(pc uintptr) bool {
	if v, ok := rbFrames.Load(pc); ok {
		return v.(bool)
	}
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	is := strings.HasPrefix(f.Function, "github.com/nats-io/nats-server/")
	rbFrames.Store(pc, is)
	return is
}

func rbProfile() []runtime.MemProfileRecord {
	// runtime.GC publishes the profile of the allocations made before it.
	runtime.GC()
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs := make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			return recs[:n]
		}
	}
}

// rbScale is pprof's scale of a sample of count objects of bytes in all;
// NaN when the profile is off.
func rbScale(count, bytes int64) float64 {
	rate := float64(runtime.MemProfileRate)
	switch {
	case rate <= 0:
		return math.NaN()
	case rate <= 1 || count == 0:
		return 1
	}
	return 1 / (1 - math.Exp(-float64(bytes)/float64(count)/rate))
}

func rbFromServer(r *runtime.MemProfileRecord) bool {
	for _, pc := range r.Stack() {
		if rbServerPC(pc) {
			return true
		}
	}
	return false
}

// rbAllocated is what the client allocated so far.
func rbAllocated() rbCount {
	var c rbCount
	for _, r := range rbProfile() {
		if r.AllocObjects == 0 || rbFromServer(&r) {
			continue
		}
		s := rbScale(r.AllocObjects, r.AllocBytes)
		c.objects += float64(r.AllocObjects) * s
		c.bytes += float64(r.AllocBytes) * s
	}
	return c
}

// rbInuse is the client's live heap, in bytes.
func rbInuse() float64 {
	var in float64
	for _, r := range rbProfile() {
		if r.InUseObjects() == 0 || rbFromServer(&r) {
			continue
		}
		in += float64(r.InUseBytes()) * rbScale(r.InUseObjects(), r.InUseBytes())
	}
	return in
}

// rbSplit measures the client's allocations over a benchmark's loop.
type rbSplit struct{ start rbCount }

func rbStartSplit() rbSplit { return rbSplit{start: rbAllocated()} }

// report reports the client's allocations per op since the start: run
// after the loop, whose timer has stopped.
func (s rbSplit) report(b *testing.B, ops int) {
	end := rbAllocated()
	if ops == 0 || math.IsNaN(end.bytes) {
		return
	}
	b.ReportMetric((end.objects-s.start.objects)/float64(ops), "client-allocs/op")
	b.ReportMetric((end.bytes-s.start.bytes)/float64(ops), "client-B/op")
}
