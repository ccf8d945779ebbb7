package kubernetes

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// containerName is the one container of every job pod.
const containerName = "job"

// gangLabels are the labels of every object a gang has.
func (b *Backend) gangLabels(g plugins.Gang) map[string]string {
	l := map[string]string{labelGang: labelValue(g.ID), labelServer: b.cfg.ServerID}
	if g.Project != "" {
		l[labelProject] = labelValue(g.Project)
	}
	return l
}

// podHost is rank's pod name and hostname; with the headless Service
// (named base) it resolves as podHost(base, rank).base.<namespace>.svc.
func podHost(base string, rank int) string { return base + "-" + strconv.Itoa(rank) }

// jobGPUs is how many whole GPUs a job asks for.
func jobGPUs(spec api.JobSpec) int {
	if n := len(spec.GPUs.Devices); n > 0 {
		return n
	}
	return max(0, spec.Cluster.GPUsPerNode)
}

// clusterEnv is the multi-node environment of DESIGN.md §5 under its
// DSTACK_ and GPUD_ names, as the agent sets it (agent/runtime/env.go),
// with the pods' stable DNS names where the agent has host addresses:
// pod IPs are not known before the pods exist, the names are.
func (b *Backend) clusterEnv(spec api.JobSpec, rank int, base string, nodes int) map[string]string {
	hosts := make([]string, nodes)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("%s.%s.%s.svc", podHost(base, i), base, b.cfg.Namespace)
	}
	gpus := jobGPUs(spec)
	env := map[string]string{}
	set := func(name, value string) {
		env["DSTACK_"+name] = value
		env["GPUD_"+name] = value
	}
	set("RUN_NAME", spec.RunName)
	set("NODE_RANK", strconv.Itoa(rank))
	set("NODES_NUM", strconv.Itoa(nodes))
	set("MASTER_NODE_IP", hosts[0])
	set("NODES_IPS", strings.Join(hosts, "\n"))
	set("GPUS_PER_NODE", strconv.Itoa(gpus))
	set("GPUS_NUM", strconv.Itoa(gpus*nodes))
	// The spec's own variables win, as on the agent.
	maps.Copy(env, spec.Env)
	return env
}

// command is the container's command and args: the entrypoint with the
// commands as its arguments, or the shell running the commands joined by
// " && " (agent/runtime.ShellCommand), or the image's own.
func command(spec api.JobSpec) (cmd, args []string) {
	if len(spec.Entrypoint) > 0 {
		return spec.Entrypoint, spec.Commands
	}
	if len(spec.Commands) == 0 {
		return nil, nil
	}
	shell := spec.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	return []string{shell, "-c", strings.Join(spec.Commands, " && ")}, nil
}

// pod builds rank's pod of the gang; the owner is filled in at creation.
func (b *Backend) pod(g plugins.Gang, rank int, base string, pullSecret string) (*corev1.Pod, error) {
	spec := g.Jobs[rank]
	if spec.ID == "" {
		return nil, fmt.Errorf("kubernetes backend: job %d of gang %s has no id", rank, g.ID)
	}
	if spec.Image == "" {
		return nil, fmt.Errorf("kubernetes backend: job %s has no image: a pod needs one (set image:)", spec.ID)
	}
	labels := b.gangLabels(g)
	labels[labelJob] = labelValue(spec.ID)
	labels[labelRank] = strconv.Itoa(rank)
	ann := map[string]string{annGangID: g.ID, annJobID: spec.ID}
	for k, v := range spec.Labels {
		if _, ours := labels[k]; !ours {
			labels[k] = labelValue(v)
		}
	}
	c := corev1.Container{
		Name:       containerName,
		Image:      spec.Image,
		WorkingDir: spec.WorkingDir,
		Resources:  corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
	}
	c.Command, c.Args = command(spec)
	env := b.clusterEnv(spec, rank, base, len(g.Jobs))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: env[k]})
	}
	if spec.CPUs > 0 {
		q := *resource.NewMilliQuantity(int64(spec.CPUs*1000+0.5), resource.DecimalSI)
		c.Resources.Requests[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceCPU] = q, q
	}
	if spec.Memory > 0 {
		q := *resource.NewQuantity(int64(spec.Memory), resource.BinarySI)
		c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory] = q, q
	}
	if share := spec.GPUs.Share; share > 0 && share < 1 {
		if b.cfg.KAI == nil {
			return nil, fmt.Errorf("kubernetes backend: job %s asks for %.2f of a GPU: fractional GPUs need KAI Scheduler (set kai: in the backend configuration)", spec.ID, share)
		}
		ann[b.cfg.KAI.FractionAnnotation] = strconv.FormatFloat(share, 'f', -1, 64)
	} else if n := jobGPUs(spec); n > 0 {
		q := *resource.NewQuantity(int64(n), resource.DecimalSI)
		gpu := corev1.ResourceName(b.cfg.GPUResource)
		c.Resources.Requests[gpu], c.Resources.Limits[gpu] = q, q
	}
	for _, p := range spec.Ports {
		proto := corev1.ProtocolTCP
		if strings.EqualFold(p.Protocol, "udp") {
			proto = corev1.ProtocolUDP
		}
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(p.Container), Protocol: proto})
	}
	if spec.Privileged && !b.cfg.AllowPrivileged {
		return nil, fmt.Errorf("kubernetes backend: job %s is privileged (root on the node): the backend's configuration does not allow it (allow_privileged: true)", spec.ID)
	}
	sc, err := securityContext(spec)
	if err != nil {
		return nil, err
	}
	c.SecurityContext = sc
	grace := int64(10)
	if spec.StopDuration > 0 {
		grace = int64((spec.StopDuration + time.Second - 1) / time.Second)
	}
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podHost(base, rank), Namespace: b.cfg.Namespace, Labels: labels, Annotations: ann},
		Spec: corev1.PodSpec{
			Hostname:                      podHost(base, rank),
			Subdomain:                     base,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			SchedulerName:                 b.cfg.SchedulerName,
			// A job gets no credentials for the cluster it runs on.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
		},
	}
	for _, s := range b.cfg.ImagePullSecrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if pullSecret != "" {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: pullSecret})
	}
	if k := b.cfg.KAI; k != nil {
		if g.Queue != "" {
			labels[k.QueueLabel] = labelValue(g.Queue)
		}
		ann[k.PodGroupAnnotation] = base
		ann[k.MinMemberAnnotation] = strconv.Itoa(len(g.Jobs))
	}
	if spec.ShmSize > 0 {
		size := *resource.NewQuantity(int64(spec.ShmSize), resource.BinarySI)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "dshm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "dshm", MountPath: "/dev/shm"})
	}
	for i, v := range spec.Volumes {
		name := "vol-" + strconv.Itoa(i)
		switch {
		case v.Managed != nil:
			// A backend volume: Managed.ID is the id CreateVolume
			// returned, the claim's name.
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Managed.ID, ReadOnly: v.ReadOnly}}})
		case v.HostPath != "":
			if !b.hostPathAllowed(v.HostPath) {
				if v.Optional {
					continue
				}
				return nil, fmt.Errorf("kubernetes backend: job %s: host path %s is not under the backend's host_path_prefixes %v: use a network volume (a claim) instead", spec.ID, v.HostPath, b.cfg.HostPathPrefixes)
			}
			t := corev1.HostPathDirectoryOrCreate
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: v.HostPath, Type: &t}}})
		default:
			return nil, fmt.Errorf("kubernetes backend: job %s: volume %d at %s has neither a claim nor a host path", spec.ID, i, v.Path)
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: v.Path, ReadOnly: v.ReadOnly})
	}
	p.Spec.Containers = []corev1.Container{c}
	return p, nil
}

// securityContext maps the job's user and privileged flag; a user name
// (not a uid) cannot be expressed in a pod and is refused by name.
func securityContext(spec api.JobSpec) (*corev1.SecurityContext, error) {
	if spec.User == "" && !spec.Privileged {
		return nil, nil
	}
	sc := &corev1.SecurityContext{}
	if spec.Privileged {
		t := true
		sc.Privileged = &t
	}
	if spec.User != "" {
		u, g, hasGroup := strings.Cut(spec.User, ":")
		uid, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kubernetes backend: job %s: user %q: a pod runs as a numeric uid (or uid:gid), not a user name", spec.ID, spec.User)
		}
		sc.RunAsUser = &uid
		if hasGroup {
			gid, err := strconv.ParseInt(g, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("kubernetes backend: job %s: user %q: the group must be a numeric gid", spec.ID, spec.User)
			}
			sc.RunAsGroup = &gid
		}
	}
	return sc, nil
}

// pullSecret is the dockerconfigjson Secret of a job's registry login.
func (b *Backend) pullSecret(g plugins.Gang, base string) (*corev1.Secret, error) {
	for _, j := range g.Jobs {
		a := j.RegistryAuth
		if a == nil {
			continue
		}
		server := a.Server
		if server == "" {
			server = "https://index.docker.io/v1/"
		}
		cfg := map[string]any{"auths": map[string]any{server: map[string]string{
			"username": a.Username, "password": a.Password,
			"auth": base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password)),
		}}}
		data, err := json.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: base + "-pull", Namespace: b.cfg.Namespace, Labels: b.gangLabels(g)},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: data},
		}, nil
	}
	return nil, nil
}

// hostPathAllowed reports whether p lies under one of the configured
// prefixes (after cleaning, so ".." cannot climb out).
func (b *Backend) hostPathAllowed(p string) bool {
	p = path.Clean(p)
	for _, pre := range b.cfg.HostPathPrefixes {
		if pre == "/" || p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}
