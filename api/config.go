package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Kind is the `type` of a configuration.
type Kind string

// The kinds of configuration gpud reads: dstack's six plus gpud's queue.
const (
	KindTask           Kind = "task"
	KindService        Kind = "service"
	KindDevEnvironment Kind = "dev-environment"
	KindFleet          Kind = "fleet"
	KindVolume         Kind = "volume"
	KindGateway        Kind = "gateway"
	KindQueue          Kind = "queue"
)

// Kinds lists every kind, in documentation order.
func Kinds() []string {
	return []string{string(KindTask), string(KindService), string(KindDevEnvironment),
		string(KindFleet), string(KindVolume), string(KindGateway), string(KindQueue)}
}

// Config is one parsed configuration. Exactly one of the spec pointers is
// set, the one named by Kind.
type Config struct {
	Kind           Kind
	Task           *TaskSpec
	Service        *ServiceSpec
	DevEnvironment *DevEnvironmentSpec
	Fleet          *FleetSpec
	Volume         *VolumeSpec
	Gateway        *GatewaySpec
	Queue          *QueueSpec

	// keys is where each field is written in the source, by path, and
	// file the name Parse was given; nil and "" for a Config not read by
	// Parse.
	keys map[string]*Error
	file string
}

// At returns an error about the field at path (with its index:
// "volumes[0].path"), anchored where the field is written in the source,
// or to the closest parent written there (a field a profile or a
// shorthand set has no key of its own).
func (c *Config) At(path, msg, fix string) *Error {
	for p := path; ; {
		if k, ok := c.keys[p]; ok {
			e := *k
			e.Path, e.Message, e.Fix = path, msg, fix
			return &e
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return &Error{File: c.file, Path: path, Message: msg, Fix: fix}
}

// Run returns the shared run part of a task, service or dev environment,
// or nil for the other kinds.
func (c *Config) Run() *RunSpec {
	switch {
	case c.Task != nil:
		return &c.Task.RunSpec
	case c.Service != nil:
		return &c.Service.RunSpec
	case c.DevEnvironment != nil:
		return &c.DevEnvironment.RunSpec
	}
	return nil
}

// Name returns the configuration's name, which may be empty for runs (the
// server then picks one).
func (c *Config) Name() string {
	switch {
	case c.Run() != nil:
		return c.Run().Name
	case c.Fleet != nil:
		return c.Fleet.Name
	case c.Volume != nil:
		return c.Volume.Name
	case c.Gateway != nil:
		return c.Gateway.Name
	case c.Queue != nil:
		return c.Queue.Name
	}
	return ""
}

// spec returns the set spec as a value to marshal.
func (c Config) spec() any {
	switch {
	case c.Task != nil:
		return c.Task
	case c.Service != nil:
		return c.Service
	case c.DevEnvironment != nil:
		return c.DevEnvironment
	case c.Fleet != nil:
		return c.Fleet
	case c.Volume != nil:
		return c.Volume
	case c.Gateway != nil:
		return c.Gateway
	case c.Queue != nil:
		return c.Queue
	}
	return nil
}

// MarshalJSON writes the normalized spec: the same field names as the YAML,
// every default filled in, values in the configuration grammar ("1..8",
// "80GB", "1h"). The output is itself a valid configuration: Parse reads it
// back to an equal Config.
func (c Config) MarshalJSON() ([]byte, error) {
	s := c.spec()
	if s == nil {
		return nil, fmt.Errorf("marshal config: no spec is set")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // commands hold <, > and &; keep them readable
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// UnmarshalJSON reads a configuration with Parse, so JSON on the wire is
// validated exactly like a file.
func (c *Config) UnmarshalJSON(b []byte) error {
	cfg, err := Parse("", b)
	if err != nil {
		return err
	}
	*c = *cfg
	return nil
}

// config decodes the top-level mapping by its type.
func (d *decoder) config(body ast.Node) *Config {
	kvs, ok := d.entries(body, "", "a configuration")
	if !ok {
		return nil
	}
	var typeNode ast.Node
	for _, kv := range kvs {
		if kv.key == "type" {
			typeNode = kv.value
		}
	}
	if typeNode == nil {
		d.errorAt(body, "type", "the configuration has no type",
			"add `type:` with one of task, service, dev-environment, fleet, volume, gateway, queue")
		return nil
	}
	k, ok := d.oneOf(typeNode, "type", Kinds()...)
	if !ok {
		if r := d.resolveQuiet(typeNode); r != nil && isNull(r) {
			d.errorAt(typeNode, "type", "the type is empty",
				"write one of task, service, dev-environment, fleet, volume, gateway, queue")
		}
		return nil
	}
	c := &Config{Kind: Kind(k)}
	switch c.Kind {
	case KindTask:
		c.Task = d.task(body)
	case KindService:
		c.Service = d.service(body)
	case KindDevEnvironment:
		c.DevEnvironment = d.devEnvironment(body)
	case KindFleet:
		c.Fleet = d.fleet(body)
	case KindVolume:
		c.Volume = d.volume(body)
	case KindGateway:
		c.Gateway = d.gateway(body)
	case KindQueue:
		c.Queue = d.queue(body)
	}
	return c
}

// typeField accepts the `type` key already read by config.
func typeField(dst *Kind, k Kind) func(ast.Node, string) {
	return func(ast.Node, string) { *dst = k }
}
