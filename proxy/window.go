package proxy

import (
	"sync/atomic"
	"time"
)

// window counts requests per second over a sliding window of whole
// seconds: the request rate the autoscaler reads. Lock-free: each slot
// packs the second it counts (high 32 bits) and its count (low 32 bits)
// in one word, so a request costs one compare-and-swap.
type window struct {
	slots []atomic.Uint64
	first atomic.Int64 // the first second counted, unix
}

func newWindow(d time.Duration) *window {
	n := max(1, int(d/time.Second))
	return &window{slots: make([]atomic.Uint64, n)}
}

func (w *window) add(now time.Time) {
	sec := now.Unix()
	w.first.CompareAndSwap(0, sec)
	slot := &w.slots[int(sec%int64(len(w.slots)))]
	tag := uint64(uint32(sec)) << 32
	for {
		v := slot.Load()
		next := tag | 1
		if v&^0xffffffff == tag && v&0xffffffff < 0xffffffff {
			next = v + 1
		}
		if slot.CompareAndSwap(v, next) {
			return
		}
	}
}

// rate is requests per second over the window; a service younger than
// the window divides by its age (at least one second), so a burst of new
// traffic shows at once.
func (w *window) rate(now time.Time) float64 {
	first := w.first.Load()
	if first == 0 {
		return 0
	}
	sec := now.Unix()
	n := int64(len(w.slots))
	var sum int64
	for i := range w.slots {
		v := w.slots[i].Load()
		if v == 0 {
			continue
		}
		// The slot's second, from its low 32 bits and the current one's.
		s := sec - int64(uint32(sec)-uint32(v>>32))
		if s > sec-n && s <= sec {
			sum += int64(v & 0xffffffff)
		}
	}
	span := min(n, max(1, sec-first+1))
	return float64(sum) / float64(span)
}
