package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins/sshfleet"
	"gpud.dev/gpud/store"
)

// SSH fleets: applying a fleet with ssh_config provisions each host in the
// background (plugins/sshfleet: pinned host key, upload, agent on a unix
// socket reached only through SSH) and registers it as an instance with
// backend "ssh"; re-applying adds and tears down hosts; deleting the fleet
// tears all of them down. A monitor per host records unreachable and
// reachable-again transitions as instance events and hands them to the
// host-failure handling (hosts_failure.go).

// sshHost is one provisioned host of an SSH fleet.
type sshHost struct {
	fleet    string // fleet record id
	project  string
	instance string
	target   sshfleet.Target
	host     *sshfleet.Host // nil while provisioning
	cancel   context.CancelFunc
	done     chan struct{}
}

// sshHosts holds the SSH fleets' hosts by instance id.
type sshHosts struct {
	mu    sync.Mutex
	hosts map[string]*sshHost
}

// kvHostKeys pins SSH host keys in the store's key-value namespace
// (encrypted at rest, durable when a call returns).
type kvHostKeys struct{ kv *store.KV }

func hostKeyPath(addr string) string { return "ssh/known_hosts/" + addr }

func (k kvHostKeys) HostKey(ctx context.Context, addr string) (ssh.PublicKey, error) {
	b, err := k.kv.Load(ctx, hostKeyPath(addr))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ssh.ParsePublicKey(b)
}

func (k kvHostKeys) PinHostKey(ctx context.Context, addr string, key ssh.PublicKey) error {
	return k.kv.Store(ctx, hostKeyPath(addr), key.Marshal())
}

func (k kvHostKeys) ForgetHostKey(ctx context.Context, addr string) error {
	return k.kv.Delete(ctx, hostKeyPath(addr))
}

// sshInstanceID names an SSH fleet's host: "ssh/" + fleet record id ("project/name") + "/" + host.
// Joining the parts with '-' (as before) let project "a-b" fleet "c" and
// project "a" fleet "b-c" share ids, and let either take the local
// instance's ("local-host"); '/' never occurs in names, so this id is one
// host of one fleet, distinct from registered ("reg/…") and local ones.
func sshInstanceID(fleetID, host string) string {
	return "ssh/" + fleetID + "/" + host
}

// applySSHFleet provisions the hosts of spec that are new or changed and
// tears down those no longer listed. It returns at once; provisioning runs
// in the background and reports through instance records and events.
func (s *hosts) applySSHFleet(fleetID, project string, spec *api.FleetSpec) {
	want := map[string]sshfleet.Target{}
	for _, t := range sshfleet.Targets(spec.SSHConfig) {
		want[sshInstanceID(fleetID, t.Name)] = t
	}
	s.ssh.mu.Lock()
	if s.ssh.hosts == nil {
		s.ssh.hosts = map[string]*sshHost{}
	}
	var stale []*sshHost
	for id, h := range s.ssh.hosts {
		if h.fleet != fleetID {
			continue
		}
		if t, ok := want[id]; ok && reflect.DeepEqual(t, h.target) {
			delete(want, id)
			continue
		}
		stale = append(stale, h)
		delete(s.ssh.hosts, id)
	}
	for id, t := range want {
		ctx, cancel := context.WithCancel(s.ctx)
		h := &sshHost{fleet: fleetID, project: project, instance: id, target: t, cancel: cancel, done: make(chan struct{})}
		s.ssh.hosts[id] = h
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(h.done)
			s.runSSHHost(ctx, h)
		}()
	}
	s.ssh.mu.Unlock()
	for _, h := range stale {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.teardownSSHHost(s.ctx, h, true)
		}()
	}
}

// runSSHHost provisions h, registers its instance and monitors it until
// ctx ends.
func (s *hosts) runSSHHost(ctx context.Context, h *sshHost) {
	log := s.log.With().Str("fleet", h.fleet).Str("host", h.target.Name).Logger()
	dialer := &sshfleet.Dialer{Keys: kvHostKeys{s.store.KV()},
		AcceptKeyHint: "If the change is expected, check the new fingerprint on the host, then remove the pinned key (store key " +
			hostKeyPath(h.target.Addr()) + ") and apply the fleet again."}
	// A host that cannot be reached yet is tried again with backoff; a
	// changed host key or another architecture needs a person.
	var host *sshfleet.Host
	backoff := api.Backoff{First: 5 * time.Second, Max: time.Minute}
	for retry := 1; ; retry++ {
		var err error
		host, err = sshfleet.Provision(ctx, h.target, sshfleet.Options{Dialer: dialer, Binary: s.opts.AgentBinary,
			AgentArgs: append(slices.Clone(s.opts.SSHAgentArgs), h.target.AgentArgs()...), Logger: log})
		if err == nil {
			break
		}
		log.Error().Err(err).Msg("provisioning failed")
		s.sshEvent(h, "failed", "provisioning failed: "+err.Error())
		// A host that was already an instance (the server restarted while
		// it was away) costs its jobs now, not when it comes back.
		if ctx.Err() == nil {
			s.hostUnreachable(ctx, h.instance, "could not be reached: "+err.Error())
		}
		if errors.Is(err, sshfleet.ErrHostKeyChanged) || errors.Is(err, sshfleet.ErrArchMismatch) {
			return
		}
		if !backoff.Sleep(ctx, retry) {
			return
		}
	}
	cl, err := agentclient.New(sshfleet.AgentBaseURL, host.Token, host.HTTPClient())
	if err == nil {
		err = s.registerInstance(ctx, h.fleet, h.instance, "ssh", host.Info, cl)
	}
	if err != nil {
		host.Close()
		log.Error().Err(err).Msg("register instance")
		return
	}
	s.ssh.mu.Lock()
	h.host = host
	s.ssh.mu.Unlock()
	s.sshEvent(h, "ready", fmt.Sprintf("agent ready over SSH (%s, %d GPUs)", host.Arch, len(host.Info.Accelerators.Devices)))
	// Jobs it ran before (a server restart, or a host that came back)
	// are adopted or, if moved meanwhile, stopped.
	link := s.agents.get(h.instance)
	s.hostBack(link)
	host.Monitor(ctx, s.opts.SSHHealth, func(st sshfleet.Health, err error) {
		reason, health := "reachable again", ""
		if err != nil {
			reason, health = err.Error(), "unreachable: "+err.Error()
		}
		if err != nil {
			// First out of scheduling, so nothing new lands on it.
			s.hostUnreachable(ctx, h.instance, err.Error())
		}
		s.sshEvent(h, string(st), reason)
		s.setInstanceHealth(h.instance, health)
		if err == nil {
			s.hostBack(link)
		}
	})
}

// sshEvent records an instance event of an SSH host.
func (s *hosts) sshEvent(h *sshHost, status, reason string) {
	if _, err := s.store.Apply(context.WithoutCancel(s.ctx), s.event(h.project, store.KindInstance, h.instance, status, reason)); err != nil {
		s.log.Warn().Err(err).Str("instance", h.instance).Msg("record ssh host event")
	}
}

// setInstanceHealth puts a host's health problem in its instance's reason
// ("" when healthy), which `gpud fleet list` shows.
func (s *hosts) setInstanceHealth(instance, problem string) {
	rec, err := s.store.Instances().Get(instance)
	if err != nil || rec.Reason == problem {
		return
	}
	rec.Reason = problem
	if _, err := s.store.Apply(context.WithoutCancel(s.ctx), store.Put(rec)); err != nil {
		s.log.Warn().Err(err).Str("instance", instance).Msg("record host health")
	}
}

// teardownSSHHost stops h's monitor, stops and removes its agent and, with
// forget, deletes its instance record when no job is on it.
func (s *hosts) teardownSSHHost(ctx context.Context, h *sshHost, forget bool) {
	h.cancel()
	<-h.done
	if h.host != nil {
		if err := h.host.Teardown(context.WithoutCancel(ctx)); err != nil {
			s.log.Warn().Err(err).Str("instance", h.instance).Msg("ssh host teardown")
		}
	}
	if forget && len(s.store.Jobs().ByInstance(h.instance)) == 0 {
		if _, err := s.store.Apply(context.WithoutCancel(ctx), store.Delete(store.KindInstance, h.instance),
			s.event(h.project, store.KindInstance, h.instance, "removed", "host removed from the fleet")); err != nil {
			s.log.Warn().Err(err).Str("instance", h.instance).Msg("remove ssh instance")
		}
	}
}

// deleteSSHFleet tears down every host of fleetID and waits for it.
func (s *hosts) deleteSSHFleet(ctx context.Context, fleetID string) {
	s.ssh.mu.Lock()
	var hosts []*sshHost
	for id, h := range s.ssh.hosts {
		if h.fleet == fleetID {
			hosts = append(hosts, h)
			delete(s.ssh.hosts, id)
		}
	}
	s.ssh.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() { s.teardownSSHHost(ctx, h, false) })
	}
	wg.Wait()
}

// resumeSSHFleets reconnects the SSH fleets in the store at start.
func (s *hosts) resumeSSHFleets() {
	for _, f := range s.store.Fleets().List() {
		if cfg := fleetConfig(f); cfg != nil && cfg.SSHConfig != nil {
			s.applySSHFleet(f.ID, f.Project, cfg)
		}
	}
}

// fleetConfig decodes a fleet record's configuration, nil if it has none.
func fleetConfig(f store.Record) *api.FleetSpec {
	cs, err := decodeSpec[configState](f)
	if err != nil || len(cs.Config) == 0 {
		return nil
	}
	var cfg api.Config
	if json.Unmarshal(cs.Config, &cfg) != nil {
		return nil
	}
	return cfg.Fleet
}

// closeSSHFleets closes the SSH connections; agents and jobs keep running.
func (s *hosts) closeSSHFleets() {
	s.ssh.mu.Lock()
	defer s.ssh.mu.Unlock()
	for _, h := range s.ssh.hosts {
		h.cancel()
		if h.host != nil {
			h.host.Close()
		}
	}
}
