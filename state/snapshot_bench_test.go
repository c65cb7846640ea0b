package state

import "testing"

// benchState holds n waiting items of 32 bytes, put 100 to a record.
func benchState(n int) *State {
	s := New()
	items := make([]NewItem, 100)
	lsn := uint64(0)
	for b := 0; b < n/100; b++ {
		for i := range items {
			items[i] = NewItem{Body: make([]byte, 32), Due: int64(b)}
		}
		lsn++
		if err := s.ApplyAt(lsn, DefaultQueue, &Put{Time: int64(b), Items: items}, 4096); err != nil {
			panic(err)
		}
	}
	return s
}

func BenchmarkSnapshotMarshal100k(b *testing.B) {
	s := benchState(100000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.MarshalSnapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotLoad100k is what recovery does with a snapshot: decode
// it, then make every item ready for the first Get.
func BenchmarkSnapshotLoad100k(b *testing.B) {
	data, _ := benchState(100000).MarshalSnapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := UnmarshalSnapshot(data)
		if err != nil {
			b.Fatal(err)
		}
		s.Promote(1 << 62)
		if s.NextReady() == nil {
			b.Fatal("nothing ready")
		}
	}
}
