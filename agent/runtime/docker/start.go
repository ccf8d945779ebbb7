package docker

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// hostfileInContainer is where the MPI hostfile is mounted in every job.
const hostfileInContainer = "/gpud/mpi_hostfile"

// Start pulls the image if the engine lacks it, creates the container and
// starts it. A container that fails to start is removed again.
func (r *Runtime) Start(ctx context.Context, spec api.JobSpec, pulling func()) (runtime.Handle, error) {
	if spec.Image == "" {
		return runtime.Handle{}, fmt.Errorf("job %s: the docker runtime needs an image", spec.ID)
	}
	if err := r.ensureImage(ctx, spec, pulling); err != nil {
		return runtime.Handle{}, err
	}
	dir := r.jobDir(spec.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return runtime.Handle{}, fmt.Errorf("job %s: %w", spec.ID, err)
	}
	hostfile := filepath.Join(dir, "mpi_hostfile")
	if err := os.WriteFile(hostfile, []byte(runtime.Hostfile(spec)), 0o644); err != nil {
		return runtime.Handle{}, fmt.Errorf("job %s: %w", spec.ID, err)
	}
	cfg, hc, err := r.containerConfig(spec, hostfile)
	if err != nil {
		return runtime.Handle{}, err
	}
	uploadWorkDir(spec, cfg)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: "gpud-" + spec.ID})
	if err != nil {
		return runtime.Handle{}, fmt.Errorf("job %s: create container: %w", spec.ID, err)
	}
	if err := r.copyUpload(ctx, created.ID, spec, cfg.WorkingDir); err != nil {
		r.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
		return runtime.Handle{}, fmt.Errorf("job %s: %w", spec.ID, err)
	}
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		r.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
		return runtime.Handle{}, fmt.Errorf("job %s: start container: %w", spec.ID, err)
	}
	if !needsInspect(spec) {
		// Every published port is fixed: the handle is known without
		// another round trip to the engine.
		return runtime.Handle{JobID: spec.ID, ID: created.ID, StartedAt: time.Now().UTC(), Ports: spec.Ports}, nil
	}
	ins, err := r.cli.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		return runtime.Handle{}, fmt.Errorf("job %s: inspect container: %w", spec.ID, err)
	}
	return handleOf(spec.ID, ins.Container), nil
}

// needsInspect reports whether the engine must be asked which host ports
// it bound (some port lets the engine pick).
func needsInspect(spec api.JobSpec) bool {
	if spec.HostNetwork {
		return false
	}
	for _, p := range spec.Ports {
		if p.Host == 0 {
			return true
		}
	}
	return false
}

func (r *Runtime) ensureImage(ctx context.Context, spec api.JobSpec, pulling func()) error {
	if _, err := r.cli.ImageInspect(ctx, spec.Image); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("job %s: inspect image %s: %w", spec.ID, spec.Image, err)
	}
	if pulling != nil {
		pulling()
	}
	var opts client.ImagePullOptions
	if a := spec.RegistryAuth; a != nil {
		enc, err := authconfig.Encode(registry.AuthConfig{Username: a.Username, Password: a.Password, ServerAddress: a.Server})
		if err != nil {
			return fmt.Errorf("job %s: registry auth: %w", spec.ID, err)
		}
		opts.RegistryAuth = enc
	}
	resp, err := r.cli.ImagePull(ctx, spec.Image, opts)
	if err != nil {
		return fmt.Errorf("job %s: pull %s: %w", spec.ID, spec.Image, err)
	}
	defer resp.Close()
	if err := resp.Wait(ctx); err != nil {
		return fmt.Errorf("job %s: pull %s: %w", spec.ID, spec.Image, err)
	}
	return nil
}

// containerConfig translates a JobSpec into the engine's create request.
func (r *Runtime) containerConfig(spec api.JobSpec, hostfile string) (*container.Config, *container.HostConfig, error) {
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManaged] = "true"
	labels[LabelAgent] = r.cfg.AgentID
	labels[LabelJob] = spec.ID
	labels[LabelRun] = spec.RunName
	cfg := &container.Config{
		Image:      spec.Image,
		Env:        runtime.Environment(spec, hostfileInContainer),
		Cmd:        runtime.ShellCommand(spec),
		WorkingDir: containerWorkDir(spec.WorkingDir),
		User:       spec.User,
		Labels:     labels,
	}
	switch {
	case len(spec.Entrypoint) > 0:
		// dstack's entrypoint: it replaces the image's, and the commands
		// are its arguments, not shell lines (nor is the image's CMD).
		cfg.Entrypoint, cfg.Cmd = spec.Entrypoint, append([]string{}, spec.Commands...)
	case len(spec.Commands) > 0:
		cfg.Entrypoint = []string{} // the shell runs the commands, not the image's entrypoint
	}
	// An init process as PID 1 reaps zombies and lets the job's shell be
	// signalled like anywhere else (PID 1 ignores signals it has no handler for).
	withInit := true
	hc := &container.HostConfig{
		Init:       &withInit,
		Privileged: spec.Privileged,
		ShmSize:    int64(spec.ShmSize),
		Mounts:     []mount.Mount{{Type: mount.TypeBind, Source: hostfile, Target: hostfileInContainer, ReadOnly: true}},
	}
	hc.Resources.Memory = int64(spec.Memory)
	if spec.Memory > 0 {
		hc.Resources.MemorySwap = int64(spec.Memory) // no swap beyond the limit: going over is an OOM kill
	}
	hc.Resources.NanoCPUs = int64(spec.CPUs * 1e9)
	for _, v := range spec.Volumes {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: v.HostPath, Target: v.Path, ReadOnly: v.ReadOnly})
	}
	if spec.GPUs.MPSPipeDir != "" {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: spec.GPUs.MPSPipeDir, Target: spec.GPUs.MPSPipeDir})
		hc.IpcMode = container.IPCModeHost // MPS clients talk to the daemon over host IPC
	}
	if len(spec.GPUs.Devices) > 0 && r.useDeviceRequests() {
		hc.Resources.DeviceRequests = []container.DeviceRequest{{
			Driver: "nvidia", DeviceIDs: spec.GPUs.Devices, Capabilities: [][]string{{"gpu"}},
		}}
	}
	if spec.HostNetwork {
		hc.NetworkMode = network.NetworkHost
		return cfg, hc, nil
	}
	cfg.ExposedPorts = network.PortSet{}
	hc.PortBindings = network.PortMap{}
	for _, p := range spec.Ports {
		proto := strings.ToLower(p.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		port, err := network.ParsePort(strconv.Itoa(p.Container) + "/" + proto)
		if err != nil {
			return nil, nil, fmt.Errorf("job %s: port %d: %w", spec.ID, p.Container, err)
		}
		b := network.PortBinding{}
		if p.Host > 0 {
			b.HostPort = strconv.Itoa(p.Host)
		}
		if p.HostIP != "" {
			ip, err := netip.ParseAddr(p.HostIP)
			if err != nil {
				return nil, nil, fmt.Errorf("job %s: port %d host_ip: %w", spec.ID, p.Container, err)
			}
			b.HostIP = ip
		}
		cfg.ExposedPorts[port] = struct{}{}
		hc.PortBindings[port] = append(hc.PortBindings[port], b)
	}
	return cfg, hc, nil
}

// legacyRepoDir is where dstack puts a relative working_dir in the
// container (its repo directory before 0.20), as Docker takes only
// absolute ones.
const legacyRepoDir = "/workflow"

// containerWorkDir is the container's working directory for a spec's
// working_dir: as is when absolute, under legacyRepoDir when relative,
// the image's own when empty. The engine makes it if the image lacks it.
func containerWorkDir(dir string) string {
	if dir == "" || path.IsAbs(dir) {
		return dir
	}
	return path.Join(legacyRepoDir, dir)
}

func (r *Runtime) useDeviceRequests() bool {
	switch r.cfg.GPUMode {
	case GPUModeDeviceRequests:
		return true
	case GPUModeEnv:
		return false
	default:
		return r.nvidia
	}
}

// handleOf reads the job's handle (start time, bound ports) off an inspect.
func handleOf(jobID string, c container.InspectResponse) runtime.Handle {
	h := runtime.Handle{JobID: jobID, ID: c.ID}
	if c.State != nil {
		h.StartedAt = parseDockerTime(c.State.StartedAt)
	}
	if c.NetworkSettings != nil {
		for port, binds := range c.NetworkSettings.Ports {
			for _, b := range binds {
				hp, _ := strconv.Atoi(b.HostPort)
				if hp == 0 {
					continue
				}
				p := api.JobPort{Container: int(port.Num()), Host: hp, Protocol: string(port.Proto())}
				if b.HostIP.IsValid() && !b.HostIP.IsUnspecified() {
					p.HostIP = b.HostIP.String()
				}
				// The engine lists one binding per address family; report the port once.
				if !slices.Contains(h.Ports, p) {
					h.Ports = append(h.Ports, p)
				}
			}
		}
	}
	return h
}
