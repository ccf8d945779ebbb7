package daemon

import (
	"context"
	"sync"
	"sync/atomic"

	"gpud.dev/gpud/store"
)

// hostCache remembers which service a hostname reaches, so the gateway's
// listeners (every request, every handshake, every certificate decision)
// do not scan a project's runs each time. Any change of a run or a
// gateway (the store's change feed) starts a new generation; an answer of
// an older one is asked again. Unknown names are remembered too, so a
// flood of random SNIs costs one lookup per name per generation; the map
// is bounded and starts anew when full.
type hostCache struct {
	gen atomic.Uint64
	mu  sync.Mutex
	m   map[string]hostEntry
}

type hostEntry struct {
	gen   uint64
	run   store.Record
	plain bool
	ok    bool
}

// maxCachedHosts bounds the host cache.
const maxCachedHosts = 10_000

// hostAt is serviceAtHost through the cache.
func (s *Server) hostAt(host string) (run store.Record, plain, ok bool) {
	c := &s.gateway.hosts
	gen := c.gen.Load()
	c.mu.Lock()
	e, hit := c.m[host]
	c.mu.Unlock()
	if hit && e.gen == gen {
		return e.run, e.plain, e.ok
	}
	run, plain, ok = s.serviceAtHost(host)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedHosts {
		c.m = map[string]hostEntry{}
	}
	c.m[host] = hostEntry{gen: gen, run: run, plain: plain, ok: ok}
	c.mu.Unlock()
	return run, plain, ok
}

// hostFeedLoop starts a new host-cache generation on every change of a run
// or a gateway, until ctx ends.
func (s *Server) hostFeedLoop(ctx context.Context, sub *store.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sub.C:
			if !ok {
				return
			}
			s.gateway.hosts.gen.Add(1)
		}
	}
}

// startHostFeed subscribes the host cache to the store's changes.
func (s *Server) startHostFeed() {
	sub := s.store.Subscribe("", store.KindRun, store.KindGateway)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.hostFeedLoop(s.ctx, sub)
	}()
}
