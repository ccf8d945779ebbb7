package proxy

import (
	"sync"
	"time"
)

// window counts requests per second over a sliding window of whole
// seconds: the request rate the autoscaler reads.
type window struct {
	mu    sync.Mutex
	secs  []int64 // the second each slot counts, unix
	count []int64
	first int64 // the first second counted
}

func newWindow(d time.Duration) *window {
	n := max(1, int(d/time.Second))
	return &window{secs: make([]int64, n), count: make([]int64, n)}
}

func (w *window) add(now time.Time) {
	sec := now.Unix()
	i := int(sec % int64(len(w.secs)))
	w.mu.Lock()
	if w.first == 0 {
		w.first = sec
	}
	if w.secs[i] != sec {
		w.secs[i], w.count[i] = sec, 0
	}
	w.count[i]++
	w.mu.Unlock()
}

// rate is requests per second over the window; a service younger than
// the window divides by its age (at least one second), so a burst of new
// traffic shows at once.
func (w *window) rate(now time.Time) float64 {
	sec := now.Unix()
	n := int64(len(w.secs))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == 0 {
		return 0
	}
	var sum int64
	for i, s := range w.secs {
		if s > sec-n && s <= sec {
			sum += w.count[i]
		}
	}
	span := min(n, max(1, sec-w.first+1))
	return float64(sum) / float64(span)
}
