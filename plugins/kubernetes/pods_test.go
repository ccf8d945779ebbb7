package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// unitBackend builds pods without a cluster.
func unitBackend(cfg Config) *Backend { return &Backend{cfg: cfg.withDefaults()} }

func TestPodRefusesWhatTheNodeWouldPayFor(t *testing.T) {
	b := unitBackend(Config{})
	priv := job("p-0", 0, "true")
	priv.Privileged = true
	if _, err := b.pod(plugins.Gang{ID: "p", Jobs: []api.JobSpec{priv}}, 0, "gpud-p", ""); err == nil || !strings.Contains(err.Error(), "allow_privileged") {
		t.Fatalf("privileged without allow_privileged: %v", err)
	}
	for _, hp := range []string{"/etc", "/data/../etc", "/database"} {
		j := job("h-0", 0, "true")
		j.Volumes = []api.JobVolume{{HostPath: hp, Path: "/mnt"}}
		b := unitBackend(Config{HostPathPrefixes: []string{"/data"}})
		if _, err := b.pod(plugins.Gang{ID: "h", Jobs: []api.JobSpec{j}}, 0, "gpud-h", ""); err == nil || !strings.Contains(err.Error(), "host_path_prefixes") {
			t.Errorf("host path %s: %v", hp, err)
		}
	}
	j := job("h-0", 0, "true")
	j.Volumes = []api.JobVolume{{HostPath: "/data/cache", Path: "/cache"}, {HostPath: "/etc", Path: "/x", Optional: true}}
	b = unitBackend(Config{HostPathPrefixes: []string{"/data"}, AllowPrivileged: true})
	j.Privileged = true
	p, err := b.pod(plugins.Gang{ID: "h", Jobs: []api.JobSpec{j}}, 0, "gpud-h", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].HostPath.Path != "/data/cache" || !*p.Spec.Containers[0].SecurityContext.Privileged {
		t.Fatalf("volumes %+v", p.Spec.Volumes)
	}
}

func TestPodCarriesKAIAndTheJobsSettings(t *testing.T) {
	b := unitBackend(Config{KubeconfigData: "x", SchedulerName: "kai-scheduler", KAI: &KAIConfig{}, ImagePullSecrets: []string{"regcred"}})
	j := job("k-0", 0, "python a.py")
	j.GPUs.Share = 0.5
	j.User = "1000:1001"
	j.ShmSize = api.GB
	j.Entrypoint = []string{"/bin/bash", "-lc"}
	j.RegistryAuth = &api.JobRegistryAuth{Username: "u", Password: "p"}
	g := plugins.Gang{ID: "k", Queue: "research", Jobs: []api.JobSpec{j}}
	secret, err := b.pullSecret(g, "gpud-k")
	if err != nil || secret == nil || secret.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("pull secret %+v %v", secret, err)
	}
	p, err := b.pod(g, 0, "gpud-k", secret.Name)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[0]
	if p.Labels["kai.scheduler/queue"] != "research" || p.Annotations["pod-group-name"] != "gpud-k" || p.Annotations["gpu-fraction"] != "0.5" || p.Annotations["kai.scheduler/min-member"] != "1" {
		t.Errorf("KAI labels %v annotations %v", p.Labels, p.Annotations)
	}
	if _, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
		t.Errorf("a fraction asks for no whole GPU: %v", c.Resources.Limits)
	}
	if p.Spec.SchedulerName != "kai-scheduler" || len(p.Spec.ImagePullSecrets) != 2 || *c.SecurityContext.RunAsUser != 1000 || *c.SecurityContext.RunAsGroup != 1001 {
		t.Errorf("pod spec %+v", p.Spec)
	}
	if strings.Join(c.Command, " ") != "/bin/bash -lc" || strings.Join(c.Args, " ") != "python a.py" {
		t.Errorf("entrypoint %v args %v", c.Command, c.Args)
	}
	if p.Spec.Volumes[0].EmptyDir.Medium != corev1.StorageMediumMemory || c.VolumeMounts[0].MountPath != "/dev/shm" {
		t.Errorf("shm %+v", p.Spec.Volumes)
	}
	if *p.Spec.AutomountServiceAccountToken || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod spec %+v", p.Spec)
	}
}
