package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/walq/walq"
)

// probe measures what a phase of the benchmark costs the process: CPU time
// (getrusage user+sys), allocations, and the peak of the heap in use,
// sampled every heapSampleEvery.
//
// The heap is read through runtime/metrics, not runtime.ReadMemStats: the
// latter stops the world, which would show up in the very latencies being
// measured. objects+unused bytes of the heap are what MemStats calls
// HeapInuse (bytes in in-use spans).
type probe struct {
	cpu0    time.Duration
	allocs0 [2]uint64 // bytes, objects
	peak    atomic.Uint64
	stop    chan struct{}
	wg      sync.WaitGroup
}

const heapSampleEvery = 20 * time.Millisecond

var heapSamples = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
}

// readHeap returns heap in use, allocated bytes and allocated objects so
// far.
func readHeap() (inuse, allocBytes, allocObjects uint64) {
	s := make([]metrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return v(0) + v(1), v(2), v(3)
}

func startProbe() *probe {
	p := &probe{stop: make(chan struct{}), cpu0: cpuTime()}
	inuse, b, o := readHeap()
	p.allocs0 = [2]uint64{b, o}
	p.peak.Store(inuse)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(heapSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.sampleHeap()
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

func (p *probe) sampleHeap() {
	inuse, _, _ := readHeap()
	for {
		old := p.peak.Load()
		if inuse <= old || p.peak.CompareAndSwap(old, inuse) {
			return
		}
	}
}

// Usage is what a phase cost.
type Usage struct {
	CPU           time.Duration
	AllocBytes    uint64
	AllocObjects  uint64
	PeakHeapInuse uint64
	MaxRSS        uint64 // the process's peak resident set so far (not only this phase)
}

func (p *probe) end() Usage {
	close(p.stop)
	p.wg.Wait()
	p.sampleHeap()
	_, b, o := readHeap()
	return Usage{
		CPU:           cpuTime() - p.cpu0,
		AllocBytes:    b - p.allocs0[0],
		AllocObjects:  o - p.allocs0[1],
		PeakHeapInuse: p.peak.Load(),
		MaxRSS:        maxRSS(),
	}
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

func cpuTime() time.Duration {
	ru := rusage()
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// maxRSS is the peak resident set of the process in bytes (getrusage
// reports KiB on Linux, bytes on macOS).
func maxRSS() uint64 {
	rss := uint64(rusage().Maxrss)
	if runtime.GOOS != "darwin" {
		rss *= 1024
	}
	return rss
}

// statsDelta is what the queue did between two Stats calls.
type statsDelta struct {
	Records  uint64  // log records appended
	Fsyncs   uint64  // fsyncs of the log
	FsyncSum float64 // seconds
	Batches  uint64  // group commits (WriteBatch calls)
	Acked    uint64
	Put      uint64
	Leased   uint64
}

func deltaStats(a, b walq.Stats) statsDelta {
	return statsDelta{
		Records:  b.LastLSN - a.LastLSN,
		Fsyncs:   b.Fsync.Count - a.Fsync.Count,
		FsyncSum: b.Fsync.Sum - a.Fsync.Sum,
		Batches:  b.CommitBatch.Count - a.CommitBatch.Count,
		Acked:    b.Acked - a.Acked,
		Put:      b.Put - a.Put,
		Leased:   b.Delivered - a.Delivered,
	}
}

// diskUsage sums the sizes of the queue's files: the log and the snapshots
// apart, and the fixed reserve file (which recovery frees on a full disk).
type diskUsage struct {
	LogBytes      int64 `json:"log_bytes"`
	SnapshotBytes int64 `json:"snapshot_bytes"`
	ReserveBytes  int64 `json:"reserve_bytes"`
	Segments      int   `json:"segments"`
}

func (d diskUsage) total() int64 { return d.LogBytes + d.SnapshotBytes }

func measureDisk(dir string) (diskUsage, error) {
	var d diskUsage
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) { // compaction removed it under us
				return nil
			}
			return err
		}
		if e.IsDir() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		name := e.Name()
		switch {
		case name == "RESERVE":
			d.ReserveBytes += info.Size()
		case strings.HasPrefix(name, "snapshot-"):
			d.SnapshotBytes += info.Size()
		case filepath.Base(filepath.Dir(path)) == "log", filepath.Base(filepath.Dir(path)) == "bodies":
			d.LogBytes += info.Size()
			d.Segments++
		}
		return nil
	})
	return d, err
}
