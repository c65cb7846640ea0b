package walq

import "runtime"

// settle does at once what the timer loop does when the clock reaches a
// due time, so a test that advanced a ManualClock sees its effects without
// waiting for the loop's goroutine.
func (q *Queue) settle() { q.tick() }

// waitForWaiters returns once n Gets are blocked waiting for an item.
func (q *Queue) waitForWaiters(n int) {
	for {
		q.mu.Lock()
		got := q.waiters.len()
		q.mu.Unlock()
		if got >= n {
			return
		}
		runtime.Gosched()
	}
}

// stateBytes is the canonical encoding of the queue's state: equal states
// give equal bytes.
func (q *Queue) stateBytes() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, err := q.st.MarshalSnapshot()
	if err != nil {
		panic(err)
	}
	return b
}
