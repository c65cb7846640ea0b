// Package fuzz holds walq's native fuzz targets that cross package lines:
// the record envelope and body decoders together, the snapshot file and
// body decoders together, recovery (walq.Open) over arbitrary segment and
// snapshot files, random operation sequences against a live queue
// checked against a plain model, and random operation sequences on named
// queues with consumers blocked in Get, checked for stalled consumers and
// busy idle loops after every step (FuzzQueueOps).
//
// The committed corpora under testdata/fuzz run as ordinary tests with
// go test; fuzz/run.sh fuzzes each target in turn:
//
//	fuzz/run.sh 10m
//
// Files named seed-* are inputs the fuzzers found interesting, kept so
// that the plain test run covers more. The others are crashers, kept as
// regression seeds:
//
//   - FuzzOps/2e0b68ae5bee9eb2: an Extend that shortened a lease left the
//     timer loop asleep until the old lease end, so the item was not
//     redelivered when its lease ended.
//   - FuzzOps/68b6f3313f90463e: a Nack that put an item with a deadline back
//     to waiting left the timer asleep past the deadline.
//   - FuzzOps/2ee602c3aac7eda7, a9af9e96311c9b7b, e96294324b742b75: the timer
//     loop measured its wait from a clock reading taken under the queue lock
//     and armed the (relative) timer after releasing it, so a ManualClock
//     advanced in between left the timer late by the advance.
//   - FuzzOps/cdf2e1e7957f86bd: the target's model kept a redriven item
//     whose deadline had come, which the queue's timer discards.
//   - FuzzOps/0176a94abbb1be25: a key missing after a compaction and a
//     reopen with the wall clock behind: compaction pruned keys at the
//     queue's time instead of the snapshot's.
//   - FuzzRecovery/3e25605820502e81, 2ec454db3c345cdd: the target itself
//     compared Stats taken before the queue's timer discarded items past
//     their deadline with a reopen taken after.
//   - FuzzRecovery/bc7697aff48fec95: a format marker of more than 4 KiB was
//     an I/O error instead of corruption.
//
// The timer bugs are fixed in sequencer.go (appendToLocked, which every
// record goes through, wakes the timer loop when the record brings its
// next wake time closer) and timer.go (armTimer re-measures the wait when
// the clock jumped while arming).
package fuzz
