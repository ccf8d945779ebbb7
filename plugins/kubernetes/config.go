package kubernetes

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"gpud.dev/gpud/internal/netguard"
)

// Config is a Kubernetes backend's configuration (a project's
// `backends: [{type: kubernetes, ...}]` entry).
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; KubeconfigData is one
	// inline (YAML). With neither, InCluster uses the pod's service
	// account (gpud itself running in the cluster).
	Kubeconfig     string `json:"kubeconfig,omitempty"`
	KubeconfigData string `json:"kubeconfig_data,omitempty"`
	InCluster      bool   `json:"in_cluster,omitempty"`
	// Context selects a kubeconfig context; empty is its current one.
	Context string `json:"context,omitempty"`
	// Namespace holds everything the backend creates; default "gpud".
	// Check creates it when it is missing.
	Namespace string `json:"namespace,omitempty"`
	// SchedulerName is the pods' spec.schedulerName (empty: the cluster's
	// default scheduler; "kai-scheduler" with KAI).
	SchedulerName string `json:"scheduler_name,omitempty"`
	// KAI passes queues, gangs and GPU fractions to KAI Scheduler.
	KAI *KAIConfig `json:"kai,omitempty"`
	// ImagePullSecrets are the names of Secrets in Namespace the pods pull
	// their images with.
	ImagePullSecrets []string `json:"image_pull_secrets,omitempty"`
	// AllowPrivileged lets jobs run privileged pods (root on the node);
	// without it a privileged job is refused, as an agent refuses one
	// without --allow-privileged.
	AllowPrivileged bool `json:"allow_privileged,omitempty"`
	// HostPathPrefixes are the node directories under which jobs may
	// mount instance volumes (hostPath), like an agent's
	// --allow-volume-prefix; none by default, so a job cannot read the
	// node's files.
	HostPathPrefixes []string `json:"host_path_prefixes,omitempty"`
	// GPUResource is the extended resource a job's GPUs are requested as:
	// nvidia.com/gpu (default) or amd.com/gpu.
	GPUResource string `json:"gpu_resource,omitempty"`
	// ServerID tells this server's objects from another gpud's in the same
	// namespace (label gpud.dev/server); default "gpud".
	ServerID string `json:"server_id,omitempty"`
	// Region is reported on offers; default the nodes'
	// topology.kubernetes.io/region label.
	Region string `json:"region,omitempty"`
	// TimeoutSeconds bounds each API call that is not a stream; default 30.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// DenyServerNetwork makes every connection to the API server (and a
	// proxy) refuse the server host's own and link-local addresses
	// (internal/netguard) once resolved. The server sets it on a backend
	// a project admin adds, so a name that resolves there later (DNS
	// rebinding) reaches nothing the add-time check refused.
	DenyServerNetwork bool `json:"deny_server_network,omitempty"`
}

// KAIConfig names how a cluster's KAI Scheduler reads queues and gangs.
type KAIConfig struct {
	// QueueLabel is the pod label naming the KAI queue (default
	// kai.scheduler/queue); its value is the gang's queue.
	QueueLabel string `json:"queue_label,omitempty"`
	// PodGroupAnnotation is the pod annotation naming the pod group that
	// gang-schedules the gang's pods (default pod-group-name).
	PodGroupAnnotation string `json:"pod_group_annotation,omitempty"`
	// MinMemberAnnotation carries the gang's size (default
	// kai.scheduler/min-member); empty in the JSON keeps the default.
	MinMemberAnnotation string `json:"min_member_annotation,omitempty"`
	// FractionAnnotation asks for a fraction of one GPU (default
	// gpu-fraction): a job with a GPU share below 1 gets it instead of
	// a whole nvidia.com/gpu.
	FractionAnnotation string `json:"fraction_annotation,omitempty"`
}

const (
	labelGang    = "gpud.dev/gang"
	labelJob     = "gpud.dev/job"
	labelProject = "gpud.dev/project"
	labelServer  = "gpud.dev/server"
	labelRank    = "gpud.dev/node-rank"
	labelVolume  = "gpud.dev/volume"
	annGangID    = "gpud.dev/gang-id"
	annJobID     = "gpud.dev/job-id"
	annVolumeID  = "gpud.dev/volume-name"
	// RuntimeName is what JobStatus.Runtime says for pods.
	RuntimeName = "kubernetes"
)

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = "gpud"
	}
	if c.GPUResource == "" {
		c.GPUResource = "nvidia.com/gpu"
	}
	if c.ServerID == "" {
		c.ServerID = "gpud"
	}
	if c.TimeoutSeconds <= 0 {
		c.TimeoutSeconds = 30
	}
	if c.KAI != nil {
		k := *c.KAI
		if k.QueueLabel == "" {
			k.QueueLabel = "kai.scheduler/queue"
		}
		if k.PodGroupAnnotation == "" {
			k.PodGroupAnnotation = "pod-group-name"
		}
		if k.MinMemberAnnotation == "" {
			k.MinMemberAnnotation = "kai.scheduler/min-member"
		}
		if k.FractionAnnotation == "" {
			k.FractionAnnotation = "gpu-fraction"
		}
		c.KAI = &k
	}
	return c
}

// validate refuses what the backend cannot honour, naming the field.
func (c Config) validate() error {
	n := 0
	for _, set := range []bool{c.Kubeconfig != "", c.KubeconfigData != "", c.InCluster} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("kubernetes backend: set only one of kubeconfig, kubeconfig_data and in_cluster")
	}
	if n == 0 {
		return errors.New("kubernetes backend: no cluster: set kubeconfig (a file path), kubeconfig_data (its contents) or in_cluster: true")
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return fmt.Errorf("kubernetes backend: namespace %q: %s", c.Namespace, errs[0])
	}
	if c.GPUResource != "nvidia.com/gpu" && c.GPUResource != "amd.com/gpu" {
		return fmt.Errorf("kubernetes backend: gpu_resource %q: use nvidia.com/gpu or amd.com/gpu", c.GPUResource)
	}
	if errs := validation.IsValidLabelValue(c.ServerID); len(errs) > 0 || c.ServerID == "" {
		return fmt.Errorf("kubernetes backend: server_id %q is not a label value", c.ServerID)
	}
	for _, p := range c.HostPathPrefixes {
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			return fmt.Errorf("kubernetes backend: host_path_prefixes %q: an absolute, clean path", p)
		}
	}
	for _, s := range c.ImagePullSecrets {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return fmt.Errorf("kubernetes backend: image_pull_secrets %q: %s", s, errs[0])
		}
	}
	return nil
}

// restConfig turns the configuration into a client configuration; the
// errors name the kubeconfig and what is wrong with it.
func (c Config) restConfig() (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	switch {
	case c.InCluster:
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes backend: in_cluster: %w", err)
		}
	case c.Kubeconfig != "":
		if _, statErr := os.Stat(c.Kubeconfig); statErr != nil {
			return nil, fmt.Errorf("kubernetes backend: kubeconfig %s: %w", c.Kubeconfig, statErr)
		}
		raw, loadErr := clientcmd.LoadFromFile(c.Kubeconfig)
		if loadErr != nil {
			return nil, fmt.Errorf("kubernetes backend: kubeconfig %s is not a kubeconfig: %w", c.Kubeconfig, loadErr)
		}
		rc, err = clientcmd.NewNonInteractiveClientConfig(*raw, c.Context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes backend: kubeconfig %s: %w", c.Kubeconfig, err)
		}
	default:
		raw, loadErr := clientcmd.Load([]byte(c.KubeconfigData))
		if loadErr != nil {
			return nil, fmt.Errorf("kubernetes backend: kubeconfig_data is not a kubeconfig: %w", loadErr)
		}
		if err := selfContained(raw); err != nil {
			return nil, err
		}
		rc, err = clientcmd.NewNonInteractiveClientConfig(*raw, c.Context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes backend: kubeconfig_data: %w", err)
		}
	}
	if c.DenyServerNetwork {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: netguard.Control}
		rc.Dial = d.DialContext
	}
	rc.UserAgent = "gpud-kubernetes-backend"
	// A 16-pod gang is 18 creates: do not let client-go's default 5 qps
	// stretch it over seconds.
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

func (c Config) clientset() (kubernetes.Interface, error) {
	rc, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	return cs, nil
}

// selfContained refuses what in an inline kubeconfig would act on the
// server's host: an exec credential plugin or auth provider (a command
// the plugin would run) and paths of files (tokens, keys, CAs) it would
// read with the server's rights. Whoever may give kubeconfig_data (a
// project admin) gives credentials inline instead; a kubeconfig path,
// which only a global admin names, may use them.
func selfContained(cfg *clientcmdapi.Config) error {
	for name, a := range cfg.AuthInfos {
		switch {
		case a.Exec != nil:
			return fmt.Errorf("kubernetes backend: kubeconfig_data: user %q runs an exec credential plugin (%s): inline kubeconfigs must carry their credentials (token, client-certificate-data); a global admin may name a kubeconfig file instead", name, a.Exec.Command)
		case a.AuthProvider != nil:
			return fmt.Errorf("kubernetes backend: kubeconfig_data: user %q uses the auth provider %q: inline kubeconfigs must carry their credentials (token, client-certificate-data)", name, a.AuthProvider.Name)
		case a.TokenFile != "" || a.ClientCertificate != "" || a.ClientKey != "":
			return fmt.Errorf("kubernetes backend: kubeconfig_data: user %q names files on the server's host (tokenFile, client-certificate, client-key): use token, client-certificate-data and client-key-data", name)
		}
	}
	for name, cl := range cfg.Clusters {
		if cl.CertificateAuthority != "" {
			return fmt.Errorf("kubernetes backend: kubeconfig_data: cluster %q names a file on the server's host (certificate-authority): use certificate-authority-data", name)
		}
	}
	return nil
}
