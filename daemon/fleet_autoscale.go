package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/store"
)

// Fleet autoscaling (issue 18 scope 3, docs/backends.md "Autoscaling"): a
// backend fleet whose backends include an instance backend (a cloud: AWS)
// gets hosts of its own. Once a second the autoscaler
//   - follows the machines it made (KV autoscale/machines/ID): a machine
//     whose agent registered (host name = the machine's id, so its
//     instance is reg/FLEET/ID) is up; one that never registers within
//     registerTimeout is terminated and its offer backs off; one the cloud
//     took back (a spot interruption) fails its jobs as unreachable, so
//     their runs retry on the interruption event;
//   - terminates machines idle for the fleet's idle_duration (default 5m)
//     down to nodes min, deregistering their hosts (instance record, host
//     key, token);
//   - provisions for demand: each job of a run naming the fleet that the
//     scheduler left waiting, beyond the machines already booting, gets
//     the cheapest offer that fits it and the fleet's policies
//     (fleet_autoscale_offers.go), up to nodes max, and at least nodes
//     min are kept up. Each machine gets a registration token of its own,
//     minted here, revoked when it goes.
// The waiting jobs' reasons name what they wait for ("provisioning 2 ×
// g5.xlarge (aws, us-east-1, $1.006/h) for fleet F", or why nothing can
// be provisioned), through autoscaleReason in the scheduling cycle.

const (
	autoscaleMachinesDir   = "autoscale/machines"
	defaultIdleDuration    = 5 * time.Minute
	defaultRegisterTimeout = 10 * time.Minute
	// instancesEvery is how often the clouds' machine lists are read.
	instancesEvery = 5 * time.Second
)

// scaleMachine is a machine the autoscaler made, in the KV namespace.
type scaleMachine struct {
	ID        string    `json:"id"`    // the request id and the host name it registers under
	Fleet     string    `json:"fleet"` // fleet record id
	FleetName string    `json:"fleet_name"`
	Project   string    `json:"project"`
	Backend   string    `json:"backend"` // backend name
	Offer     api.Offer `json:"offer"`
	CloudID   string    `json:"cloud_id,omitempty"`
	TokenHash string    `json:"token_hash"`
	TokenID   string    `json:"token_id"`
	CreatedAt time.Time `json:"created_at"`
	// RegisteredAt is when its agent joined; IdleSince when it last had
	// no active job (zero while busy).
	RegisteredAt time.Time `json:"registered_at,omitzero"`
	IdleSince    time.Time `json:"idle_since,omitzero"`
	// Terminated: the cloud terminated it; its host is deregistered once
	// its jobs have ended.
	Terminated bool `json:"terminated,omitempty"`
	// Unconfirmed: its create failed in a way that may have made it (a
	// timeout, a lost answer) at UnconfirmedAt; the cloud's listing
	// decides: listed, it is adopted; still absent 30 s later, forgotten.
	Unconfirmed   bool      `json:"unconfirmed,omitempty"`
	UnconfirmedAt time.Time `json:"unconfirmed_at,omitzero"`
}

// unconfirmedGrace is how long a machine whose create failed uncertainly
// may stay absent from its cloud's listing (EC2's DescribeInstances is
// eventually consistent) before it is taken as never made.
const unconfirmedGrace = 30 * time.Second

func machineKey(id string) string { return autoscaleMachinesDir + "/" + id }

func (m scaleMachine) instance() string { return registeredInstanceID(m.Fleet, m.ID) }

// fleetAutoscaler is the autoscaler's memory between ticks; what must
// survive a restart is in the KV namespace.
type fleetAutoscaler struct {
	mu      sync.Mutex
	backoff offerBackoff
	// reasons are what each fleet's waiting jobs wait for (by fleet id).
	reasons map[string]string
	// lastList is when the clouds' machine lists were last read.
	lastList time.Time
	// warned names the machines already logged as left without backend.
	warned map[string]bool
	// registerTimeout bounds a machine's boot and registration (tests
	// shorten it).
	registerTimeout time.Duration
}

// startFleetAutoscaler runs the autoscaler's loop.
func (s *Server) startFleetAutoscaler() {
	s.wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-tick.C:
			}
			s.autoscaleOnce(s.ctx)
		}
	})
}

// instanceBackend is one instance backend a fleet selects.
type instanceBackend struct {
	name string
	sup  *plugins.Supervisor
}

// instanceBackendsOf lists the instance backends of bf's project that bf
// names (by type or name) and whose plugins run.
func (s *Server) instanceBackendsOf(ctx context.Context, bf backendFleet) []instanceBackend {
	if s.backends == nil {
		return nil
	}
	s.backends.mu.Lock()
	entries := slices.Collect(maps.Values(s.backends.entries))
	s.backends.mu.Unlock()
	var out []instanceBackend
	for _, e := range entries {
		if e.sup == nil || !bf.takes(e.project, e.typ, e.name) {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := e.sup.Info(ictx)
		cancel()
		if err == nil && info.Instances {
			out = append(out, instanceBackend{name: e.name, sup: e.sup})
		}
	}
	slices.SortFunc(out, func(a, b instanceBackend) int { return strings.Compare(a.name, b.name) })
	return out
}

// loadMachines reads every machine record.
func (s *Server) loadMachines(ctx context.Context) ([]scaleMachine, error) {
	keys, err := s.store.KV().List(ctx, autoscaleMachinesDir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []scaleMachine
	for _, k := range keys {
		b, err := s.store.KV().Load(ctx, k)
		if err != nil {
			return nil, err
		}
		var m scaleMachine
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("machine record %s: %w", k, err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b scaleMachine) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (s *Server) saveMachine(ctx context.Context, m scaleMachine, more ...store.Mutation) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = s.store.Apply(ctx, append([]store.Mutation{store.KVPut(machineKey(m.ID), b)}, more...)...)
	return err
}

// autoscaleOnce is one tick of the autoscaler.
func (s *Server) autoscaleOnce(ctx context.Context) {
	if s.backends == nil {
		return
	}
	a := &s.backends.autoscale
	machines, err := s.loadMachines(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("autoscale: read machines")
		}
		return
	}
	fleets := s.backendFleets()
	reasons := map[string]string{}
	// Machines of a fleet that is gone go too.
	for _, m := range machines {
		if !slices.ContainsFunc(fleets, func(bf backendFleet) bool { return bf.id == m.Fleet }) {
			s.terminateMachine(ctx, m, s.backendOfMachine(m), "its fleet was deleted")
		}
	}
	var listed map[string]map[string]plugins.Instance // backend id (project/name) -> request id -> machine
	a.mu.Lock()
	if time.Since(a.lastList) >= instancesEvery {
		listed, a.lastList = map[string]map[string]plugins.Instance{}, time.Now()
	}
	a.mu.Unlock()
	for _, bf := range fleets {
		ibs := s.instanceBackendsOf(ctx, bf)
		if len(ibs) == 0 {
			continue
		}
		f, err := s.store.Fleets().Get(bf.id)
		if err != nil {
			continue
		}
		spec := fleetConfig(f)
		if spec == nil {
			continue
		}
		if listed != nil {
			for _, ib := range ibs {
				id := backendID(bf.project, ib.name)
				if _, done := listed[id]; done {
					continue
				}
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				l, err := plugins.ListInstances(lctx, ib.sup)
				cancel()
				if err != nil {
					continue // followed by registration alone this time
				}
				byID := map[string]plugins.Instance{}
				for _, i := range l {
					byID[i.RequestID] = i
				}
				listed[id] = byID
			}
		}
		var mine []scaleMachine
		for _, m := range machines {
			if m.Fleet == bf.id {
				mine = append(mine, m)
			}
		}
		mine = s.followMachines(ctx, spec, mine, ibs, listed)
		if why := s.scaleFleet(ctx, bf, spec, mine, ibs); why != "" {
			reasons[bf.id] = why
		}
	}
	a.mu.Lock()
	changed := !maps.Equal(a.reasons, reasons)
	a.reasons = reasons
	a.mu.Unlock()
	if changed {
		kick(s.schedWake)
	}
}

// backendOfMachine is the running plugin of m's backend (nil when gone).
func (s *Server) backendOfMachine(m scaleMachine) *plugins.Supervisor {
	s.backends.mu.Lock()
	defer s.backends.mu.Unlock()
	if e := s.backends.entries[backendID(m.Project, m.Backend)]; e != nil {
		return e.sup
	}
	return nil
}

// followMachines applies registration, the clouds' states, the
// registration timeout and idleness to a fleet's machines; it returns the
// machines that are still up or booting.
func (s *Server) followMachines(ctx context.Context, spec *api.FleetSpec, ms []scaleMachine, ibs []instanceBackend, listed map[string]map[string]plugins.Instance) []scaleMachine {
	a := &s.backends.autoscale
	now := s.now()
	a.mu.Lock()
	timeout := cmp0(a.registerTimeout, defaultRegisterTimeout)
	a.mu.Unlock()
	idle := defaultIdleDuration
	if spec.IdleDuration != nil {
		idle = spec.IdleDuration.Value
		if spec.IdleDuration.Off {
			idle = -1
		}
	}
	minN := 0
	if spec.Nodes != nil {
		minN = max(spec.Nodes.Min, spec.Nodes.Target)
	}
	var live []scaleMachine
	for _, m := range ms {
		if m.Terminated {
			s.terminateMachine(ctx, m, nil, "")
			continue
		}
		sup := s.backendOfMachine(m)
		if byID, ok := listed[backendID(m.Project, m.Backend)]; ok && m.Unconfirmed {
			if ci, ok := byID[m.ID]; ok {
				m.Unconfirmed, m.CloudID = false, ci.ID // made after all: adopted, booting
				if err := s.saveMachine(ctx, m); err != nil {
					s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: adopt machine")
				}
			} else if now.Sub(m.UnconfirmedAt) > unconfirmedGrace {
				if _, err := s.store.Apply(ctx, store.KVDelete(machineKey(m.ID)), store.KVDelete(regTokenKey(m.TokenHash)), store.KVDelete(regIDKey(m.TokenID))); err != nil {
					s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: forget a machine that was not made")
				}
				continue
			}
		}
		if byID, ok := listed[backendID(m.Project, m.Backend)]; ok {
			if ci, ok := byID[m.ID]; ok && (ci.Interrupted || ci.State == "terminated" || ci.State == "shutting-down") {
				why := "the cloud ended machine " + ci.ID + " (" + m.Offer.Instance + "): " + cmpStr(ci.Reason, ci.State)
				if ci.Interrupted {
					why = "interrupted by the cloud: machine " + ci.ID + " (" + m.Offer.Instance + "): " + cmpStr(ci.Reason, ci.State)
				}
				s.hosts.hostUnreachable(ctx, m.instance(), why)
				s.terminateMachine(ctx, m, sup, why)
				continue
			}
		}
		registered := s.agents.get(m.instance()) != nil
		if m.RegisteredAt.IsZero() {
			if registered {
				m.RegisteredAt, m.IdleSince = now, now
				if err := s.saveMachine(ctx, m, s.event(m.Project, store.KindFleet, m.Fleet, "machine_registered", "machine "+m.ID+" ("+m.CloudID+", "+m.Offer.Instance+") registered")); err != nil {
					s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: record registration")
				}
			} else if now.Sub(m.CreatedAt) > timeout {
				a.mu.Lock()
				d := a.backoff.fail(scaleOffer{backend: m.Backend, offer: m.Offer}.key(), time.Now())
				a.mu.Unlock()
				s.terminateMachine(ctx, m, sup, fmt.Sprintf("its agent did not register within %s; offer %s backs off %s", timeout, m.Offer.Instance, d))
				continue
			}
		}
		live = append(live, m)
	}
	// Idle machines go, oldest idle first, down to min.
	if idle < 0 {
		return live
	}
	busy := s.machineBusy
	var kept []scaleMachine
	n := len(live)
	for _, m := range live {
		if m.RegisteredAt.IsZero() {
			kept = append(kept, m)
			continue
		}
		switch {
		case busy(m):
			if !m.IdleSince.IsZero() {
				m.IdleSince = time.Time{}
				if err := s.saveMachine(ctx, m); err != nil {
					s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: record busy")
				}
			}
		case m.IdleSince.IsZero():
			m.IdleSince = now
			if err := s.saveMachine(ctx, m); err != nil {
				s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: record idle")
			}
		case now.Sub(m.IdleSince) >= idle && n > minN:
			if s.terminateMachine(ctx, m, s.backendOfMachine(m), fmt.Sprintf("idle for %s (idle_duration %s)", now.Sub(m.IdleSince).Round(time.Second), api.FormatDuration(idle))) {
				n--
				continue
			}
		}
		kept = append(kept, m)
	}
	return kept
}

func cmp0(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// terminateMachine terminates m in its cloud and deregisters it: its
// token and host key binding at once, its host's instance record (with
// its finished jobs released) once no unfinished job is bound to it (until
// then the instance is marked terminated, which keeps it out of
// scheduling, and m stays recorded as terminated), then the machine
// record. It reports whether m is gone from the cloud; on an error it
// stays, to be terminated again next tick.
func (s *Server) terminateMachine(ctx context.Context, m scaleMachine, sup *plugins.Supervisor, why string) bool {
	if !m.Terminated && sup == nil {
		// Its backend was deleted (or its plugin does not run): the
		// machine stays recorded, to be terminated once it is back.
		a := &s.backends.autoscale
		a.mu.Lock()
		first := !a.warned[m.ID]
		if a.warned == nil {
			a.warned = map[string]bool{}
		}
		a.warned[m.ID] = true
		a.mu.Unlock()
		if first {
			s.log.Warn().Str("machine", m.ID).Str("cloud_id", m.CloudID).Str("backend", m.Backend).Str("why", why).
				Msg("autoscale: cannot terminate a machine whose backend is gone; add the backend again (or terminate it in the cloud)")
		}
		return false
	}
	if !m.Terminated {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := sup.TerminateInstance(tctx, m.ID)
		cancel()
		if err != nil {
			s.log.Warn().Err(err).Str("machine", m.ID).Str("fleet", m.FleetName).Msg("autoscale: terminate machine (will retry)")
			return false
		}
	}
	muts := []store.Mutation{store.KVDelete(regTokenKey(m.TokenHash)), store.KVDelete(regIDKey(m.TokenID))}
	if !m.Terminated {
		muts = append(muts, s.event(m.Project, store.KindFleet, m.Fleet, "machine_terminated", "machine "+m.ID+" ("+m.CloudID+", "+m.Offer.Instance+") terminated: "+why))
	}
	if forget, err := s.hosts.forgetTokenHosts(ctx, m.Fleet, m.TokenID); err == nil {
		muts = append(muts, forget...)
	}
	done := true
	if inst, err := s.store.Instances().Get(m.instance()); err == nil {
		if released, err := s.fleetsAPI.releaseFinishedJobs(m.FleetName, inst); err == nil {
			muts = append(append(muts, released...), store.Delete(store.KindInstance, inst.ID))
		} else {
			// Its jobs are still being ended (interrupted, stopped): the
			// instance goes once they have.
			done = false
			if inst.Status != store.InstanceTerminated {
				inst.Status = store.InstanceTerminated
				muts = append(muts, store.Update(inst))
			}
		}
	}
	if done {
		muts = append(muts, store.KVDelete(machineKey(m.ID)))
	} else {
		m.Terminated = true
		b, err := json.Marshal(m)
		if err != nil {
			return false
		}
		muts = append(muts, store.KVPut(machineKey(m.ID), b))
	}
	if _, err := s.store.Apply(ctx, muts...); err != nil {
		s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: deregister machine (will retry)")
		return m.Terminated
	}
	if s.hosts.registration != nil {
		s.hosts.registration.DropToken(m.TokenID)
	}
	s.agents.remove(m.instance())
	if why != "" {
		s.log.Info().Str("machine", m.ID).Str("fleet", m.FleetName).Str("why", why).Msg("autoscale: machine terminated")
	}
	return true
}

// registrationSettings are what a new machine of fleet f needs to join:
// the server's registration URL and CA, and a token minted for it alone.
func (s *Server) mintMachineToken(ctx context.Context, f store.Record) (plugins.RegistrationSettings, regTokenRecord, string, error) {
	if s.hosts.registration == nil || s.hosts.registrationURL == "" {
		return plugins.RegistrationSettings{}, regTokenRecord{}, "", errors.New("the server accepts no agent registrations (gpud serve --registration-listen), so a machine could not join")
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return plugins.RegistrationSettings{}, regTokenRecord{}, "", err
	}
	token := "gpudreg_" + hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(sum[:])
	rec := regTokenRecord{Fleet: f.ID, Project: f.Project, ID: hash[:12]}
	reg := plugins.RegistrationSettings{ServerURL: s.hosts.registrationURL, Token: token, Fleet: f.ID}
	if s.opts.RegistrationCert == "" {
		if ca, err := os.ReadFile(filepath.Join(s.opts.DataDir, RegistrationCAFile)); err == nil {
			reg.CAPEM = string(ca)
		}
	}
	return reg, rec, hash, nil
}

// autoscaleReason is what a waiting job of a run naming a fleet shows:
// what the fleet provisions for it, or why it cannot (the scheduler's own
// reason after it).
func (s *Server) autoscaleReason(run store.Record, rs runState, why string) string {
	if s.backends == nil || len(rs.Place.Fleets) == 0 {
		return why
	}
	a := &s.backends.autoscale
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, name := range rs.Place.Fleets {
		if r := a.reasons[run.Project+"/"+name]; r != "" {
			return r + " (" + why + ")"
		}
	}
	return why
}

// autoscaleJobReason is autoscaleReason for waiting job j.
func (s *Server) autoscaleJobReason(j store.Record, why string) string {
	run, err := s.store.Runs().Get(j.Run)
	if err != nil {
		return why
	}
	rs, err := s.runSpec(run)
	if err != nil {
		return why
	}
	return s.autoscaleReason(run, rs, why)
}

// fleetHasInstanceBackend reports whether entries (a backend fleet's
// backends) select an instance backend of project whose plugin runs.
func (s *Server) fleetHasInstanceBackend(project string, entries []string) bool {
	bf := backendFleet{project: project}
	for _, e := range entries {
		bf.backends = append(bf.backends, strings.ToLower(e))
	}
	return len(s.instanceBackendsOf(s.ctx, bf)) > 0
}

// machineBusy reports whether an active job is bound to m's host.
func (s *Server) machineBusy(m scaleMachine) bool {
	return slices.ContainsFunc(s.store.Jobs().ByInstance(m.instance()), func(j store.Record) bool { return activeJob(j.Status) })
}

// machineOut adds, to the API view of a host of fleet, what it costs per
// hour when it is a machine the autoscaler made.
func (s *Server) machineOut(fleet string, io *api.Instance) {
	id, ok := strings.CutPrefix(io.ID, "reg/"+fleet+"/")
	if !ok {
		return
	}
	b, err := s.store.KV().Load(s.ctx, machineKey(id))
	if err != nil {
		return
	}
	var m scaleMachine
	if json.Unmarshal(b, &m) != nil || m.Fleet != fleet {
		return
	}
	io.Price, io.InstanceType = m.Offer.Price, m.Offer.Instance
}
