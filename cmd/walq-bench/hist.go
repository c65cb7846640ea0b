package main

import (
	"math"
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram in the manner of HdrHistogram:
// values below 128 ns have a bucket each; above, every power of two is cut
// into 64 equal buckets, so a bucket is never wider than 1/64 of its lower
// bound and a reported quantile (the middle of its bucket) is within 0.8% of
// the true one. Recording is one shift and one add: cheap enough to time
// every operation. It is not safe for concurrent use; each goroutine keeps
// its own and they are merged at the end.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64 // ns
	min    int64
	max    int64
}

const (
	histLinear  = 128 // values below have a bucket each
	histSub     = 64  // buckets per power of two above
	histBuckets = (63-6)*histSub + 2*histSub
)

func newHist() *hist { return &hist{min: math.MaxInt64} }

func histIndex(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - 7 // v>>shift is in [64, 128)
	return shift*histSub + int(v>>uint(shift))
}

// histMid is the middle of bucket i.
func histMid(i int) float64 {
	if i < histLinear {
		return float64(i)
	}
	shift := uint(i/histSub - 1)
	lo := uint64(i%histSub+histSub) << shift
	return float64(lo) + float64(uint64(1)<<shift-1)/2
}

func (h *hist) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(uint64(v))]++
	h.n++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// quantile returns the value at quantile q (0 < q <= 1): the middle of the
// bucket holding the ceil(q*n)-th smallest value, clamped to the exact
// minimum and maximum.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := histMid(i)
			v = math.Max(v, float64(h.min))
			v = math.Min(v, float64(h.max))
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// Latency is the summary of a histogram as the report shows it.
type Latency struct {
	Count  uint64  `json:"count"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`
}

func (h *hist) summary() Latency {
	if h.n == 0 {
		return Latency{}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return Latency{
		Count:  h.n,
		MeanUs: h.sum / float64(h.n) / 1e3,
		P50Us:  us(h.quantile(0.50)),
		P99Us:  us(h.quantile(0.99)),
		P999Us: us(h.quantile(0.999)),
		MaxUs:  us(time.Duration(h.max)),
	}
}
