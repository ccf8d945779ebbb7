// Command testplugin is an external backend plugin for tests: built by
// them into a plugin directory as gpud-backend-test, it serves backend type
// "test" from its own main package, as a third party's plugin would. It is
// a real job backend (jobs.go): each job with commands runs as a local
// process (its shell with -c, the DSTACK_* environment of its spec) in its
// own session, its output in a file, its exit code written by a wrapper
// shell. Its "engine" is a directory (state_dir) where each gang is a file
// and a directory, so a gang and its processes outlive the plugin's
// process, as pods outlive a Kubernetes plugin's.
//
// Configuration: kubeconfig (required: a file beginning with apiVersion,
// checked by Check, like a Kubernetes backend's), state_dir (required),
// token (a credential, never shown), region, and offers.
//
// Link flags set protocol (to build a plugin of another protocol version,
// which the server must refuse) and version.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

var (
	protocol = "0" // 0: plugins.ProtocolVersion
	version  = "0.1.0-test"
)

type config struct {
	Kubeconfig string      `json:"kubeconfig"`
	StateDir   string      `json:"state_dir"`
	Token      string      `json:"token"`
	Region     string      `json:"region"`
	Offers     []api.Offer `json:"offers"`
}

type backend struct {
	cfg config
	log zerolog.Logger
}

func main() {
	p, err := strconv.Atoi(protocol)
	if err == nil {
		err = plugins.Serve(plugins.ServeConfig{Type: "test", New: newBackend, Protocol: p})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func newBackend(raw json.RawMessage, log zerolog.Logger) (plugins.Backend, error) {
	var c config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("test backend configuration: %w", err)
	}
	switch {
	case c.Kubeconfig == "":
		return nil, errors.New("kubeconfig: required (the path of a kubeconfig file)")
	case c.StateDir == "":
		return nil, errors.New("state_dir: required")
	}
	if c.Region == "" {
		c.Region = "test-1"
	}
	if c.Offers == nil {
		c.Offers = []api.Offer{
			{Instance: "a100x8", Resources: api.InstanceResources{GPUs: 8, GPUName: "A100", CPUs: 64, Memory: 512 << 30}, Price: 12},
			{Instance: "t4", Resources: api.InstanceResources{GPUs: 1, GPUName: "T4", CPUs: 4, Memory: 16 << 30}, Price: 0.5, Spot: true},
		}
	}
	log.Info().Str("region", c.Region).Msg("test backend configured")
	return &backend{cfg: c, log: log}, nil
}

func (b *backend) Info(context.Context) (plugins.Info, error) {
	// Its jobs are processes of this machine: their ports are loopback
	// ports, which DialPort reaches (dial.go), so it runs services.
	return plugins.Info{Type: "test", Protocol: plugins.ProtocolVersion, Jobs: true, Version: version,
		Features: []string{plugins.FeaturePorts, plugins.FeatureService}}, nil
}

func (b *backend) Check(context.Context) error {
	data, err := os.ReadFile(b.cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("apiVersion")) {
		return fmt.Errorf("kubeconfig: %s is not a kubeconfig (no apiVersion)", b.cfg.Kubeconfig)
	}
	return os.MkdirAll(b.cfg.StateDir, 0o700)
}

// Offers are the configured ones less the GPUs the engine's running jobs
// hold, taken from the first offer of their size or more: what the
// backend can give now.
func (b *backend) Offers(_ context.Context, q plugins.OfferQuery) ([]api.Offer, error) {
	var out []api.Offer
	held := b.heldGPUs()
	for _, o := range b.cfg.Offers {
		if held > 0 && o.Resources.GPUs >= held {
			o.Resources.GPUs, held = o.Resources.GPUs-held, 0
		}
		if (q.GPUName == "" || strings.EqualFold(q.GPUName, o.Resources.GPUName)) && float64(q.GPUs) <= o.Resources.GPUs {
			o.Region = b.cfg.Region
			o.Available = "available"
			out = append(out, o)
		}
	}
	return out, nil
}

// (the gang and job methods are in jobs.go)

func (b *backend) CreateInstance(context.Context, plugins.InstanceRequest) (plugins.Instance, error) {
	return plugins.Instance{}, plugins.ErrUnsupported
}

func (b *backend) TerminateInstance(context.Context, string) error { return plugins.ErrUnsupported }

func (b *backend) CreateVolume(context.Context, api.VolumeSpec) (plugins.Volume, error) {
	return plugins.Volume{}, plugins.ErrUnsupported
}

func (b *backend) DeleteVolume(context.Context, string) error { return plugins.ErrUnsupported }
