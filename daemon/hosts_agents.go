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
	agentserver "gpud.dev/gpud/agent/server"
	"gpud.dev/gpud/agent/tunnel"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// hosts owns the server's side of its hosts: the local agent, the agents
// of SSH fleets and of registration tunnels, their instances and the host
// keys they register with, and what a lost or returning host does to the
// jobs it ran (hosts_failure.go).
type hosts struct {
	*Server
	local *localAgent
	ssh   sshHosts
	// registration accepts agent tunnels (nil when off).
	registration     *tunnel.Acceptor
	registrationHTTP *http.Server
	registrationURL  string
}

// agentLink is the server's connection to one host's agent. Client is nil
// for hosts that only heartbeat (simulated agents): the scheduler sees
// them, but nothing is dispatched to them.
type agentLink struct {
	instance string
	client   *agentclient.Client

	mu       sync.Mutex
	lastSeen time.Time
	// answer is what its agent last said when asked (hosts_seen.go).
	answer hostSeen
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
// default: the same assembly as `gpud agent` (agentserver.OpenHost),
// served on a unix socket (see localSocketPath) so the server drives it
// through the same client as any remote agent.
type localAgent struct {
	// instance is the local host's instance id.
	instance string
	agent    *agent.Agent
	// socket is the unix socket the agent's API is served on; id labels
	// its containers (see localAgentID).
	socket, id string
	close      func() error
}

// localHostConfig is the local agent's assembly under the server's
// options (issue 11, docs/security.md): on `gpud serve` user code never
// runs with the server's privileges — every job runs in Docker (image-less
// ones get Options.DefaultImage upstream), a job fails with the fix when
// Docker does not answer, privileged jobs are refused unless
// Options.AllowPrivileged, and the process runtime is the admin's opt-in
// that runs jobs as Options.ProcessUser (agent.RunPolicy.ServerHost). The
// embedded laptop mode (Options.Embedded) runs image-less jobs as
// processes of the invoking user beside Docker (agent.RuntimeMixed).
func (s *hosts) localHostConfig(dir, id, token string) agentserver.HostConfig {
	cfg := agentserver.HostConfig{DataDir: dir, AgentID: id, Runtime: s.opts.Runtime, FakeGPUs: s.opts.FakeGPUs,
		ProcessWorkRoot: s.opts.ProcessWorkRoot, ShimCommand: s.opts.ShimCommand, JobRetention: s.opts.JobRetention,
		Token: token, Version: s.opts.Version, Logger: s.log}
	if s.opts.Embedded {
		cfg.Policy = agent.RunPolicy{InvokingUser: true, VolumeDenied: []string{s.opts.DataDir}}
		if cfg.Runtime == "" {
			cfg.Runtime = agent.RuntimeMixed
		}
		return cfg
	}
	cfg.Policy = agent.RunPolicy{ServerHost: true, AllowPrivileged: s.opts.AllowPrivileged,
		ProcessUser: s.opts.ProcessUser, ProcessAsOwnUser: s.opts.ProcessAsServerUser,
		VolumePrefixes: s.opts.VolumePrefixes, VolumeDenied: []string{s.opts.DataDir}}
	return cfg
}

// startLocalAgent opens the local agent (localHostConfig) with a fresh API
// token that no file holds, serves it on its unix socket and registers the
// host as an instance of the local fleet.
func (s *hosts) startLocalAgent(ctx context.Context) (err error) {
	dir := filepath.Join(s.opts.DataDir, "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local agent: %w", err)
	}
	// The server's data dir holds the state key: no other user, a process
	// job included, may enter it, whatever mode an existing one had. The
	// agent's own dir is OpenHost's to make private.
	if err := os.Chmod(s.opts.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	id, err := localAgentID(s.opts.DataDir, dir)
	if err != nil {
		return err
	}
	token, err := store.NewToken()
	if err != nil {
		return err
	}
	h, err := agentserver.OpenHost(ctx, s.localHostConfig(dir, id, token))
	if err != nil {
		return fmt.Errorf("local agent: %w", err)
	}
	sock, err := localSocketPath(s.opts.DataDir, dir)
	if err == nil {
		err = s.serveLocalAgent(h, sock, id)
	}
	if err != nil {
		return errors.Join(err, h.Close())
	}
	defer func() {
		if err != nil {
			// The server does not start: stop serving and close the agent
			// (its jobs keep running for the next start to adopt).
			err = errors.Join(err, s.local.close())
			s.local = nil
		}
	}()
	host, err := h.Agent.Host(ctx)
	if err != nil {
		return fmt.Errorf("local agent host info: %w", err)
	}
	s.log.Info().Str("runtime", h.RuntimeName()).Str("gpus", fmt.Sprint(len(host.Accelerators.Devices))).Msg("local agent started")
	s.local.instance = "local-" + sanitize(host.Hostname)
	cl, err := agentclient.New("unix://"+sock.path, token, nil)
	if err != nil {
		return err
	}
	return s.registerInstance(ctx, localFleet, s.local.instance, "local", host, cl)
}

// serveLocalAgent serves h's API on sock until s.local.close, which stops
// serving (open streams get the API's grace, then are cut: the server is
// leaving and its jobs keep running), removes the socket and closes h.
func (s *hosts) serveLocalAgent(h *agentserver.Host, sock localSocket, id string) error {
	ln, err := sock.listen()
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := h.Serve(sctx, ln)
		if err != nil {
			// Before close: the server's jobs on this host are unreachable
			// until it restarts.
			s.log.Error().Err(err).Msg("local agent API stopped")
		}
		served <- err
	}()
	s.local = &localAgent{agent: h.Agent, socket: sock.path, id: id, close: func() error {
		stop()
		err := <-served
		if rerr := sock.remove(); rerr != nil {
			// A directory left in the runtime dir harms nothing: the server's
			// shutdown does not fail for it.
			s.log.Warn().Err(rerr).Msg("the local agent's socket directory was left behind")
		}
		return errors.Join(err, h.Close())
	}}
	return nil
}

// registerInstance records (or refreshes) a host of fleet and links its agent.
func (s *hosts) registerInstance(ctx context.Context, fleet, id, backend string, host api.HostInfo, cl *agentclient.Client) error {
	spec := encodeSpec(instanceState{Backend: backend, Host: host})
	rec, err := s.store.Instances().Get(id)
	status := store.InstanceIdle
	if err == nil {
		// An id names one host of one fleet for good: a registration that
		// would take over another fleet's or backend's instance (and its
		// agent link, and the jobs placed on it) is refused.
		old, err := decodeSpec[instanceState](rec)
		if err != nil {
			// Without its backend the take-over check cannot be made.
			return fmt.Errorf("register instance %s: the stored instance: %w", id, err)
		}
		if rec.Fleet != fleet || old.Backend != backend {
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
	l.seen(s.now())
	s.agents.put(l)
	return nil
}

// checkFleetRoom refuses a new registered host when its fleet already
// holds nodes.max hosts: the fleet configuration's cap is the admin's.
func (s *Server) checkFleetRoom(fleet, id string) error {
	f, err := s.store.Fleets().Get(fleet)
	if err != nil {
		return fmt.Errorf("fleet %s: %w", fleet, err)
	}
	cfg := fleetConfig(f)
	if cfg == nil || cfg.Nodes == nil || cfg.Nodes.Max == nil {
		return nil
	}
	n := 0
	for _, inst := range s.store.Instances().ByFleet(fleet) {
		if inst.ID != id && inst.Status != store.InstanceTerminated {
			n++
		}
	}
	if n >= *cfg.Nodes.Max {
		return fmt.Errorf("fleet %s already holds its nodes maximum of %d hosts; raise nodes in the fleet configuration, or remove a host", f.Name, *cfg.Nodes.Max)
	}
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
func (s *hosts) handleHeartbeat(w http.ResponseWriter, r *http.Request) error {
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
		l.seen(s.now())
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
		s.dispatcher.applyAgentStatus(r.Context(), js)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
