package daemon

import (
	"sync"
	"time"
)

// rateSpan is how far back serviceCounter's rate looks: the last whole
// seconds before the current one.
const rateSpan = 2

// serviceCounter counts the requests the server's own proxy
// (/proxy/services/...) forwards, per service, in one-second buckets: the
// autoscaler's request rates while no gateway provides them.
type serviceCounter struct {
	mu sync.Mutex
	m  map[string]*[rateSpan + 1]bucket
}

type bucket struct {
	sec int64
	n   int
}

// add counts one request to the service keyed "project/run".
func (c *serviceCounter) add(key string) {
	sec := time.Now().Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*[rateSpan + 1]bucket{}
	}
	bs := c.m[key]
	if bs == nil {
		bs = &[rateSpan + 1]bucket{}
		c.m[key] = bs
	}
	b := &bs[sec%int64(len(bs))]
	if b.sec != sec {
		b.sec, b.n = sec, 0
	}
	b.n++
}

// Rate is the service's requests per second over the last rateSpan whole
// seconds.
func (c *serviceCounter) Rate(key string) float64 {
	return c.rateAt(key, time.Now())
}

func (c *serviceCounter) rateAt(key string, now time.Time) float64 {
	sec := now.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	bs := c.m[key]
	if bs == nil {
		return 0
	}
	n := 0
	for _, b := range bs {
		if b.sec < sec && b.sec >= sec-rateSpan {
			n += b.n
		}
	}
	return float64(n) / rateSpan
}
