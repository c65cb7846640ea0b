package walq

// waiterList is the FIFO of Gets waiting for an item; it lives under the
// sequencer's lock. A waiter's channel has room for one signal; a waiter
// that was signalled but gives up passes the signal on, so no ready item is
// left with a waiter asleep.
type waiterList struct {
	list []*waiter
}

type waiter struct {
	ch chan struct{}
}

func (l *waiterList) add() *waiter {
	w := &waiter{ch: make(chan struct{}, 1)}
	l.list = append(l.list, w)
	return w
}

func (l *waiterList) remove(w *waiter) {
	for i, x := range l.list {
		if x == w {
			l.list = append(l.list[:i], l.list[i+1:]...)
			return
		}
	}
}

// wake signals up to n waiters, oldest first, and removes them.
func (l *waiterList) wake(n int) {
	for n > 0 && len(l.list) > 0 {
		w := l.list[0]
		l.list[0] = nil
		l.list = l.list[1:]
		w.ch <- struct{}{}
		n--
	}
}

func (l *waiterList) len() int { return len(l.list) }
