package daemon

import (
	"fmt"
	"strings"

	"gpud.dev/gpud/api"
)

// The plan's checks and notes of managed volumes: a `type: volume`'s
// backend, and a run's `volumes: - name:` entries.

// checkVolumeBackend refuses a volume backend that could name neither
// gpud's hosts nor a project's backend; which backend a name resolves to
// is the apply's to say (volumeBackendOf), with the project at hand.
func checkVolumeBackend(fc *fieldCheck, _ string) *refusal {
	b := fc.cfg.Volume.Backend
	if volumeBackend(b) != "" || backendNameRE.MatchString(strings.ToLower(b)) {
		return nil
	}
	return &refusal{Why: fmt.Sprintf("%q names no backend", b),
		Instead: "write backend: local (the server's host), ssh (an SSH fleet's hosts), registered (hosts registered with gpud agent), or a backend of the project that keeps volumes (kubernetes, or its name)"}
}

// backendVolumeOnly refuses a field of claims on a gpud host volume.
func backendVolumeOnly(what string) fieldRule {
	return fieldRule{Proof: []string{"daemon.TestKubernetesVolumeIsAClaimThatItsRunsMount", "daemon.TestKubernetesVolumeBadInputIsRefusedAndLosesNothing"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if volumeBackend(fc.cfg.Volume.Backend) == "" {
				return nil
			}
			return &refusal{Why: "a gpud host volume (backend " + fc.cfg.Volume.Backend + ") is a directory on a host: it has no " + what,
				Instead: "drop it, or make the volume on the project's Kubernetes backend (backend: kubernetes, or the backend's name)"}
		}}
}

// volumeRefusal refuses a host volume field by name.
func volumeRefusal(why, instead string) fieldRule {
	return fieldRule{All: &refusal{Why: why, Instead: instead}}
}

// managedVolumeRules are the fields of `type: volume`.
var managedVolumeRules = fieldRules{
	"volume:type":                  {Proof: []string{"daemon.TestManagedVolumeSharesDataBetweenRunsOnDocker"}},
	"volume:name":                  {Proof: []string{"daemon.TestManagedVolumeSharesDataBetweenRunsOnDocker"}},
	"volume:backend":               {Proof: []string{"daemon.TestManagedVolumeSharesDataBetweenRunsOnDocker", "daemon.TestKubernetesVolumeIsAClaimThatItsRunsMount"}, Check: checkVolumeBackend},
	"volume:size":                  {Proof: []string{"daemon.TestManagedVolumeSizeKeepsItOffHostsWithLessFreeDisk", "daemon.TestKubernetesVolumeIsAClaimThatItsRunsMount"}},
	"volume:auto_cleanup_duration": {Proof: []string{"daemon.TestManagedVolumeUnusedForItsAutoCleanupDurationIsDeleted", "daemon.TestKubernetesVolumeIsAClaimThatItsRunsMount"}},
	"volume:region": volumeRefusal("a gpud host volume lives on one host, not in a region",
		"drop region; the volume lives on the host of the first job that uses it (choose that host with the run's fleets or instances)"),
	"volume:availability_zone": volumeRefusal("a gpud host volume lives on one host, not in an availability zone",
		"drop availability_zone; the volume lives on the host of the first job that uses it (choose that host with the run's fleets or instances)"),
	"volume:volume_id": volumeRefusal("gpud registers existing volumes by their own field: a host volume is a directory its agent makes, a Kubernetes volume a claim",
		"drop volume_id; on a Kubernetes backend write claim_name: CLAIM to register an existing claim, or mount an existing host directory as an instance volume (volumes: - /data/x:/x)"),
	"volume:claim_name":         backendVolumeOnly("persistent volume claim"),
	"volume:storage_class_name": backendVolumeOnly("storage class"),
	"volume:access_modes":       backendVolumeOnly("access modes (its jobs on its one host mount it read-write)"),
	"volume:tags": volumeRefusal("a host volume is a directory: there is no cloud resource to tag",
		"drop tags"),
}

// checkManagedVolumeName refuses a `name:` volume entry whose name is
// not a volume's name on every node, or names no volume of the project,
// or one that lives on a host this run may not use.
func checkManagedVolumeName(fc *fieldCheck, path string) *refusal {
	_, v, ok := volumeAt(fc, path)
	if !ok || v.Name == "" {
		return nil
	}
	nodes := jobLayout(fc.cfg)
	replicaNodes := len(nodes)
	if fc.cfg.Service != nil {
		replicaNodes = 1
	}
	for _, n := range nodes {
		name, err := volumeName(v, n, replicaNodes)
		if err != nil {
			return &refusal{Why: err.Error(), Instead: "name a volume, optionally with ${{ dstack.node_rank }} for one per node"}
		}
		if fc.srv == nil {
			continue
		}
		rec, err := fc.srv.store.Volumes().Get(volumeRecordID(fc.project, name))
		if err != nil {
			return &refusal{Why: fmt.Sprintf("volume %q does not exist in project %q", name, fc.project),
				Instead: "`gpud apply` a `type: volume` configuration named " + name + " first (backend: local, ssh, registered, or the project's Kubernetes backend)"}
		}
		st, err := volumeStateOf(rec)
		if err != nil {
			return &refusal{Why: err.Error(), Instead: "delete the volume and apply it again"}
		}
		if st.onBackend() {
			if rf := fc.checkBackendVolumeRun(name, st); rf != nil {
				return rf
			}
			continue
		}
		if st.Instance == "" {
			continue
		}
		if _, err := fc.srv.store.Instances().Get(st.Instance); err != nil {
			return &refusal{Why: fmt.Sprintf("volume %q lived on host %s, which is gone, and its data with it", name, st.Instance),
				Instead: "gpud volume delete " + name + ", then apply it again: the next job makes it anew"}
		}
		if len(fc.hosts) > 0 && !fc.anyHost(func(h candidateHost, _ fieldTarget) bool { return h.id == st.Instance }) {
			return &refusal{Why: fmt.Sprintf("volume %q lives on host %s, which this run may not use", name, st.Instance),
				Instead: "let the run use that host (its fleets, backends, instances), or use another volume"}
		}
		if other, host := fc.otherVolumeHost(v, n, replicaNodes, st.Instance); other != "" {
			return &refusal{Why: fmt.Sprintf("volume %q lives on host %s and volume %q on host %s, and one job runs on one host", name, st.Instance, other, host),
				Instead: "mount volumes that live on one host (or new ones) in the same job"}
		}
	}
	return nil
}

// otherVolumeHost finds another `name:` volume of the run that node n's
// job mounts and that lives on a host other than host.
func (fc *fieldCheck) otherVolumeHost(self api.VolumeMount, n nodeLayout, nodes int, host string) (string, string) {
	for _, v := range fc.run.Volumes {
		if v.Name == "" || v == self {
			continue
		}
		name, err := volumeName(v, n, nodes)
		if err != nil {
			continue
		}
		rec, err := fc.srv.store.Volumes().Get(volumeRecordID(fc.project, name))
		if err != nil {
			continue
		}
		if st, err := volumeStateOf(rec); err == nil && st.Instance != "" && st.Instance != host {
			return name, st.Instance
		}
	}
	return "", ""
}

// noteManagedVolumes says, in the plan, where the run's volumes live and
// that its jobs follow them there.
func noteManagedVolumes(fc *fieldCheck) string {
	if fc.srv == nil {
		return ""
	}
	var parts []string
	nodes := jobLayout(fc.cfg)
	replicaNodes := len(nodes)
	if fc.cfg.Service != nil {
		replicaNodes = 1
	}
	seen := map[string]bool{}
	hostVolumes := false
	for _, v := range fc.run.Volumes {
		if v.Name == "" {
			continue
		}
		for _, n := range nodes {
			name, err := volumeName(v, n, replicaNodes)
			if err != nil || seen[name] {
				continue
			}
			seen[name] = true
			rec, err := fc.srv.store.Volumes().Get(volumeRecordID(fc.project, name))
			if err != nil {
				continue
			}
			st, err := volumeStateOf(rec)
			if err != nil {
				continue
			}
			if !st.onBackend() {
				hostVolumes = true
			}
			switch {
			case st.onBackend():
				parts = append(parts, fmt.Sprintf("volume %s is the claim %s of the backend %s (%s), so jobs that use it run only on that backend", name, st.VolumeID, st.BackendName, st.BackendType))
			case st.Instance != "":
				parts = append(parts, fmt.Sprintf("volume %s lives on host %s, so jobs that use it run only there", name, st.Instance))
			default:
				parts = append(parts, fmt.Sprintf("volume %s is on no host yet: it is made on the %s host the first job that uses it lands on, and later jobs follow it there", name, st.Backend))
			}
		}
	}
	if hostVolumes {
		parts = append(parts, "a volume is mounted by Docker: jobs that use one run in containers")
	}
	return strings.Join(parts, "; ")
}
