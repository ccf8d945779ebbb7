package api

import (
	"github.com/goccy/go-yaml/ast"
)

// RunSpec is the part shared by tasks, services and dev environments: what
// to run it in, what it needs, where it may run and how long.
type RunSpec struct {
	Type         Kind          `json:"type"`
	Name         string        `json:"name,omitempty"`
	Image        string        `json:"image,omitempty"`
	Python       string        `json:"python,omitempty"`
	Nvcc         bool          `json:"nvcc,omitempty"`
	Docker       bool          `json:"docker,omitempty"`
	Dstack       bool          `json:"dstack,omitempty"` // mount the dstack (gpud) CLI in the job
	Privileged   bool          `json:"privileged,omitempty"`
	User         string        `json:"user,omitempty"`
	Entrypoint   string        `json:"entrypoint,omitempty"`
	WorkingDir   string        `json:"working_dir,omitempty"`
	RegistryAuth *RegistryAuth `json:"registry_auth,omitempty"`
	Env          Env           `json:"env,omitempty"`
	Shell        string        `json:"shell,omitempty"`
	Resources    Resources     `json:"resources"`
	Volumes      []VolumeMount `json:"volumes,omitempty"`
	Repos        []Repo        `json:"repos,omitempty"`
	Files        []FileMapping `json:"files,omitempty"`

	// Scheduling: dstack's priority (0–100) or a gpud class, gpud's queue
	// and preemptibility.
	Priority    *Priority `json:"priority,omitempty"`
	Queue       string    `json:"queue,omitempty"`
	Preemptible *bool     `json:"preemptible,omitempty"`

	// Placement and lifetime (dstack's profile fields).
	Backends          []string           `json:"backends,omitempty"`
	Regions           []string           `json:"regions,omitempty"`
	AvailabilityZones []string           `json:"availability_zones,omitempty"`
	InstanceTypes     []string           `json:"instance_types,omitempty"`
	Reservation       string             `json:"reservation,omitempty"`
	SpotPolicy        string             `json:"spot_policy"`
	MaxPrice          float64            `json:"max_price,omitempty"`
	Retry             *Retry             `json:"retry,omitempty"`
	MaxDuration       *Duration          `json:"max_duration,omitempty"`
	StopDuration      *Duration          `json:"stop_duration,omitempty"`
	IdleDuration      *Duration          `json:"idle_duration,omitempty"`
	CreationPolicy    string             `json:"creation_policy"`
	UtilizationPolicy *UtilizationPolicy `json:"utilization_policy,omitempty"`
	Schedule          *Schedule          `json:"schedule,omitempty"`
	Fleets            []string           `json:"fleets,omitempty"`
	Instances         []InstanceRef      `json:"instances,omitempty"`
	Tags              map[string]string  `json:"tags,omitempty"`
}

// RegistryAuth holds credentials for a private image registry; values are
// usually ${{ secrets.X }} or ${{ env.X }} references.
type RegistryAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Retry says when a failed or interrupted run is resubmitted, and for how long.
type Retry struct {
	OnEvents []string  `json:"on_events"` // no-capacity, interruption, error
	Duration *Duration `json:"duration,omitempty"`
}

// UtilizationPolicy stops a run whose GPUs stay below MinGPUUtilization
// percent for all of TimeWindow.
type UtilizationPolicy struct {
	MinGPUUtilization int      `json:"min_gpu_utilization"`
	TimeWindow        Duration `json:"time_window"`
}

// Schedule starts the run at the times of its cron expressions (UTC).
type Schedule struct {
	Cron []string `json:"cron"`
}

// InstanceRef pins a run to instances: by instance name, by hostname, or by
// fleet and instance number.
type InstanceRef struct {
	Name     string `json:"name,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	Fleet    string `json:"fleet,omitempty"`
	Instance *int   `json:"instance,omitempty"`
}

// Spot and creation policies.
const (
	SpotPolicySpot     = "spot"
	SpotPolicyOnDemand = "on-demand"
	SpotPolicyAuto     = "auto"

	CreationPolicyReuse         = "reuse"
	CreationPolicyReuseOrCreate = "reuse-or-create"
)

// retryEvents lists the events a retry policy may name.
func retryEvents() []string { return []string{"no-capacity", "interruption", "error"} }

// runFields returns the decoders of every field RunSpec holds, for the
// kind-specific decoders to extend.
func (d *decoder) runFields(r *RunSpec, kind Kind) fields {
	fs := d.profileFields(r)
	fs["type"] = typeField(&r.Type, kind)
	fs["name"] = func(n ast.Node, p string) { r.Name, _ = value(d, n, p, checkName) }
	fs["image"] = func(n ast.Node, p string) { r.Image, _ = d.str(n, p) }
	fs["python"] = func(n ast.Node, p string) {
		r.Python, _ = d.oneOf(n, p, "3.9", "3.10", "3.11", "3.12", "3.13")
	}
	fs["nvcc"] = func(n ast.Node, p string) { r.Nvcc, _ = d.boolean(n, p) }
	fs["docker"] = func(n ast.Node, p string) { r.Docker, _ = d.boolean(n, p) }
	fs["dstack"] = func(n ast.Node, p string) { r.Dstack, _ = d.boolean(n, p) }
	fs["privileged"] = func(n ast.Node, p string) { r.Privileged, _ = d.boolean(n, p) }
	fs["user"] = func(n ast.Node, p string) { r.User, _ = d.str(n, p) }
	fs["entrypoint"] = func(n ast.Node, p string) { r.Entrypoint, _ = d.str(n, p) }
	fs["working_dir"] = func(n ast.Node, p string) { r.WorkingDir, _ = d.str(n, p) }
	fs["shell"] = func(n ast.Node, p string) { r.Shell, _ = d.str(n, p) }
	fs["registry_auth"] = func(n ast.Node, p string) {
		var a RegistryAuth
		present := d.object(n, p, "registry credentials", fields{
			"username": func(n ast.Node, p string) { a.Username, _ = d.str(n, p) },
			"password": func(n ast.Node, p string) { a.Password, _ = d.str(n, p) },
		})
		d.require(present, n, p, "username", "add the registry user name")
		d.require(present, n, p, "password", "add the password, e.g. ${{ secrets.registry_password }}")
		r.RegistryAuth = &a
	}
	fs["env"] = func(n ast.Node, p string) { r.Env = d.env(n, p) }
	fs["resources"] = func(n ast.Node, p string) { r.Resources = d.resources(n, p) }
	fs["volumes"] = func(n ast.Node, p string) { r.Volumes = d.volumeMounts(n, p) }
	fs["repos"] = func(n ast.Node, p string) { r.Repos = d.repos(n, p) }
	fs["files"] = func(n ast.Node, p string) { r.Files = d.files(n, p) }
	fs["instances"] = func(n ast.Node, p string) { r.Instances = d.instances(n, p) }
	return fs
}

// profileFields decodes the fields a profile may set; runs accept them too.
func (d *decoder) profileFields(r *RunSpec) fields {
	return fields{
		"priority":    func(n ast.Node, p string) { r.Priority = d.priority(n, p) },
		"queue":       func(n ast.Node, p string) { r.Queue, _ = value(d, n, p, checkName) },
		"preemptible": func(n ast.Node, p string) { b, ok := d.boolean(n, p); r.Preemptible = boolPtr(b, ok) },
		"backends":    func(n ast.Node, p string) { r.Backends = d.strList(n, p) },
		"regions":     func(n ast.Node, p string) { r.Regions = d.strList(n, p) },
		"availability_zones": func(n ast.Node, p string) {
			r.AvailabilityZones = d.strList(n, p)
		},
		"instance_types": func(n ast.Node, p string) { r.InstanceTypes = d.strList(n, p) },
		"reservation":    func(n ast.Node, p string) { r.Reservation, _ = d.str(n, p) },
		"spot_policy": func(n ast.Node, p string) {
			r.SpotPolicy, _ = d.oneOf(n, p, SpotPolicySpot, SpotPolicyOnDemand, SpotPolicyAuto)
		},
		"max_price":     func(n ast.Node, p string) { r.MaxPrice, _ = d.number(n, p) },
		"retry":         func(n ast.Node, p string) { r.Retry = d.retry(n, p) },
		"max_duration":  func(n ast.Node, p string) { r.MaxDuration = d.duration(n, p, true) },
		"stop_duration": func(n ast.Node, p string) { r.StopDuration = d.duration(n, p, true) },
		"idle_duration": func(n ast.Node, p string) { r.IdleDuration = d.duration(n, p, true) },
		"creation_policy": func(n ast.Node, p string) {
			r.CreationPolicy, _ = d.oneOf(n, p, CreationPolicyReuse, CreationPolicyReuseOrCreate)
		},
		"utilization_policy": func(n ast.Node, p string) { r.UtilizationPolicy = d.utilization(n, p) },
		"schedule":           func(n ast.Node, p string) { r.Schedule = d.schedule(n, p) },
		"fleets":             func(n ast.Node, p string) { r.Fleets = d.strList(n, p) },
		"tags":               func(n ast.Node, p string) { r.Tags = d.tags(n, p) },
	}
}

// IsPreemptible reports whether the scheduler may preempt the run: the
// explicit preemptible field, else what its priority class implies (train
// and build-preemptible runs, and numeric priorities, are preemptible).
func (r *RunSpec) IsPreemptible() bool {
	if r.Preemptible != nil {
		return *r.Preemptible
	}
	if r.Priority != nil {
		return r.Priority.Preemptible()
	}
	return true
}

func boolPtr(b, ok bool) *bool {
	if !ok {
		return nil
	}
	return &b
}

// checkRun validates rules that span several run fields.
func (d *decoder) checkRun(r *RunSpec, present map[string]ast.Node, path string) {
	if present == nil {
		return
	}
	if r.Image != "" && r.Python != "" {
		d.errorAt(present["python"], join(path, "python"), "python and image cannot both be set",
			"drop python (the image brings its own), or drop image to use gpud's default image with that Python")
	}
	if r.Docker && r.Image != "" {
		d.errorAt(present["docker"], join(path, "docker"), "docker: true and image cannot both be set",
			"drop image: docker: true runs the job in gpud's Docker-in-Docker image")
	}
	if r.Nvcc && r.Image != "" {
		d.errorAt(present["nvcc"], join(path, "nvcc"), "nvcc and image cannot both be set",
			"drop nvcc and use an image with the CUDA compiler, like nvcr.io/nvidia/pytorch")
	}
}

func (d *decoder) retry(n ast.Node, path string) *Retry {
	if !d.isMap(n) {
		on, ok := d.boolean(n, path)
		if !ok || !on {
			return nil
		}
		return &Retry{OnEvents: retryEvents(), Duration: &Duration{Value: defaultRetryDuration}}
	}
	r := &Retry{}
	d.object(n, path, "a retry policy", fields{
		"on_events": func(n ast.Node, p string) {
			items, _ := d.seq(n, p, "a list of events")
			for i, it := range items {
				if s, ok := d.oneOf(it, index(p, i), retryEvents()...); ok {
					r.OnEvents = append(r.OnEvents, s)
				}
			}
		},
		"duration": func(n ast.Node, p string) { r.Duration = d.duration(n, p, false) },
	})
	if len(r.OnEvents) == 0 {
		r.OnEvents = retryEvents()
	}
	return r
}

func (d *decoder) utilization(n ast.Node, path string) *UtilizationPolicy {
	u := &UtilizationPolicy{}
	present := d.object(n, path, "a utilization policy", fields{
		"min_gpu_utilization": func(n ast.Node, p string) { u.MinGPUUtilization, _ = d.integer(n, p, 0, 100) },
		"time_window": func(n ast.Node, p string) {
			if t := d.duration(n, p, false); t != nil {
				u.TimeWindow = *t
			}
		},
	})
	d.require(present, n, path, "min_gpu_utilization", "add a percentage from 0 to 100")
	d.require(present, n, path, "time_window", "add a duration like 1h")
	return u
}

func (d *decoder) schedule(n ast.Node, path string) *Schedule {
	s := &Schedule{}
	present := d.object(n, path, "a schedule", fields{
		"cron": func(n ast.Node, p string) {
			var exprs []string
			if d.isSeq(n) {
				exprs = d.strList(n, p)
			} else if c, ok := d.str(n, p); ok {
				exprs = []string{c}
			}
			for _, e := range exprs {
				if err := checkCron(e); err != nil {
					d.errorAt(n, p, err.Error(), "write five fields: minute hour day-of-month month day-of-week, like 0 8 * * mon-fri")
					continue
				}
				s.Cron = append(s.Cron, e)
			}
		},
	})
	d.require(present, n, path, "cron", "add a cron expression like `0 8 * * mon-fri`")
	return s
}

func (d *decoder) instances(n ast.Node, path string) []InstanceRef {
	return list(d, n, path, "a list of instances", func(it ast.Node, p string) (InstanceRef, bool) {
		var ref InstanceRef
		present := d.object(it, p, "an instance reference", fields{
			"name":     func(n ast.Node, p string) { ref.Name, _ = d.str(n, p) },
			"hostname": func(n ast.Node, p string) { ref.Hostname, _ = d.str(n, p) },
			"fleet":    func(n ast.Node, p string) { ref.Fleet, _ = d.str(n, p) },
			"instance": func(n ast.Node, p string) {
				if v, ok := d.integer(n, p, 0, 1<<20); ok {
					ref.Instance = &v
				}
			},
		})
		if present != nil && ref.Name == "" && ref.Hostname == "" && ref.Fleet == "" {
			d.errorAt(it, p, "an instance needs a name, a hostname, or a fleet and instance number", "")
		}
		return ref, true
	})
}

func (d *decoder) tags(n ast.Node, path string) map[string]string {
	kvs, ok := d.entries(n, path, "tags")
	if !ok {
		return nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v, _ := d.str(kv.value, join(path, kv.key))
		out[kv.key] = v
	}
	return out
}

// setDefaults fills dstack's defaults for the fields a run left unset.
func (r *RunSpec) setDefaults() {
	r.Resources.setDefaults()
	if r.SpotPolicy == "" {
		r.SpotPolicy = SpotPolicyOnDemand
	}
	if r.CreationPolicy == "" {
		r.CreationPolicy = CreationPolicyReuseOrCreate
	}
	if r.StopDuration == nil {
		r.StopDuration = &Duration{Value: defaultStopDuration}
	}
	if r.MaxDuration == nil {
		r.MaxDuration = &Duration{Off: true}
	}
}
