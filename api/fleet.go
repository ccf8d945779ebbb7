package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// FleetSpec is a set of instances runs are placed on: provisioned from
// backends (Nodes), or existing hosts reached over SSH (SSHConfig).
type FleetSpec struct {
	Type              Kind              `json:"type"`
	Name              string            `json:"name,omitempty"`
	Nodes             *FleetNodes       `json:"nodes,omitempty"`
	Placement         string            `json:"placement"` // any or cluster
	Blocks            Blocks            `json:"blocks"`
	Resources         *Resources        `json:"resources,omitempty"`
	Backends          []string          `json:"backends,omitempty"`
	Regions           []string          `json:"regions,omitempty"`
	AvailabilityZones []string          `json:"availability_zones,omitempty"`
	InstanceTypes     []string          `json:"instance_types,omitempty"`
	Reservation       string            `json:"reservation,omitempty"`
	SpotPolicy        string            `json:"spot_policy,omitempty"`
	MaxPrice          float64           `json:"max_price,omitempty"`
	IdleDuration      *Duration         `json:"idle_duration,omitempty"`
	Retry             *Retry            `json:"retry,omitempty"`
	Env               Env               `json:"env,omitempty"`
	SSHConfig         *SSHConfig        `json:"ssh_config,omitempty"`
	Tags              map[string]string `json:"tags,omitempty"`
}

// FleetNodes is how many instances a fleet keeps: at least Min, Target at
// creation, at most Max (nil: no limit).
type FleetNodes struct {
	Min    int  `json:"min"`
	Target int  `json:"target"`
	Max    *int `json:"max,omitempty"`
}

// Blocks splits each instance into N blocks (a share of its GPUs, CPUs and
// memory each) so several runs share it; Auto makes one block per GPU.
type Blocks struct {
	N    int
	Auto bool
}

// MarshalJSON writes "auto" or the number.
func (b Blocks) MarshalJSON() ([]byte, error) {
	if b.Auto {
		return json.Marshal("auto")
	}
	return json.Marshal(b.N)
}

// SSHConfig describes existing hosts of an SSH fleet and how to reach them.
type SSHConfig struct {
	User         string        `json:"user,omitempty"`
	Port         int           `json:"port,omitempty"`
	IdentityFile string        `json:"identity_file,omitempty"`
	ProxyJump    *SSHProxyJump `json:"proxy_jump,omitempty"`
	Hosts        []SSHHost     `json:"hosts"`
	Network      string        `json:"network,omitempty"` // CIDR of the hosts' internal network
	// VolumePrefixes (gpud) are the directories of the hosts under which
	// runs may mount instance volumes: the fleet's admin, who holds the
	// hosts' SSH keys, allows them (each agent starts with
	// --allow-volume-prefix); none by default.
	VolumePrefixes []string `json:"volume_prefixes,omitempty"`
}

// SSHProxyJump is a bastion host the fleet's hosts are reached through.
type SSHProxyJump struct {
	Hostname     string `json:"hostname"`
	Port         int    `json:"port,omitempty"`
	User         string `json:"user,omitempty"`
	IdentityFile string `json:"identity_file,omitempty"`
}

// SSHHost is one host of an SSH fleet; empty fields inherit SSHConfig's.
type SSHHost struct {
	Hostname     string        `json:"hostname"`
	Port         int           `json:"port,omitempty"`
	User         string        `json:"user,omitempty"`
	IdentityFile string        `json:"identity_file,omitempty"`
	InternalIP   string        `json:"internal_ip,omitempty"`
	ProxyJump    *SSHProxyJump `json:"proxy_jump,omitempty"`
	Blocks       *Blocks       `json:"blocks,omitempty"`
}

func (d *decoder) fleet(body ast.Node) *FleetSpec {
	f := &FleetSpec{}
	present := d.object(body, "", "a fleet", fields{
		"type":      typeField(&f.Type, KindFleet),
		"name":      func(n ast.Node, p string) { f.Name, _ = value(d, n, p, checkName) },
		"nodes":     func(n ast.Node, p string) { f.Nodes = d.fleetNodes(n, p) },
		"placement": func(n ast.Node, p string) { f.Placement, _ = d.oneOf(n, p, "any", "cluster") },
		"blocks": func(n ast.Node, p string) {
			if b := d.blocks(n, p); b != nil {
				f.Blocks = *b
			}
		},
		"resources": func(n ast.Node, p string) {
			r := d.resources(n, p)
			f.Resources = &r
		},
		"backends":           func(n ast.Node, p string) { f.Backends = d.strList(n, p) },
		"regions":            func(n ast.Node, p string) { f.Regions = d.strList(n, p) },
		"availability_zones": func(n ast.Node, p string) { f.AvailabilityZones = d.strList(n, p) },
		"instance_types":     func(n ast.Node, p string) { f.InstanceTypes = d.strList(n, p) },
		"reservation":        func(n ast.Node, p string) { f.Reservation, _ = d.str(n, p) },
		"spot_policy": func(n ast.Node, p string) {
			f.SpotPolicy, _ = d.oneOf(n, p, SpotPolicySpot, SpotPolicyOnDemand, SpotPolicyAuto)
		},
		"max_price":     func(n ast.Node, p string) { f.MaxPrice, _ = d.number(n, p) },
		"idle_duration": func(n ast.Node, p string) { f.IdleDuration = d.duration(n, p, true) },
		"retry":         func(n ast.Node, p string) { f.Retry = d.retry(n, p) },
		"env":           func(n ast.Node, p string) { f.Env = d.env(n, p) },
		"ssh_config":    func(n ast.Node, p string) { f.SSHConfig = d.sshConfig(n, p) },
		"tags":          func(n ast.Node, p string) { f.Tags = d.tags(n, p) },
	})
	if present != nil && f.Nodes == nil && f.SSHConfig == nil {
		d.errorAt(body, "nodes", "a fleet needs nodes (for cloud instances) or ssh_config (for existing hosts)",
			"add `nodes: 2` or `nodes: 0..4`, or `ssh_config:` with hosts")
	}
	if f.Nodes != nil && f.SSHConfig != nil {
		d.errorAt(present["nodes"], "nodes", "an SSH fleet's size is its list of hosts", "drop nodes, or drop ssh_config")
	}
	return f
}

func (d *decoder) fleetNodes(n ast.Node, path string) *FleetNodes {
	if !d.isMap(n) {
		r, ok := d.countRange(n, path)
		if !ok {
			return nil
		}
		fn := &FleetNodes{}
		if r.Min != nil {
			fn.Min, fn.Target = *r.Min, *r.Min
		}
		fn.Max = r.Max
		return fn
	}
	fn := &FleetNodes{}
	var targetSet bool
	d.object(n, path, "a node count", fields{
		"min": func(n ast.Node, p string) { fn.Min, _ = d.integer(n, p, 0, maxNodes) },
		"target": func(n ast.Node, p string) {
			fn.Target, targetSet = d.integer(n, p, 0, maxNodes)
		},
		"max": func(n ast.Node, p string) {
			if v, ok := d.integer(n, p, 0, maxNodes); ok {
				fn.Max = &v
			}
		},
	})
	if !targetSet {
		fn.Target = fn.Min
	}
	if fn.Target < fn.Min || (fn.Max != nil && (fn.Target > *fn.Max || fn.Min > *fn.Max)) {
		d.errorAt(n, path, "nodes must satisfy min <= target <= max", "")
		return nil
	}
	return fn
}

func (d *decoder) blocks(n ast.Node, path string) *Blocks {
	s, ok := d.str(n, path)
	if !ok || s == "" {
		return nil
	}
	if s == "auto" {
		return &Blocks{Auto: true}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > 1024 {
		d.errorAt(n, path, "blocks must be a number from 1 to 1024, or auto", "")
		return nil
	}
	return &Blocks{N: v}
}

func (d *decoder) sshConfig(n ast.Node, path string) *SSHConfig {
	c := &SSHConfig{}
	errsBefore := len(d.errs)
	present := d.object(n, path, "an SSH configuration", fields{
		"user":          func(n ast.Node, p string) { c.User, _ = d.str(n, p) },
		"port":          func(n ast.Node, p string) { c.Port, _ = d.integer(n, p, 1, 65535) },
		"identity_file": func(n ast.Node, p string) { c.IdentityFile, _ = d.str(n, p) },
		"proxy_jump":    func(n ast.Node, p string) { c.ProxyJump = d.proxyJump(n, p) },
		"network":       func(n ast.Node, p string) { c.Network, _ = d.str(n, p) },
		"volume_prefixes": func(n ast.Node, p string) {
			c.VolumePrefixes = d.strList(n, p)
			for _, v := range c.VolumePrefixes {
				if !strings.HasPrefix(v, "/") || slices.Contains(strings.Split(v, "/"), "..") {
					d.errorAt(n, p, fmt.Sprintf("volume prefix %q is not an absolute path without `..`", v), "write host directories like /data")
				}
			}
		},
		"hosts": func(n ast.Node, p string) {
			items, _ := d.seq(n, p, "a list of hosts")
			for i, it := range items {
				if h, ok := d.sshHost(it, index(p, i)); ok {
					c.Hosts = append(c.Hosts, h)
				}
			}
		},
	})
	if present != nil && len(c.Hosts) == 0 && len(d.errs) == errsBefore {
		d.errorAt(n, join(path, "hosts"), "an SSH fleet needs at least one host", "list the hosts, like `hosts: [192.168.1.10]`")
	}
	return c
}

func (d *decoder) proxyJump(n ast.Node, path string) *SSHProxyJump {
	j := &SSHProxyJump{}
	present := d.object(n, path, "a proxy jump host", fields{
		"hostname":      func(n ast.Node, p string) { j.Hostname, _ = d.str(n, p) },
		"port":          func(n ast.Node, p string) { j.Port, _ = d.integer(n, p, 1, 65535) },
		"user":          func(n ast.Node, p string) { j.User, _ = d.str(n, p) },
		"identity_file": func(n ast.Node, p string) { j.IdentityFile, _ = d.str(n, p) },
	})
	d.require(present, n, path, "hostname", "add the bastion's hostname")
	return j
}

func (d *decoder) sshHost(n ast.Node, path string) (SSHHost, bool) {
	var h SSHHost
	if !d.isMap(n) {
		s, ok := d.str(n, path)
		if !ok || s == "" {
			return h, false
		}
		h.Hostname = s
		return h, true
	}
	present := d.object(n, path, "a host", fields{
		"hostname":      func(n ast.Node, p string) { h.Hostname, _ = d.str(n, p) },
		"port":          func(n ast.Node, p string) { h.Port, _ = d.integer(n, p, 1, 65535) },
		"user":          func(n ast.Node, p string) { h.User, _ = d.str(n, p) },
		"identity_file": func(n ast.Node, p string) { h.IdentityFile, _ = d.str(n, p) },
		"internal_ip":   func(n ast.Node, p string) { h.InternalIP, _ = d.str(n, p) },
		"proxy_jump":    func(n ast.Node, p string) { h.ProxyJump = d.proxyJump(n, p) },
		"blocks":        func(n ast.Node, p string) { h.Blocks = d.blocks(n, p) },
	})
	d.require(present, n, path, "hostname", "add the host's address")
	return h, present != nil
}

func (f *FleetSpec) setDefaults() {
	if f.Placement == "" {
		f.Placement = "any"
	}
	if f.Blocks.N == 0 && !f.Blocks.Auto {
		f.Blocks.N = 1
	}
	if f.Resources != nil {
		f.Resources.setDefaults()
	}
}
