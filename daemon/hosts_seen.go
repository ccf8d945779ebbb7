package daemon

import (
	"context"
	"sync"
	"time"

	"gpud.dev/gpud/api"
)

// A host's health line says when the server last heard from it, and an
// offer shows the disk space free on it. Both come from the host's agent:
// the server asks each linked agent for its host information every resync
// interval (hostsSeenLoop); an answer moves the link's last-seen time and
// its free disk. A host that stops answering keeps its last time until
// its transport declares it unreachable (hosts_failure.go).

// hostSeen is what the last answer of a link's agent said.
type hostSeen struct {
	mu       sync.Mutex
	diskFree api.Size
	known    bool
}

// hostsSeenLoop asks every linked agent for its host information every
// resync interval, at most hostAskTimeout each, all at once.
func (s *hosts) hostsSeenLoop(ctx context.Context) {
	tick := time.NewTicker(s.opts.ResyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.askHosts(ctx)
	}
}

// hostAskTimeout bounds one host information request.
const hostAskTimeout = 10 * time.Second

func (s *hosts) askHosts(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range s.agents.all() {
		if l.client == nil {
			continue // a heartbeating agent says itself when it was seen
		}
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, hostAskTimeout)
			defer cancel()
			info, err := l.client.Host(actx)
			if err != nil {
				return // unanswered: its last-seen time stays; its transport judges it lost
			}
			l.seen(s.now())
			l.answer.mu.Lock()
			l.answer.diskFree, l.answer.known = info.DiskFree, true
			l.answer.mu.Unlock()
		})
	}
	wg.Wait()
}

// diskFree is the free disk the host's agent last reported: since the
// server last asked, else at its registration (registered).
func (l *agentLink) diskFree(registered api.Size) api.Size {
	if l == nil {
		return registered
	}
	l.answer.mu.Lock()
	defer l.answer.mu.Unlock()
	if l.answer.known {
		return l.answer.diskFree
	}
	return registered
}
