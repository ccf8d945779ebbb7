package proxy

import (
	"context"
	"errors"
	"os"
	"time"
)

// A client that leaves while its request runs cancels the request's
// context, as on net/http. net/http starts a background read of the
// connection for every request; the front starts one only for a request
// that has run frontWatchAfter, found by one scanner per Front that
// looks at the connections every frontWatchAfter while requests come
// (it stops after a second without any). A timer per request would cost
// more than the read it saves: arming one wakes a thread of the Go
// scheduler to wait for it, at every request.

// frontWatchAfter is how long a request runs before the front watches
// its connection for the client leaving.
const frontWatchAfter = 5 * time.Millisecond

// frontEpoch is the origin of the monotonic clock of reqStart.
var frontEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(frontEpoch)) }

// startWatch notes a request's start (cancel cancels it).
func (c *frontConn) startWatch(cancel context.CancelFunc) {
	c.wmu.Lock()
	c.wended, c.wstarted, c.wcancel = false, false, cancel
	c.wmu.Unlock()
	c.reqStart.Store(monoNow())
	if !c.f.scanning.Load() && c.f.scanning.CompareAndSwap(false, true) {
		go c.f.scan()
	}
}

// scan starts the watch of every request that has run frontWatchAfter,
// every frontWatchAfter, until a second passed without a request.
func (f *Front) scan() {
	idleSince := monoNow()
	for {
		time.Sleep(frontWatchAfter)
		now := monoNow()
		if f.scanOnce(now) {
			idleSince = now
			continue
		}
		if now-idleSince < int64(time.Second) && !f.inShutdown.Load() {
			continue
		}
		f.scanning.Store(false)
		// A request that started since the last look saw the scanner
		// running: look once more, and go on if one did.
		if !f.scanOnce(monoNow()) || !f.scanning.CompareAndSwap(false, true) {
			return
		}
		idleSince = monoNow()
	}
}

// scanOnce starts the due watches; true when a request is in progress.
func (f *Front) scanOnce(now int64) bool {
	busy := false
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		if start := c.reqStart.Load(); start != 0 {
			busy = true
			if now-start >= int64(frontWatchAfter) {
				c.startWatching()
			}
		}
	}
	return busy
}

// startWatching starts the watch of the request in progress, once.
func (c *frontConn) startWatching() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wended || c.wstarted || c.cr.hasByte {
		return
	}
	c.wstarted = true
	// No deadline of the head's or the idle wait's for the watch; set
	// under the lock, so that stopWatch's comes after it.
	_ = c.c.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	c.watching = done
	go c.watch(done, c.wcancel)
}

// watch reads the connection until the client leaves (the request is
// cancelled), sends a byte (the next request's first: kept for it), or
// stopWatch ends it.
func (c *frontConn) watch(done chan struct{}, cancel context.CancelFunc) {
	defer close(done)
	n, err := c.c.Read(c.cr.b[:])
	if n == 1 {
		c.cr.hasByte = true
		return
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.clientGone.Store(true)
		cancel()
	}
}

// stopWatch ends the watch of the request that ends.
func (c *frontConn) stopWatch() {
	c.reqStart.Store(0)
	c.wmu.Lock()
	c.wended = true
	done := c.watching
	c.watching = nil
	c.wmu.Unlock()
	if done != nil {
		_ = c.c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = c.c.SetReadDeadline(time.Time{})
	}
}
