package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/walq/walq"
)

// buildNamed makes a directory with the default queue and three named
// queues, and every kind of queue record but move (the root package has no
// redrive into another queue yet):
//
//	default  item 1 ready
//	mail     item 2 nacked once, then ready; item 3 ready, key bob;
//	         paused until +10m, resumed, paused until resumed
//	jobs     options of its own, a cap of 1 lease in flight raised to 2
//	         (a set-queue record); item 4 nacked, expired and nacked again,
//	         dead at its third attempt, redriven and leased again (3
//	         attempts and the lease in its history); item 8 dead-lettered;
//	         item 9 ready behind the cap; item 10 leased
//	reports  first incarnation: items 5 and 6, 5 leased, deleted by force;
//	         second incarnation (a new ID): item 7 delayed 3h, paused
//	         until +2h
func buildNamed(dir string) (time.Time, error) {
	clock := walq.NewManualClock(epoch)
	q, err := walq.Open(dir, testOptions(clock))
	if err != nil {
		return time.Time{}, err
	}
	s := &script{q: q}
	s.put("default job")

	open := func(name string, opts walq.QueueOptions) *walq.Queue {
		if s.err != nil {
			return nil
		}
		h, err := q.OpenQueue(name, opts)
		s.do("open queue "+name, err)
		return h
	}
	on := func(h *walq.Queue, what func(*script)) {
		if s.err != nil {
			return
		}
		hs := &script{q: h}
		what(hs)
		s.do(h.Name(), hs.err)
	}

	mail := open("mail", walq.QueueOptions{})
	jobsOpts := walq.QueueOptions{Visibility: 10 * time.Second, MaxAttempts: 3, KeyWindow: time.Hour,
		MaxItems: 100, MaxBytes: 1 << 20, MaxInFlight: 1}
	jobs := open("jobs", jobsOpts)
	reports := open("reports", walq.QueueOptions{MaxItems: 5})

	on(mail, func(m *script) {
		m.put("welcome alice")
		m.put("welcome bob", walq.WithKey("bob"))
		r := m.get(2)
		m.do("nack", mail.Nack(r.Receipt, errors.New("smtp: 421 try later")))
	})
	on(jobs, func(j *script) {
		j.put("thumbnail 1", walq.WithKey("thumb-1"))
		r := j.get(4)
		j.do("nack", jobs.Nack(r.Receipt, errors.New("decoder: out of memory")))
	})
	on(reports, func(rp *script) {
		rp.put("report q1")
		rp.put("report q2")
		rp.get(5)
	})
	s.do("delete reports", reports.Delete(true))
	reports = open("reports", walq.QueueOptions{Visibility: time.Minute})
	on(reports, func(rp *script) {
		rp.put("report q3", walq.WithDelay(3*time.Hour))
		rp.do("pause", reports.Pause(epoch.Add(2*time.Hour)))
	})

	clock.Advance(time.Second)
	on(jobs, func(j *script) {
		j.get(4) // attempt 2, left to expire
	})
	// The lease of attempt 2 ends at +11s: let the timer expire it.
	clock.Advance(10 * time.Second)
	on(jobs, func(j *script) {
		j.waitFor("expiry", func(st walq.Stats) bool { return st.Expired == 1 })
	})
	clock.Advance(time.Second)
	on(jobs, func(j *script) {
		r := j.get(4)
		j.do("nack", jobs.Nack(r.Receipt, errors.New("decoder: out of memory again")))
		j.put("thumbnail 2", walq.WithKey("thumb-2"))
		j.put("thumbnail 3", walq.WithPriority(1))
		j.put("thumbnail 4")
		r = j.get(8)
		j.do("dead-letter", jobs.DeadLetter(r.Receipt, errors.New("bad image")))
		j.do("redrive", jobs.Redrive(4))
	})
	// Raise the cap: a set-queue record.
	jobsOpts.MaxInFlight = 2
	if s.err == nil {
		s.do("set jobs", jobs.SetSettings(jobsOpts))
	}
	on(jobs, func(j *script) {
		j.get(10)
		j.get(4)
		if _, ok, err := jobs.TryGet(); ok || err != nil {
			j.do("get at the cap", fmt.Errorf("got an item (%v), want none at the cap", err))
		}
	})
	on(mail, func(m *script) {
		m.do("pause", mail.Pause(clock.Now().Add(10*time.Minute)))
		m.do("resume", mail.Resume())
		m.do("pause", mail.Pause(time.Time{}))
	})
	return clock.Now(), s.close()
}
