package browse

import (
	"testing"

	"github.com/walq/walq/state"
)

// bigState returns a state holding n ready items of the default queue.
func bigState(tb testing.TB, n int) *state.State {
	st := state.New()
	lsn := uint64(0)
	for put := 0; put < n; put += 1000 {
		items := make([]state.NewItem, 1000)
		for i := range items {
			items[i] = state.NewItem{Body: []byte("x"), Due: int64(put + i)}
		}
		lsn++
		if err := st.Apply(lsn, &state.Put{Time: int64(put), Items: items}); err != nil {
			tb.Fatal(err)
		}
	}
	return st
}

// BenchmarkFullScan is the floor of any walk that looks at every item: one
// pass over 1,000,000 items in ID order, doing nothing with them (about
// 20 ms on the 2 cores of the README's figures).
func BenchmarkFullScan(b *testing.B) {
	st := bigState(b, 1_000_000)
	b.ResetTimer()
	for b.Loop() {
		n := 0
		st.EachFrom(0, func(it *state.Item) bool { n++; return true })
	}
}
