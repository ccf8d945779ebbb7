package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"gpud.dev/gpud/agent"
	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/agent/gpu"
	agentserver "gpud.dev/gpud/agent/server"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// agentLink is the server's connection to one host's agent. Client is nil
// for hosts that only heartbeat (simulated agents): the scheduler sees
// them, but nothing is dispatched to them.
type agentLink struct {
	instance string
	client   *agentclient.Client

	mu       sync.Mutex
	lastSeen time.Time
}

func (l *agentLink) seen(t time.Time) {
	l.mu.Lock()
	l.lastSeen = t
	l.mu.Unlock()
}

func (l *agentLink) last() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeen
}

// agentSet holds the links by instance id.
type agentSet struct {
	mu    sync.RWMutex
	links map[string]*agentLink
}

func (a *agentSet) get(instance string) *agentLink {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.links[instance]
}

func (a *agentSet) put(l *agentLink) {
	a.mu.Lock()
	if a.links == nil {
		a.links = map[string]*agentLink{}
	}
	a.links[l.instance] = l
	a.mu.Unlock()
}

func (a *agentSet) all() []*agentLink {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]*agentLink, 0, len(a.links))
	for _, l := range a.links {
		out = append(out, l)
	}
	return out
}

// localAgent is the in-process agent of `gpud serve` and the embedded
// default, served on a unix socket (see localSocketPath) so the server drives it
// through the same client as any remote agent.
type localAgent struct {
	// instance is the local host's instance id.
	instance string
	agent    *agent.Agent
	gpus     gpu.Source
	http     *http.Server
	// socket is the unix socket the agent's API is served on; id labels
	// its containers (see localAgentID).
	socket, id string
	close      func() error
}

// startLocalAgent opens the runtime (openLocalRuntime: Docker, or the
// process runtime the admin chose, running jobs as an unprivileged user;
// the embedded server's processes run as the invoking user), the agent
// and its API, and registers the host as an instance of the local fleet.
func (s *Server) startLocalAgent(ctx context.Context) error {
	dir := filepath.Join(s.opts.DataDir, "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local agent: %w", err)
	}
	id, err := localAgentID(s.opts.DataDir, dir)
	if err != nil {
		return err
	}
	rt, dinfo, err := s.openLocalRuntime(ctx, dir, id)
	if err != nil {
		return fmt.Errorf("local agent runtime: %w", err)
	}
	src, err := gpu.Open(ctx, gpu.Options{Fake: s.opts.FakeGPUs})
	if err != nil {
		return fmt.Errorf("local agent accelerators: %w", err)
	}
	a, err := agent.New(ctx, agent.Config{DataDir: dir, Runtime: rt, GPUs: src, Docker: dinfo, Version: s.opts.Version, Logger: s.log})
	if err != nil {
		_ = src.Close()
		return fmt.Errorf("local agent: %w", err)
	}
	token, err := store.NewToken()
	if err != nil {
		return err
	}
	h, err := agentserver.New(a, token, s.log)
	if err != nil {
		return err
	}
	sock, err := localSocketPath(s.opts.DataDir, dir)
	if err != nil {
		return err
	}
	ln, err := sock.listen()
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	cl, err := agentclient.New("unix://"+sock.path, token, nil)
	if err != nil {
		return err
	}
	s.local = &localAgent{agent: a, gpus: src, http: hs, socket: sock.path, id: id, close: func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := hs.Shutdown(sctx)
		if errors.Is(err, context.DeadlineExceeded) {
			// A stream the server's side already abandoned (a log follow,
			// a Wait) can outlive the grace on a loaded host; the server is
			// leaving and its jobs keep running, so cut it rather than fail
			// the shutdown.
			err = hs.Close()
		}
		sock.remove()
		if c, ok := rt.(interface{ Close() error }); ok {
			err = errors.Join(err, c.Close())
		}
		return errors.Join(err, a.Close(), src.Close())
	}}
	host, err := a.Host(ctx)
	if err != nil {
		return fmt.Errorf("local agent host info: %w", err)
	}
	s.log.Info().Str("runtime", a.RuntimeName()).Str("gpus", fmt.Sprint(len(host.Accelerators.Devices))).Msg("local agent started")
	s.local.instance = "local-" + sanitize(host.Hostname)
	return s.registerInstance(ctx, localFleet, s.local.instance, "local", host, cl)
}

// registerInstance records (or refreshes) a host of fleet and links its agent.
func (s *Server) registerInstance(ctx context.Context, fleet, id, backend string, host api.HostInfo, cl *agentclient.Client) error {
	spec := encodeSpec(instanceState{Backend: backend, Host: host})
	rec, err := s.store.Instances().Get(id)
	status := store.InstanceIdle
	if err == nil {
		// An id names one host of one fleet for good: a registration that
		// would take over another fleet's or backend's instance (and its
		// agent link, and the jobs placed on it) is refused.
		if old, _ := decodeSpec[instanceState](rec); rec.Fleet != fleet || old.Backend != backend {
			return fmt.Errorf("register instance %s: the id belongs to a %s host of fleet %q, not to a %s host of fleet %q", id, old.Backend, rec.Fleet, backend, fleet)
		}
		if rec.Status == store.InstanceBusy {
			status = store.InstanceBusy
		}
	}
	rec = store.Record{Kind: store.KindInstance, ID: id, Name: id, Fleet: fleet, Status: status, Spec: spec}
	if _, err := s.store.Apply(ctx, store.Put(rec)); err != nil {
		return fmt.Errorf("register instance %s: %w", id, err)
	}
	l := &agentLink{instance: id, client: cl}
	l.seen(time.Now())
	s.agents.put(l)
	return nil
}

// sanitize makes a hostname usable in an instance id.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			if c >= 'A' && c <= 'Z' {
				b[i] = c + 32
			} else {
				b[i] = '-'
			}
		}
	}
	if len(b) == 0 {
		return "host"
	}
	return string(b)
}

// handleHeartbeat registers or refreshes a host that reports itself. Its
// jobs' statuses are applied like a watcher's; jobs the server does not
// know are returned so the agent can stop them.
func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	var hb api.Heartbeat
	if err := decodeJSON(w, r, &hb); err != nil {
		return err
	}
	if err := checkName("instance", hb.Instance); err != nil {
		return err
	}
	if hb.Fleet == "" {
		hb.Fleet = localFleet
	}
	if _, err := s.store.Fleets().Get(hb.Fleet); err != nil {
		return badField("fleet", "fleet %q does not exist", hb.Fleet)
	}
	l := s.agents.get(hb.Instance)
	if l == nil {
		if err := s.registerInstance(r.Context(), hb.Fleet, hb.Instance, "remote", hb.Host, nil); err != nil {
			return err
		}
	} else {
		l.seen(time.Now())
	}
	var resp api.HeartbeatResponse
	for _, js := range hb.Jobs {
		j, err := s.store.Jobs().Get(js.ID)
		// Jobs the server does not know there, or has finished while the
		// agent still runs them, go back as unknown: the agent stops them.
		if err != nil || j.Instance != hb.Instance || (finishedJob(j.Status) && !js.State.Finished()) {
			resp.Unknown = append(resp.Unknown, js.ID)
			continue
		}
		s.applyAgentStatus(r.Context(), js)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
