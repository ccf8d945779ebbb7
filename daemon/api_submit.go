package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// parseConfig reads the configuration of an apply request: YAML text or
// the api spec JSON, exactly one of them.
func parseConfig(req api.ApplyRequest) (*api.Config, error) {
	hasJSON, hasYAML := len(req.Configuration) > 0 && string(req.Configuration) != "null", req.ConfigurationYAML != ""
	switch {
	case hasJSON && hasYAML:
		return nil, badField("configuration", "send configuration or configuration_yaml, not both")
	case !hasJSON && !hasYAML:
		return nil, badField("configuration", "send the configuration (api spec JSON) or configuration_yaml (YAML text)")
	}
	data, name := []byte(req.ConfigurationYAML), req.Filename
	if hasJSON {
		data = req.Configuration
	}
	cfg, err := api.Parse(name, data)
	if err != nil {
		var el api.ErrorList
		if errors.As(err, &el) {
			return nil, configErrors(el)
		}
		return nil, badField("configuration", "%v", err)
	}
	return cfg, nil
}

// submission is a run ready to be stored: its record and its jobs'.
type submission struct {
	run  store.Record
	jobs []store.Record
	// notes are the plan's notes (fieldVerdict.notes).
	notes []string
}

// buildRun turns a validated run configuration into the run and job
// records (status submitted), resolving ${{ secrets.X }} and ${{ env.X }}.
func (s *runsAPI) buildRun(project, user string, req api.ApplyRunRequest, cfg *api.Config, targets runTargets) (*submission, error) {
	spec := cfg.Run()
	if spec == nil {
		return nil, badField("configuration.type", "%s is not a run; apply it with /%ss/apply", cfg.Kind, cfg.Kind)
	}
	name := req.Name
	if name == "" {
		name = spec.Name
	}
	if name == "" {
		name = "run-" + newID()[:8]
	}
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	if err := s.checkRunUpload(project, spec, req.Upload); err != nil {
		return nil, err
	}
	queue := spec.Queue
	if queue == "" {
		queue = defaultQueue
	}
	if _, err := s.store.Queues().Get(queueID(project, queue)); err != nil {
		return nil, badField("configuration.queue", "queue %q does not exist in project %q; apply a `type: queue` configuration first", queue, project)
	}
	normalized, err := cfg.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("normalize: %w", err)
	}
	now := s.now()
	runID := newID()
	st := runState{Type: cfg.Kind, Config: normalized, SubmittedAt: now, Preemptible: true, Targets: targets, Place: placementOf(spec)}
	if spec.Priority != nil {
		st.Priority = priorityValue(*spec.Priority)
		st.Preemptible = spec.Priority.Preemptible()
	}
	if spec.Preemptible != nil {
		st.Preemptible = *spec.Preemptible
	}
	if spec.MaxDuration != nil && !spec.MaxDuration.Off {
		st.MaxDuration = spec.MaxDuration.Value
	}
	st.StopDuration = 10 * time.Second
	if spec.StopDuration != nil {
		st.StopDuration = spec.StopDuration.Value
		if spec.StopDuration.Off {
			st.StopDuration = 0
		}
	}
	if spec.Retry != nil {
		st.RetryEvents = spec.Retry.OnEvents
		if spec.Retry.Duration != nil && !spec.Retry.Duration.Off {
			st.RetryFor = spec.Retry.Duration.Value
		}
	}
	if spec.UtilizationPolicy != nil && !spec.UtilizationPolicy.TimeWindow.Off {
		st.MinGPUUtil, st.UtilWindow = spec.UtilizationPolicy.MinGPUUtilization, spec.UtilizationPolicy.TimeWindow.Value
	}
	if sv := cfg.Service; sv != nil {
		st.OpenService, st.KeepPrefix = !sv.Auth, !sv.StripPrefix
	}
	if d := cfg.DevEnvironment; d != nil && d.InactivityDuration != nil && !d.InactivityDuration.Off {
		st.Inactivity = d.InactivityDuration.Value
	}
	var notBefore time.Time
	if spec.Schedule != nil && len(spec.Schedule.Cron) > 0 {
		st.Cron = spec.Schedule.Cron
		if notBefore, err = nextTick(st.Cron, s.clock().Now()); err != nil {
			return nil, badField("configuration.schedule.cron", "%v", err)
		}
	}
	if cfg.Task != nil && cfg.Task.StartupOrder != api.StartupAny {
		st.StartupOrder = cfg.Task.StartupOrder
	}
	if cfg.Task != nil && cfg.Task.StopCriteria == api.StopMasterDone {
		st.StopCriteria = cfg.Task.StopCriteria
	}
	secrets := s.accountsAPI.secretValues(project)
	nodes := jobLayout(cfg)
	st.MinNodes = len(nodes)
	if cfg.Task != nil && cfg.Task.Nodes.Min != nil && cfg.Task.Elastic() {
		st.MinNodes = *cfg.Task.Nodes.Min
	}
	// A service's replicas are one-node jobs each (rank 0 of 1, as on
	// dstack); a task's nodes are one gang.
	replicaNodes := len(nodes)
	if cfg.Service != nil {
		replicaNodes = 1
	}
	sub := &submission{}
	for _, n := range nodes {
		jobID := fmt.Sprintf("%s-%d-%d", runID, n.replica, n.rank)
		resolve := resolver(req.Env, secrets, name, project, n, replicaNodes)
		env := map[string]string{}
		for _, e := range n.env {
			v := e.Value
			if !e.HasValue {
				cv, ok := req.Env[e.Name]
				if !ok {
					return nil, badField("env."+e.Name, "%s has no value in the configuration and the client sent none; set it in your environment", e.Name)
				}
				v = cv
			}
			if v, err = api.Interpolate(v, resolve); err != nil {
				return nil, badField("configuration.env."+e.Name, "%v", err)
			}
			env[e.Name] = v
		}
		// Commands that interpolate a secret are sealed like the env; the
		// job's spec keeps them with the secret's reference, not its value.
		commands, shown := make([]string, len(n.commands)), make([]string, len(n.commands))
		for i, c := range n.commands {
			if commands[i], err = api.Interpolate(c, resolve); err != nil {
				return nil, badField(fmt.Sprintf("configuration.commands[%d]", i), "%v", err)
			}
			if shown[i], err = api.Interpolate(c, withoutSecrets(resolve)); err != nil {
				return nil, badField(fmt.Sprintf("configuration.commands[%d]", i), "%v", err)
			}
		}
		commands, shown = dindCommands(spec, n.image, commands), dindCommands(spec, n.image, shown)
		var sealedCommands []string
		if !slices.Equal(commands, shown) {
			sealedCommands = commands
		}
		js := api.JobSpec{
			ID: jobID, RunName: name, Image: n.image, Commands: shown, Shell: spec.Shell,
			WorkingDir: spec.WorkingDir, User: spec.User, Privileged: spec.Privileged,
			ShmSize: api.Size(n.res.SHMSize), StopDuration: st.StopDuration,
			Labels: map[string]string{"dev.gpud.project": project, "dev.gpud.run": name},
			Upload: req.Upload,
		}
		var sealedRepos []api.JobRepo
		if js.Repos, sealedRepos, err = jobRepos(spec, resolve); err != nil {
			return nil, err
		}
		addTagLabels(js.Labels, spec.Tags)
		if err := s.applyContainerFields(&js, spec, n.image); err != nil {
			return nil, err
		}
		if n.res.Memory.Max != nil {
			js.Memory = *n.res.Memory.Max
		}
		for _, p := range n.ports {
			js.Ports = append(js.Ports, api.JobPort{Container: p.Container, HostIP: "127.0.0.1"})
		}
		if spec.RegistryAuth != nil {
			u, err1 := api.Interpolate(spec.RegistryAuth.Username, resolve)
			p, err2 := api.Interpolate(spec.RegistryAuth.Password, resolve)
			if err := errors.Join(err1, err2); err != nil {
				return nil, badField("configuration.registry_auth", "%v", err)
			}
			js.RegistryAuth = &api.JobRegistryAuth{Username: u, Password: p}
		}
		js.Cluster = api.JobCluster{NodeRank: n.rank, NodesNum: replicaNodes}
		sealed, err := json.Marshal(sealedJob{Env: env, RegistryAuth: js.RegistryAuth, Commands: sealedCommands, Repos: sealedRepos})
		if err != nil {
			return nil, fmt.Errorf("seal job %s: %w", jobID, err)
		}
		js.RegistryAuth = nil
		if n.group != "" {
			js.Labels["dev.gpud.group"] = n.group
		}
		if js.Volumes, err = s.jobVolumes(project, spec.Volumes, n, replicaNodes); err != nil {
			return nil, err
		}
		jst := jobRecordSpec{ReplicaNum: n.replica, NodeRank: n.rank, NodesNum: replicaNodes, Group: n.group, Request: requestOf(n.res), Spec: js, SubmittedAt: now, NotBefore: notBefore}
		if cfg.Service != nil {
			jst.Probes = cfg.Service.Probes
		}
		// Only hosts that can honour privileged, python and volumes take the job.
		jst.Request.Needs.Privileged = js.Privileged
		image := js.Image != "" || (!s.opts.Embedded && s.opts.DefaultImage != "")
		if spec.Python != "" {
			jst.Request.Needs.Python, jst.Request.Needs.Image = spec.Python, image
		}
		volumeNeeds(&jst.Request.Needs, js.Volumes, image)
		sub.jobs = append(sub.jobs, store.Record{
			Kind: store.KindJob, ID: jobID, Project: project, Run: runID, Name: fmt.Sprintf("%s-%d-%d", name, n.replica, n.rank),
			Status: store.JobSubmitted, Queue: queueID(project, queue), User: user, Reason: "submitted",
			Spec: encodeSpec(jst), Sealed: sealed,
		})
	}
	sub.run = store.Record{
		Kind: store.KindRun, ID: runID, Project: project, Name: name, Status: store.RunSubmitted,
		Queue: queueID(project, queue), User: user, Reason: "submitted by " + user, Spec: encodeSpec(st),
	}
	return sub, nil
}

// sealedJob is a job's secret material, encrypted at rest in Record.Sealed.
type sealedJob struct {
	Env          map[string]string    `json:"env,omitempty"`
	RegistryAuth *api.JobRegistryAuth `json:"registry_auth,omitempty"`
	// Commands are the job's commands with secrets resolved, set only
	// when one interpolates a secret (the spec keeps the reference).
	Commands []string `json:"commands,omitempty"`
	// Repos are the job's repos with secrets resolved in their URLs, set
	// only when one interpolates a secret (a private repo's token).
	Repos []api.JobRepo `json:"repos,omitempty"`
}

// withoutSecrets resolves like resolve but leaves secret references as
// they are, for what is stored unsealed.
func withoutSecrets(resolve func(api.Reference) (string, error)) func(api.Reference) (string, error) {
	return func(ref api.Reference) (string, error) {
		if ref.Namespace == api.NamespaceSecrets {
			return ref.String(), nil
		}
		return resolve(ref)
	}
}

// nodeLayout is one job of a run before it becomes a record.
type nodeLayout struct {
	replica, rank int
	group         string // the task group or replica group's name
	image         string
	commands      []string
	env           api.Env
	res           api.Resources
	ports         []api.PortMapping
}

// jobLayout lists the jobs a run starts with: the nodes of a task (the
// minimum of an elastic gang), the replicas of a service, one dev
// environment.
func jobLayout(cfg *api.Config) []nodeLayout {
	spec := cfg.Run()
	base := nodeLayout{image: spec.Image, env: spec.Env, res: spec.Resources}
	var out []nodeLayout
	switch {
	case cfg.Task != nil:
		t := cfg.Task
		base.commands, base.ports = t.Commands, t.Ports
		if len(t.Groups) > 0 {
			rank := 0
			for _, g := range t.Groups {
				n := base
				if g.Image != "" {
					n.image = g.Image
				}
				n.commands, n.group = g.Commands, g.Name
				n.env = append(append(api.Env{}, spec.Env...), g.Env...)
				if g.Resources != nil {
					n.res = *g.Resources
				}
				for range max(rangeMin(g.Nodes), 1) {
					n.rank = rank
					out = append(out, n)
					rank++
				}
			}
			return out
		}
		for i := range max(rangeMin(t.Nodes), 1) {
			n := base
			n.rank = i
			out = append(out, n)
		}
	case cfg.Service != nil:
		sv := cfg.Service
		base.commands = sv.Commands
		base.ports = []api.PortMapping{sv.Port}
		if len(sv.Replicas.Groups) > 0 {
			// Replica groups (a router, prefill and decode workers): each
			// replica runs its group's commands, image, env and resources.
			replica := 0
			for _, g := range sv.Replicas.Groups {
				n := base
				n.group, n.commands = g.Name, g.Commands
				if g.Image != "" {
					n.image = g.Image
				}
				n.env = append(append(api.Env{}, spec.Env...), g.Env...)
				if g.Resources != nil {
					n.res = *g.Resources
				}
				for range rangeMin(g.Count) {
					n.replica = replica
					out = append(out, n)
					replica++
				}
			}
			return out
		}
		for i := range max(rangeMin(sv.Replicas.Count), 1) {
			n := base
			n.replica = i
			out = append(out, n)
		}
	case cfg.DevEnvironment != nil:
		d := cfg.DevEnvironment
		base.commands = append(append([]string{}, d.Init...), "sleep infinity")
		base.ports = d.Ports
		out = append(out, base)
	}
	return out
}

func rangeMin(r api.Range[int]) int {
	if r.Min == nil {
		return 0
	}
	return *r.Min
}

// requestOf is the scheduler's view of one job's resources: the minimum of
// each range.
func requestOf(res api.Resources) taskRequest {
	var t taskRequest
	if res.CPU.Count.Min != nil {
		t.CPU = int64(*res.CPU.Count.Min) * 1000
	}
	if res.Memory.Min != nil {
		t.Memory = int64(*res.Memory.Min)
	}
	g := res.GPU
	switch {
	case g.Fractional():
		t.GPU = int64(g.Fraction * 1000)
	case g.Count.Min != nil:
		t.GPU = int64(*g.Count.Min) * 1000
	}
	t.GPUName, t.GPUMemory, t.GPUMemoryMax = gpuMatch(g)
	t.Needs = needsOf(res)
	return t
}

// priorityValue maps a priority to the scheduler's integer: dstack's
// 0–100, or gpud's classes above them.
func priorityValue(p api.Priority) int {
	switch p.Class {
	case api.PriorityBuildPreemptible:
		return 100
	case api.PriorityTrain:
		return 50
	case api.PriorityBuild:
		return 100
	case api.PriorityInference:
		return 125
	}
	return p.Value
}

// resolver answers ${{ }} references at submission: env from the client,
// secrets of the project, run metadata and per-job dstack values.
func resolver(env, secrets map[string]string, run, project string, n nodeLayout, nodes int) func(api.Reference) (string, error) {
	return func(ref api.Reference) (string, error) {
		switch ref.Namespace {
		case api.NamespaceEnv:
			if v, ok := env[ref.Path]; ok {
				return v, nil
			}
			return "", fmt.Errorf("%s: the client sent no %s", ref, ref.Path)
		case api.NamespaceSecrets:
			if v, ok := secrets[ref.Path]; ok {
				return v, nil
			}
			return "", fmt.Errorf("%s: project %q has no secret %s; set it with gpud secret set %s", ref, project, ref.Path, ref.Path)
		case api.NamespaceRun:
			switch ref.Path {
			case "name":
				return run, nil
			case "project_name":
				return project, nil
			}
		case api.NamespaceDstack:
			switch ref.Path {
			case "node_rank":
				return strconv.Itoa(n.rank), nil
			case "nodes_num":
				return strconv.Itoa(nodes), nil
			}
		}
		// Left for the job to see: groups addresses are known only once placed.
		return ref.String(), nil
	}
}

// checkNameFree finds the run named name in project: an active one is a
// conflict unless force; a finished one is replaced (its records deleted).
func (s *runsAPI) checkNameFree(project, name string, force bool) (replace []store.Mutation, active *store.Record, err error) {
	for _, r := range s.store.Runs().ByProject(project) {
		if r.Name != name {
			continue
		}
		if !finishedRun(r.Status) {
			if !force {
				return nil, &r, apiErr(http.StatusConflict, api.CodeConflict, "name", "run %q is %s; stop it first or apply with force", name, r.Status)
			}
			rc := r
			active = &rc
			continue
		}
		for _, j := range s.store.Jobs().ByRun(r.ID) {
			replace = append(replace, store.Delete(store.KindJob, j.ID))
		}
		replace = append(replace, store.Delete(store.KindRun, r.ID))
	}
	return replace, active, nil
}
