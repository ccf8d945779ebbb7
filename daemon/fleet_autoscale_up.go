package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/store"
)

// Scaling a fleet up (fleet_autoscale.go): demand is the jobs of runs
// naming the fleet that the scheduler left waiting; each beyond the
// machines already booting gets a machine of the cheapest offer that fits
// it, up to nodes max; nodes min (or target) is kept up with the cheapest
// offer of all.

// waitingFleetJobs lists the jobs of runs of bf's project naming bf in
// their fleets that wait for capacity (the scheduler gave them a reason).
func (s *Server) waitingFleetJobs(bf backendFleet) []jobRecordSpec {
	var out []jobRecordSpec
	for _, j := range s.store.Jobs().ByStatus(store.JobSubmitted) {
		if j.Project != bf.project || j.Instance != "" {
			continue
		}
		run, err := s.store.Runs().Get(j.Run)
		if err != nil {
			continue
		}
		rs, err := s.runSpec(run)
		if err != nil || !slices.Contains(rs.Place.Fleets, bf.name) || rs.Type == api.KindDevEnvironment {
			continue
		}
		js, err := s.jobSpec(j)
		if err != nil || js.WhyPending == "" {
			continue // not yet judged by the scheduler
		}
		if !js.NotBefore.IsZero() && js.NotBefore.After(s.now()) {
			continue
		}
		out = append(out, js)
	}
	return out
}

// fleetOffers lists the offers of a fleet's instance backends.
func fleetOffers(ctx context.Context, ibs []instanceBackend) []scaleOffer {
	var out []scaleOffer
	for _, ib := range ibs {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		offers, err := ib.sup.Offers(octx, plugins.OfferQuery{})
		cancel()
		if err != nil {
			continue
		}
		for _, o := range offers {
			if o.Backend == "" || o.Backend != ib.name {
				o.Backend = ib.name
			}
			out = append(out, scaleOffer{backend: ib.name, offer: o})
		}
	}
	return out
}

// scaleFleet provisions what the fleet's waiting jobs and its min need,
// and returns the reason its waiting jobs show ("" when none waits).
func (s *Server) scaleFleet(ctx context.Context, bf backendFleet, spec *api.FleetSpec, live []scaleMachine, ibs []instanceBackend) string {
	a := &s.backends.autoscale
	waiting := s.waitingFleetJobs(bf)
	// Supply not yet taken: machines booting, and machines up with no
	// active job (the scheduler binds to a machine that just registered
	// in its next cycle; a waiting job that does not fit an idle machine
	// waits until it goes idle_duration later).
	booting := 0
	for _, m := range live {
		if m.RegisteredAt.IsZero() || !s.machineBusy(m) {
			booting++
		}
	}
	minN, maxN := 0, -1
	if spec.Nodes != nil {
		minN = max(spec.Nodes.Min, spec.Nodes.Target)
		if spec.Nodes.Max != nil {
			maxN = *spec.Nodes.Max
		}
	}
	// What to make: a machine per waiting job beyond those booting, and
	// up to min; never beyond max.
	var wants []taskRequest
	for i := booting; i < len(waiting); i++ {
		wants = append(wants, waiting[i].Request)
	}
	for len(live)+len(wants) < minN {
		wants = append(wants, taskRequest{})
	}
	room := len(wants)
	if maxN >= 0 {
		room = max(0, min(room, maxN-len(live)))
	}
	var lastWhy string
	if len(wants) > 0 && room > 0 {
		offers := fleetOffers(ctx, ibs)
		for _, r := range wants[:room] {
			a.mu.Lock()
			now := time.Now()
			choice, priceWhy := chooseOffers(spec, offers, r, func(k string) bool { return a.backoff.active(k, now) })
			a.mu.Unlock()
			if len(choice) == 0 {
				lastWhy = cmpStr(priceWhy, noOfferWhy(spec, offers, r))
				continue
			}
			m, err := s.provision(ctx, bf, spec, choice)
			if err != nil {
				lastWhy = err.Error()
				continue
			}
			live = append(live, m)
		}
	}
	if len(waiting) == 0 {
		return ""
	}
	// The reason: what boots for the fleet, else why nothing can.
	count := map[string]int{}
	var order []string
	for _, m := range live {
		if !m.RegisteredAt.IsZero() {
			continue
		}
		d := scaleOffer{backend: m.Backend, offer: m.Offer}.describe()
		if count[d] == 0 {
			order = append(order, d)
		}
		count[d]++
	}
	if len(order) > 0 {
		var parts []string
		for _, d := range order {
			parts = append(parts, fmt.Sprintf("%d × %s", count[d], d))
		}
		return "provisioning " + strings.Join(parts, " and ") + " for fleet " + bf.name
	}
	if lastWhy != "" {
		return "fleet " + bf.name + " cannot provision a machine: " + lastWhy
	}
	if maxN >= 0 && len(live) >= maxN {
		return fmt.Sprintf("fleet %s holds its nodes max %d machines", bf.name, maxN)
	}
	return ""
}

// noOfferWhy says why no offer suits request r.
func noOfferWhy(spec *api.FleetSpec, offers []scaleOffer, r taskRequest) string {
	if len(offers) == 0 {
		return "its backends offer nothing now"
	}
	fit := 0
	for _, o := range offers {
		if fitsRequest(o.offer, r) {
			fit++
		}
	}
	if fit == 0 {
		return "no offer of its backends has the resources the run asks for"
	}
	var pol []string
	if len(spec.Regions) > 0 {
		pol = append(pol, "regions "+strings.Join(spec.Regions, ", "))
	}
	if len(spec.InstanceTypes) > 0 {
		pol = append(pol, "instance_types "+strings.Join(spec.InstanceTypes, ", "))
	}
	pol = append(pol, "spot_policy "+cmpStr(spec.SpotPolicy, api.SpotPolicyOnDemand))
	return fmt.Sprintf("%d offers fit the run, but none within the fleet's %s, or they back off after no-capacity answers", fit, strings.Join(pol, ", "))
}

// provision makes one machine for fleet bf from the first offer of
// choice that the cloud has capacity for; a no-capacity answer backs that
// offer off and tries the next.
func (s *Server) provision(ctx context.Context, bf backendFleet, spec *api.FleetSpec, choice []scaleOffer) (scaleMachine, error) {
	a := &s.backends.autoscale
	f, err := s.store.Fleets().Get(bf.id)
	if err != nil {
		return scaleMachine{}, err
	}
	var errs []string
	for _, o := range choice {
		sup := s.backendOfMachine(scaleMachine{Project: bf.project, Backend: o.backend})
		if sup == nil {
			continue
		}
		reg, tok, hash, err := s.mintMachineToken(ctx, f)
		if err != nil {
			return scaleMachine{}, err
		}
		suffix := make([]byte, 4)
		if _, err := rand.Read(suffix); err != nil {
			return scaleMachine{}, err
		}
		m := scaleMachine{ID: sanitize(bf.name) + "-" + hex.EncodeToString(suffix), Fleet: bf.id, FleetName: bf.name, Project: bf.project,
			Backend: o.backend, Offer: o.offer, TokenHash: hash, TokenID: tok.ID, CreatedAt: s.now()}
		tb, err := json.Marshal(tok)
		if err != nil {
			return scaleMachine{}, err
		}
		// The record and token first: a crash after the cloud's answer
		// leaves a machine gpud knows (CreateInstance is idempotent on
		// the id, and the timeout terminates one that never joins).
		if err := s.saveMachine(ctx, m, store.KVPut(regTokenKey(hash), tb), store.KVPut(regIDKey(tok.ID), []byte(hash))); err != nil {
			return scaleMachine{}, err
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		inst, err := sup.CreateInstance(cctx, plugins.InstanceRequest{ID: m.ID, Project: bf.project, Offer: o.offer, Spot: o.offer.Spot, Register: reg,
			Resources: o.offer.Resources, Reservation: spec.Reservation})
		cancel()
		if err != nil {
			now := time.Now()
			a.mu.Lock()
			d := a.backoff.fail(o.key(), now)
			a.mu.Unlock()
			s.log.Warn().Err(err).Str("fleet", bf.name).Str("offer", o.describe()).Dur("backoff", d).Msg("autoscale: create machine")
			errs = append(errs, fmt.Sprintf("%s: %v", o.describe(), err))
			if plugins.IsNoCapacity(err) {
				// The cloud refused it: nothing was made.
				if _, derr := s.store.Apply(ctx, store.KVDelete(machineKey(m.ID)), store.KVDelete(regTokenKey(hash)), store.KVDelete(regIDKey(tok.ID))); derr != nil {
					s.log.Warn().Err(derr).Str("machine", m.ID).Msg("autoscale: forget a machine that was not made")
				}
				continue
			}
			// Another error may have made it (a timeout after the cloud's
			// answer): the cloud's listing decides (followMachines), and
			// no other offer is tried meanwhile.
			m.Unconfirmed, m.UnconfirmedAt = true, s.now()
			if serr := s.saveMachine(ctx, m); serr != nil {
				s.log.Warn().Err(serr).Str("machine", m.ID).Msg("autoscale: record an unconfirmed machine")
			}
			return m, fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		a.mu.Lock()
		a.backoff.succeed(o.key())
		a.mu.Unlock()
		m.CloudID = inst.ID
		if err := s.saveMachine(ctx, m, s.event(bf.project, store.KindFleet, bf.id, "machine_created",
			fmt.Sprintf("machine %s (%s) for fleet %s: %s", m.ID, inst.ID, bf.name, o.describe()))); err != nil {
			s.log.Warn().Err(err).Str("machine", m.ID).Msg("autoscale: record machine")
		}
		s.log.Info().Str("machine", m.ID).Str("cloud_id", inst.ID).Str("fleet", bf.name).Str("offer", o.describe()).Msg("autoscale: machine created")
		return m, nil
	}
	if len(errs) == 0 {
		return scaleMachine{}, fmt.Errorf("no backend to create %s", choice[0].describe())
	}
	return scaleMachine{}, fmt.Errorf("%s", strings.Join(errs, "; "))
}
