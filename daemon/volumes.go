package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/api"
)

// This file holds instance volumes on the server's side (dstack's
// `volumes: - /host/path:/path` and `- instance_path: …`): the job's
// mounts, resolved per node; the host needs that keep a job on hosts
// whose admin allows its paths; and the plan's checks, which refuse what
// no host the run may use would mount. The agent checks again at start
// (agent.VolumePolicy). Network volumes (`name:`) need a backend's
// volume API and stay refused.

// volumeResolver answers the references a volume path may hold: the
// node's rank, the number of nodes and the replica number, as dstack
// interpolates them in volumes. Anything else is an error: a host path
// is neither sealed nor known before the job is built.
func volumeResolver(n nodeLayout, nodes int) func(api.Reference) (string, error) {
	return func(ref api.Reference) (string, error) {
		if ref.Namespace == api.NamespaceDstack {
			switch ref.Path {
			case "node_rank":
				return strconv.Itoa(n.rank), nil
			case "nodes_num":
				return strconv.Itoa(nodes), nil
			case "job_num":
				return strconv.Itoa(n.replica), nil
			}
		}
		return "", fmt.Errorf("a volume path takes only ${{ dstack.node_rank }}, ${{ dstack.nodes_num }} and ${{ dstack.job_num }}")
	}
}

// jobVolumes is one job's volumes with its node's values interpolated:
// instance volumes, and the project's managed volumes that `name:`
// entries resolve to (volumes_managed.go).
func (s *Server) jobVolumes(project string, vols []api.VolumeMount, n nodeLayout, nodes int) ([]api.JobVolume, error) {
	var out []api.JobVolume
	resolve := volumeResolver(n, nodes)
	for i, v := range vols {
		if v.InstancePath == "" {
			mv, err := s.managedVolume(project, i, v, n, nodes)
			if err != nil {
				return nil, err
			}
			out = append(out, mv)
			continue
		}
		host, err1 := api.Interpolate(v.InstancePath, resolve)
		path, err2 := api.Interpolate(v.Path, resolve)
		if err := errors.Join(err1, err2); err != nil {
			return nil, badField(fmt.Sprintf("configuration.volumes[%d]", i), "%v", err)
		}
		out = append(out, api.JobVolume{HostPath: host, Path: path, Optional: v.Optional})
	}
	return out, nil
}

// volumeNeeds sets what hosts a job with volumes needs: every host path
// of a volume that is not optional must be allowed by the host's admin,
// and a volume mounted elsewhere than its host path needs a container.
func volumeNeeds(n *hostNeeds, vols []api.JobVolume, image bool) {
	var paths []string
	for _, v := range vols {
		if v.Managed != nil {
			if v.Managed.Backend != "" {
				continue // a backend's claim: its backend (volumeHostNeeds)
			}
			// The agent's own directory, mounted at the path: only a
			// container can; its host is the volume's (volumeHostNeeds).
			n.Remap, n.Image = true, image
			continue
		}
		if filepath.Clean(v.HostPath) != filepath.Clean(v.Path) {
			n.Remap, n.Image = true, image
		}
		if !v.Optional {
			paths = append(paths, v.HostPath)
		}
	}
	n.Volumes = strings.Join(paths, "\n")
}

// volumesMatch reports whether a host with info can honour needs' volumes.
func volumesMatch(info api.HostInfo, n hostNeeds) bool {
	if n.Remap && runtimeOf(info.Runtime, n.Image) == targetProcess {
		return false
	}
	if n.Volumes == "" {
		return true
	}
	for _, p := range strings.Split(n.Volumes, "\n") {
		if agent.CheckVolumePath(p, info.VolumePrefixes, info.VolumeDenied) != nil {
			return false
		}
	}
	return true
}

// volumeAt is the volume a field path like "volumes[2].instance_path"
// names.
func volumeAt(fc *fieldCheck, path string) (int, api.VolumeMount, bool) {
	rest, ok := strings.CutPrefix(path, "volumes[")
	if !ok {
		return 0, api.VolumeMount{}, false
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0, api.VolumeMount{}, false
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 || i >= len(fc.run.Volumes) {
		return 0, api.VolumeMount{}, false
	}
	return i, fc.run.Volumes[i], true
}

// volumeFix is what a user does about a host path no host allows.
const volumeFix = "ask the host's admin to allow a directory above it (gpud agent --allow-volume-prefix DIR; gpud serve --allow-volume-prefix DIR for the server's own host), use a path under one the hosts allow, or add optional: true to run without it where it is not allowed"

// checkVolumeHostPath refuses an instance_path that no host would mount
// (the root, a data dir, a `..` escape, a reference other than the
// node's), and, unless the volume is optional, one that no host the run
// may use allows.
func checkVolumeHostPath(fc *fieldCheck, path string) *refusal {
	_, v, ok := volumeAt(fc, path)
	if !ok {
		return nil
	}
	if strings.HasPrefix(v.InstancePath, "~") {
		return &refusal{Why: "a host path starting with ~ names no one host's directory", Instead: "write the absolute host path, like /data/cache"}
	}
	denied := []string{}
	if fc.srv != nil {
		denied = append(denied, fc.srv.opts.DataDir)
	}
	for _, h := range fc.hosts {
		denied = append(denied, h.info.VolumeDenied...)
	}
	nodes := jobLayout(fc.cfg)
	replicaNodes := len(nodes)
	if fc.cfg.Service != nil {
		replicaNodes = 1
	}
	var hostPaths []string
	for _, n := range nodes {
		p, err := api.Interpolate(v.InstancePath, volumeResolver(n, replicaNodes))
		if err != nil {
			return &refusal{Why: err.Error(), Instead: "use a fixed path or one of those references"}
		}
		if !slices.Contains(hostPaths, p) {
			hostPaths = append(hostPaths, p)
		}
	}
	for _, p := range hostPaths {
		if err := agent.CheckVolumePath(p, []string{"/"}, denied); err != nil {
			return &refusal{Why: strings.TrimPrefix(err.Error(), agent.ErrVolumeForbidden.Error()+": ") + ", so no host mounts it",
				Instead: "mount a directory of your data, like /data/cache, that a host's admin allows"}
		}
	}
	if v.Optional {
		return nil
	}
	for _, p := range hostPaths {
		if !fc.anyHost(func(h candidateHost, _ fieldTarget) bool {
			return agent.CheckVolumePath(p, h.info.VolumePrefixes, h.info.VolumeDenied) == nil
		}) {
			return &refusal{Why: fmt.Sprintf("no host this run may use lets jobs mount %s (%s)", p, allowedPrefixes(fc.hosts)), Instead: volumeFix}
		}
	}
	return nil
}

// allowedPrefixes says what the hosts allow, for a refusal.
func allowedPrefixes(hosts []candidateHost) string {
	var all []string
	for _, h := range hosts {
		for _, p := range h.info.VolumePrefixes {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	if len(all) == 0 {
		return "their admins allow no instance volumes"
	}
	slices.Sort(all)
	return "their admins allow " + strings.Join(all, ", ")
}

// checkVolumePath refuses a mount point that is not an absolute path
// inside the job, and one elsewhere than the host path where every host
// the run may use runs the job as a process (a process sees the host's
// paths as they are).
func checkVolumePath(fc *fieldCheck, path string) *refusal {
	_, v, ok := volumeAt(fc, path)
	if !ok {
		return nil
	}
	if !strings.HasPrefix(v.Path, "/") {
		return &refusal{Why: "the path inside the job must be absolute", Instead: "write it like /data"}
	}
	if filepath.Clean(v.Path) == "/" {
		return &refusal{Why: "a volume cannot replace the job's root directory", Instead: "mount it at a directory like /data"}
	}
	if v.Name != "" {
		if fc.namesBackendVolume(v) {
			return nil // a backend's claim, mounted into its pods (volumes_backend.go)
		}
		if fc.anyHost(func(_ candidateHost, rt fieldTarget) bool { return rt == targetDocker }) {
			return nil
		}
		return &refusal{Why: "a gpud volume lives in a directory its host's agent keeps, which only Docker can mount at " + v.Path + "; every host this run may use runs its jobs as processes",
			Instead: "give the run an image (image: ...) on a host with Docker, or mount a host directory at its own path as an instance volume (- /data/x:/data/x)"}
	}
	if v.InstancePath == "" || filepath.Clean(v.InstancePath) == filepath.Clean(v.Path) {
		return nil
	}
	if fc.anyHost(func(_ candidateHost, rt fieldTarget) bool { return rt == targetDocker }) {
		return nil
	}
	return &refusal{Why: "a process job sees the host's paths as they are: the process runtime cannot mount " + v.InstancePath + " at " + v.Path,
		Instead: "mount it at the same path (path: " + v.InstancePath + "), or run on a host with Docker"}
}

// noteOptionalVolumes says, in the plan, that an optional volume is
// skipped on hosts that do not allow its path.
func noteOptionalVolumes(fc *fieldCheck) string {
	for _, v := range fc.run.Volumes {
		if v.Optional && v.InstancePath != "" {
			return "optional volumes are mounted where the host's admin allows their path, and skipped (the job runs without them) where not"
		}
	}
	return ""
}

// volumesFor leaves out the optional volumes the instance's host does not
// allow, so an agent older than its volume policy (which mounts whatever
// it is sent) never mounts one; the others are the agent's to check.
func (s *Server) volumesFor(instance string, vols []api.JobVolume) []api.JobVolume {
	if len(vols) == 0 {
		return vols
	}
	inst, err := s.store.Instances().Get(instance)
	if err != nil {
		return vols
	}
	st, err := s.instanceSpec(inst)
	if err != nil {
		return vols
	}
	out := make([]api.JobVolume, 0, len(vols))
	for _, v := range vols {
		if v.Managed == nil && v.Optional && agent.CheckVolumePath(v.HostPath, st.Host.VolumePrefixes, st.Host.VolumeDenied) != nil {
			continue
		}
		out = append(out, v)
	}
	return out
}
