package slurm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// Version is this backend's own version, for `gpud backend list`.
const Version = "0.1.0"

// RuntimeName is what JobStatus.Runtime says for Slurm jobs.
const RuntimeName = "slurm"

// Backend runs gpud's gangs as Slurm batch jobs through slurmrestd.
type Backend struct {
	cfg Config
	c   *client
	log zerolog.Logger

	mu  sync.Mutex
	ids map[string]int // gang -> Slurm job id, a cache of the jobs' comments
	// stopped are the gangs this process cancelled: their CANCELLED is a
	// stop, not someone else's scancel.
	stopped map[string]bool
	info    clusterInfo
}

// clusterInfo is what Check learnt: the Slurm release and the default
// partition.
type clusterInfo struct {
	release, defaultPartition string
}

var _ plugins.Backend = (*Backend)(nil)

// New checks cfg without reaching slurmrestd (a missing or malformed
// field fails here, naming it); Check is the call that reaches it.
func New(cfg Config, log zerolog.Logger) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg, c: newClient(cfg), log: log, ids: map[string]int{}, stopped: map[string]bool{}}, nil
}

// Info implements plugins.Backend. The backend honours none of the
// optional job features: a batch job runs its commands on the nodes, with
// no container (NoImage: no image, privileged or shm_size), no published
// ports or services, and gpud mounts no volumes there. Slurm 22.05 can
// run OCI containers (the container field, with oci.conf and a runtime
// on every node), but it takes an unpacked bundle's path, not an image
// reference: nothing gpud could give it.
func (b *Backend) Info(context.Context) (plugins.Info, error) {
	return plugins.Info{Type: "slurm", Protocol: plugins.ProtocolVersion, Jobs: true, Version: Version, Features: []string{}, NoImage: true}, nil
}

func (b *Backend) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(b.cfg.TimeoutSeconds)*time.Second)
}

type pingAnswer struct {
	answer
	Pings []struct {
		Hostname string `json:"hostname"`
		Ping     string `json:"ping"`
	} `json:"pings"`
}

// Check reaches slurmrestd with the configured user and token: the API
// version must be served (a 404 on its ping names the version), the
// token accepted (slurmctld answers the ping), slurmctld up, and every
// configured partition known.
func (b *Backend) Check(ctx context.Context) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	var p pingAnswer
	err := b.c.do(ctx, http.MethodGet, b.c.path("ping"), nil, &p)
	var ae *apiError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return fmt.Errorf("slurm backend: %s does not serve API version %s (no %s): set api_version to one it serves (see %s/openapi/v3)", b.cfg.URL, b.cfg.APIVersion, ae.Path, b.cfg.URL)
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return fmt.Errorf("slurm backend: %s refused the request as unauthenticated (401): is it started with rest_auth/jwt? %w", b.cfg.URL, err)
	case errors.As(err, &ae):
		// slurmrestd forwards the JWT to slurmctld, which refuses a wrong
		// or expired token: the ping then fails to load its configuration.
		return fmt.Errorf("slurm backend: %s refused user %s's token or cannot reach slurmctld (a wrong or expired token? mint one with scontrol token username=%s): %w", b.cfg.URL, b.cfg.User, b.cfg.User, err)
	default:
		return fmt.Errorf("slurm backend: cannot reach slurmrestd at %s: %w", b.cfg.URL, err)
	}
	up := slices.ContainsFunc(p.Pings, func(x struct {
		Hostname string `json:"hostname"`
		Ping     string `json:"ping"`
	}) bool {
		return x.Ping == "UP"
	})
	if !up {
		return fmt.Errorf("slurm backend: %s answers, but no slurmctld is UP: %+v", b.cfg.URL, p.Pings)
	}
	parts, err := b.partitions(ctx)
	if err != nil {
		return fmt.Errorf("slurm backend: %w", err)
	}
	info := clusterInfo{release: p.Meta.Slurm.Release}
	for _, x := range parts {
		if slices.Contains(x.Flags, "default") {
			info.defaultPartition = x.Name
		}
	}
	for _, want := range b.cfg.Partitions {
		if !slices.ContainsFunc(parts, func(x partition) bool { return x.Name == want }) {
			names := make([]string, 0, len(parts))
			for _, x := range parts {
				names = append(names, x.Name)
			}
			return fmt.Errorf("slurm backend: partitions: %q is not a partition of the cluster (it has %s)", want, strings.Join(names, ", "))
		}
	}
	if len(b.cfg.Partitions) == 0 && info.defaultPartition == "" {
		return errors.New("slurm backend: partitions: the cluster has no default partition: name the partitions to use")
	}
	b.mu.Lock()
	b.info = info
	b.mu.Unlock()
	return nil
}

type partition struct {
	Name  string   `json:"name"`
	Flags []string `json:"flags"`
	Nodes string   `json:"nodes"`
	State string   `json:"state"`
}

func (b *Backend) partitions(ctx context.Context) ([]partition, error) {
	var a struct {
		answer
		Partitions []partition `json:"partitions"`
	}
	if err := b.c.do(ctx, http.MethodGet, b.c.path("partitions"), nil, &a); err != nil {
		return nil, err
	}
	return a.Partitions, nil
}

// usedPartitions are the partitions the backend submits to and offers.
func (b *Backend) usedPartitions(ctx context.Context) ([]string, error) {
	if len(b.cfg.Partitions) > 0 {
		return b.cfg.Partitions, nil
	}
	b.mu.Lock()
	def := b.info.defaultPartition
	b.mu.Unlock()
	if def != "" {
		return []string{def}, nil
	}
	parts, err := b.partitions(ctx)
	if err != nil {
		return nil, err
	}
	for _, x := range parts {
		if slices.Contains(x.Flags, "default") {
			return []string{x.Name}, nil
		}
	}
	return nil, errors.New("the cluster has no default partition: name the partitions to use")
}

type node struct {
	Name        string   `json:"name"`
	State       string   `json:"state"`
	StateFlags  []string `json:"state_flags"`
	CPUs        int      `json:"cpus"`
	RealMemory  int64    `json:"real_memory"` // MiB
	Gres        string   `json:"gres"`
	GresUsed    string   `json:"gres_used"`
	Partitions  []string `json:"partitions"`
	TmpDisk     int64    `json:"temporary_disk"` // MiB
	AllocCPUs   int      `json:"alloc_cpus"`
	AllocMemory int64    `json:"alloc_memory"`
}

// Offers implements plugins.Backend: one offer per node of the used
// partitions that can run jobs (not down, drained or failing), with its
// configured CPUs, memory and GPUs (GRES gpu; the model from the GRES
// type). They are the node's whole size, not what is free now: Slurm's
// own queue decides when its jobs share a node with other users' work,
// and a job waiting there shows Slurm's reason. Availability says
// "busy" while the node is fully allocated.
func (b *Backend) Offers(ctx context.Context, q plugins.OfferQuery) ([]api.Offer, error) {
	if q.Spot != nil && *q.Spot {
		return nil, nil
	}
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	parts, err := b.usedPartitions(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurm backend: offers: %w", err)
	}
	var a struct {
		answer
		Nodes []node `json:"nodes"`
	}
	if err := b.c.do(ctx, http.MethodGet, b.c.path("nodes"), nil, &a); err != nil {
		return nil, fmt.Errorf("slurm backend: offers: %w", err)
	}
	region := b.cfg.Region
	var out []api.Offer
	for _, n := range a.Nodes {
		if !slices.ContainsFunc(n.Partitions, func(p string) bool { return slices.Contains(parts, p) }) || !nodeUsable(n) {
			continue
		}
		gpus, model := parseGPUGres(n.Gres)
		o := api.Offer{Backend: "slurm", Instance: n.Name, Region: region, Available: "available", Resources: api.InstanceResources{
			GPUs: float64(gpus), GPUName: model, CPUs: float64(n.CPUs),
			Memory: api.Size(n.RealMemory) * api.MB, Disk: api.Size(n.TmpDisk) * api.MB,
		}}
		if strings.EqualFold(n.State, "allocated") {
			o.Available = "busy"
		}
		if q.GPUs > 0 && gpus < q.GPUs {
			continue
		}
		if q.GPUName != "" && !gpuNameMatches(model, q.GPUName) {
			continue
		}
		if q.Region != "" && region != q.Region {
			continue
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(x, y api.Offer) int {
		if x.Resources.GPUs != y.Resources.GPUs {
			if x.Resources.GPUs > y.Resources.GPUs {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Instance, y.Instance)
	})
	return out, nil
}

// nodeUsable: a node Slurm would start jobs on (idle, mixed, allocated),
// not one down, drained, draining, failing or being rebooted.
func nodeUsable(n node) bool {
	switch strings.ToLower(n.State) {
	case "idle", "mixed", "allocated":
	default:
		return false
	}
	for _, f := range n.StateFlags {
		switch strings.ToUpper(f) {
		case "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN", "NOT_RESPONDING":
			return false
		}
	}
	return true
}

// parseGPUGres reads a node's GRES ("gpu:h100:4(S:0-1),nic:1") into its
// GPU count and the model of its typed GPUs ("H100"; empty when untyped
// or of several types).
func parseGPUGres(gres string) (count int, model string) {
	models := map[string]bool{}
	for _, g := range strings.Split(gres, ",") {
		g, _, _ = strings.Cut(strings.TrimSpace(g), "(")
		parts := strings.Split(g, ":")
		if len(parts) < 2 || parts[0] != "gpu" {
			continue
		}
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil {
			continue
		}
		count += n
		typ := ""
		if len(parts) >= 3 {
			typ = strings.Join(parts[1:len(parts)-1], ":")
		}
		models[gpuModel(typ)] = true
	}
	if len(models) == 1 {
		for m := range models {
			model = m
		}
	}
	return count, model
}

// gpuModel names a GRES type as the server names its hosts' devices:
// "h100" and "nvidia_h100_80gb_hbm3" -> "H100", "a100-sxm4-80gb" -> "A100".
func gpuModel(typ string) string {
	t := strings.ToLower(strings.TrimSpace(typ))
	for _, p := range []string{"nvidia_", "nvidia-", "amd_", "amd-", "tesla_", "tesla-"} {
		t = strings.TrimPrefix(t, p)
	}
	t, _, _ = strings.Cut(t, "_")
	t, _, _ = strings.Cut(t, "-")
	return strings.ToUpper(t)
}

// gpuNameMatches compares an offer's model with the names a query asks
// for, comma-separated.
func gpuNameMatches(model, want string) bool {
	for _, w := range strings.Split(want, ",") {
		w = strings.ToUpper(strings.TrimSpace(w))
		if f := strings.Fields(w); len(f) > 1 && (f[0] == "NVIDIA" || f[0] == "AMD") {
			w = f[1]
		}
		if w != "" && w == model {
			return true
		}
	}
	return false
}

// CreateInstance implements plugins.Backend: a job backend makes no
// machines.
func (b *Backend) CreateInstance(context.Context, plugins.InstanceRequest) (plugins.Instance, error) {
	return plugins.Instance{}, plugins.ErrUnsupported
}

// TerminateInstance implements plugins.Backend.
func (b *Backend) TerminateInstance(context.Context, string) error { return plugins.ErrUnsupported }

// CreateVolume implements plugins.Backend: Slurm has no volumes gpud
// could make; a job reaches the cluster's shared file systems by path.
func (b *Backend) CreateVolume(context.Context, api.VolumeSpec) (plugins.Volume, error) {
	return plugins.Volume{}, plugins.ErrUnsupported
}

// DeleteVolume implements plugins.Backend.
func (b *Backend) DeleteVolume(context.Context, string) error { return plugins.ErrUnsupported }
