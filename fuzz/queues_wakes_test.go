package fuzz

import "github.com/walq/walq"

// The wake-up figures of Stats that FuzzQueueOps reads, in one place: a
// build of walq from before Stats.Wakeups and Stats.Stalled (997a6e0 and
// earlier) runs the target with this file alone replaced, the target's own
// checks standing in for these.

// statsStalled is Stats.Stalled: a Get asleep while its queue can lease
// more items than Gets were signalled for.
func statsStalled(st walq.Stats) bool { return st.Stalled() }

// statsWaiting says how many Gets wait on the queue (on the directory, for
// DirStats) and how many of those were signalled; ok is false when the
// build does not say.
func statsWaiting(st walq.Stats) (waiting, woken int, ok bool) {
	return st.Wakeups.Waiting, st.Wakeups.Woken, true
}

// statsLoops counts the rounds of the directory's timer loop and of its
// log's committer since Open.
func statsLoops(st walq.Stats) (timer, committer uint64) {
	return st.Wakeups.TimerLoop, st.Wakeups.Committer
}
