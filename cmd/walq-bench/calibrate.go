package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The disk's ceiling. Each group commit of walq's log is one write(2) of
// the batch's frame at the end of the tail segment, then one fsync
// (os.File.Sync) of that file. calibrate does
// exactly that with no queue around it, first with one writer that waits
// for each fsync, then with as many writers as the workload has, sharing
// each fsync as walq's group commit does: a committer takes every record
// submitted so far, writes them with one Write, fsyncs, and releases their
// writers; records submitted meanwhile wait for the next round. Whatever
// walq reaches is to be read as a fraction of that.

// Calibration is what the disk did.
type Calibration struct {
	File        string `json:"file"`
	RecordBytes int    `json:"record_bytes"`
	Serial      CalRun `json:"serial"`
	Group       CalRun `json:"group"`
}

// CalRun is one calibration run.
type CalRun struct {
	Writers       int     `json:"writers"`
	Appends       uint64  `json:"appends"`
	Fsyncs        uint64  `json:"fsyncs"`
	Seconds       float64 `json:"seconds"`
	AppendsPerSec float64 `json:"appends_per_sec"`
	AvgBatch      float64 `json:"avg_batch"`
	Fsync         Latency `json:"fsync"`
}

func calibrate(dir string, recordBytes, writers int, each time.Duration) (*Calibration, error) {
	c := &Calibration{File: filepath.Join(dir, "calibrate.dat"), RecordBytes: recordBytes}
	defer os.Remove(c.File)
	var err error
	if c.Serial, err = calibrateRun(c.File, recordBytes, 1, each); err != nil {
		return nil, err
	}
	if writers == 1 {
		c.Group = c.Serial
		return c, nil
	}
	if c.Group, err = calibrateRun(c.File, recordBytes, writers, each); err != nil {
		return nil, err
	}
	return c, nil
}

// calibrateRun appends records to a new file for the given time with n
// writers sharing each fsync (n == 1: one write and one fsync per record).
func calibrateRun(path string, recordBytes, n int, d time.Duration) (CalRun, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return CalRun{}, fmt.Errorf("calibrate: %w", err)
	}
	defer f.Close()
	// A record of about a record's size: a length, then the bytes (the
	// frame's own headers are some tens of bytes more per batch).
	record := binary.AppendUvarint(nil, uint64(recordBytes))
	for i := range recordBytes {
		record = append(record, byte(i*31+7))
	}

	var (
		mu       sync.Mutex
		pending  []byte
		waiters  []chan error
		kick     = make(chan struct{}, 1)
		stop     atomic.Bool
		appended atomic.Uint64
		fsyncs   = newHist()
		batches  uint64
	)
	committerDone := make(chan error, 1)
	writersDone := make(chan struct{})
	go func() {
		var buf []byte
		var release []chan error
		var failed error
		for {
			select {
			case <-kick:
			case <-writersDone:
				committerDone <- failed
				return
			}
			mu.Lock()
			buf, pending = pending, buf[:0]
			release, waiters = waiters, release[:0]
			mu.Unlock()
			if len(release) == 0 {
				continue
			}
			if failed == nil {
				if _, err := f.Write(buf); err != nil {
					failed = err
				}
			}
			if failed == nil {
				start := time.Now()
				if err := f.Sync(); err != nil {
					failed = err
				}
				fsyncs.record(time.Since(start))
				batches++
			}
			for _, w := range release {
				w <- failed
			}
		}
	}()

	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for range n {
		wg.Go(func() {
			done := make(chan error, 1)
			for !stop.Load() {
				mu.Lock()
				pending = append(pending, record...)
				waiters = append(waiters, done)
				mu.Unlock()
				select {
				case kick <- struct{}{}:
				default:
				}
				if err := <-done; err != nil {
					return // the committer reports it
				}
				appended.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(writersDone)
	if err := <-committerDone; err != nil {
		return CalRun{}, fmt.Errorf("calibrate: %w", err)
	}
	run := CalRun{
		Writers:       n,
		Appends:       appended.Load(),
		Fsyncs:        batches,
		Seconds:       elapsed.Seconds(),
		AppendsPerSec: float64(appended.Load()) / elapsed.Seconds(),
		Fsync:         fsyncs.summary(),
	}
	if batches > 0 {
		run.AvgBatch = float64(run.Appends) / float64(batches)
	}
	return run, nil
}
