package state_test

import (
	"fmt"

	"github.com/walq/walq/state"
)

// A snapshot written a piece at a time while the state goes on: the
// pieces decode to the state as it was when Freeze was called.
func ExampleState_Freeze() {
	s := state.New()
	put := &state.Put{Time: 1, Items: []state.NewItem{{Body: []byte("a"), Due: 1}, {Body: []byte("b"), Due: 1}}}
	if err := s.ApplyAt(1, state.DefaultQueue, put, 4096); err != nil {
		panic(err)
	}
	f, err := s.Freeze()
	if err != nil {
		panic(err)
	}
	var snap []byte
	lsn := s.LastLSN()
	for done := false; !done; {
		if snap, done, err = f.Next(snap); err != nil {
			panic(err)
		}
		// Between pieces (the caller's lock released), records go on.
		lsn++
		more := &state.Put{Time: 2, Items: []state.NewItem{{Body: []byte("later"), Due: 2}}}
		if err := s.ApplyAt(lsn, state.DefaultQueue, more, 4096); err != nil {
			panic(err)
		}
	}
	back, err := state.UnmarshalSnapshot(snap)
	if err != nil {
		panic(err)
	}
	fmt.Println("snapshot holds", back.Len(), "items at LSN", back.LastLSN(), "; the state now holds", s.Len())
	// Output: snapshot holds 2 items at LSN 1 ; the state now holds 4
}
