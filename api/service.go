package api

import (
	"encoding/json"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// ServiceSpec is a long-running web service: replicas behind the gateway,
// autoscaled on request rate, optionally serving an OpenAI-compatible model.
type ServiceSpec struct {
	RunSpec
	Commands    []string        `json:"commands,omitempty"`
	Port        PortMapping     `json:"port"`
	Gateway     *ServiceGateway `json:"gateway,omitempty"`
	StripPrefix bool            `json:"strip_prefix"`
	HTTPS       HTTPSMode       `json:"https"`
	Auth        bool            `json:"auth"`
	Model       *Model          `json:"model,omitempty"`
	Replicas    Replicas        `json:"replicas"`
	Scaling     *Scaling        `json:"scaling,omitempty"`
	RateLimits  []RateLimit     `json:"rate_limits,omitempty"`
	Probes      []Probe         `json:"probes,omitempty"`
	// Router is dstack 0.20's service-level router (api/router.go).
	Router *ServiceRouter `json:"router,omitempty"`
	// Domains are hostnames of the service's own, beyond <run>.<domain>
	// of its gateway (a gpud extension; lower case, no trailing dot).
	Domains []string `json:"domains,omitempty"`
}

// ServiceGateway picks the gateway: a named one, the default one (Use
// true), or none (Use false: the server's own proxy serves the service).
type ServiceGateway struct {
	Name string
	Use  bool
}

// MarshalJSON writes the name, or true/false.
func (g ServiceGateway) MarshalJSON() ([]byte, error) {
	if g.Name != "" {
		return json.Marshal(g.Name)
	}
	return json.Marshal(g.Use)
}

// HTTPSMode is "true", "false" or "auto" (HTTPS when the gateway has a domain).
type HTTPSMode string

// MarshalJSON writes true/false as booleans and auto as a string.
func (h HTTPSMode) MarshalJSON() ([]byte, error) {
	switch h {
	case "true":
		return []byte("true"), nil
	case "false":
		return []byte("false"), nil
	}
	return json.Marshal(string(h))
}

// Model declares the model a service serves, for the OpenAI-compatible
// endpoint of the gateway.
type Model struct {
	Type   string `json:"type"`   // chat
	Name   string `json:"name"`   // the model name clients send
	Format string `json:"format"` // openai or tgi
	Prefix string `json:"prefix,omitempty"`
	// ChatTemplate and EOSToken are format tgi's prompt template and end
	// token, which dstack's gateway used to translate OpenAI requests.
	ChatTemplate string `json:"chat_template,omitempty"`
	EOSToken     string `json:"eos_token,omitempty"`
}

// Replicas is a number or range of identical replicas, or a list of replica
// groups with their own commands and resources.
type Replicas struct {
	Count  Range[int]
	Groups []ReplicaGroup
}

// MarshalJSON writes the group list, or the count.
func (r Replicas) MarshalJSON() ([]byte, error) {
	if len(r.Groups) > 0 {
		return json.Marshal(r.Groups)
	}
	return json.Marshal(r.Count)
}

// ReplicaGroup is one kind of replica of a service (a router, prefill or
// decode workers, ...).
type ReplicaGroup struct {
	Name      string     `json:"name,omitempty"`
	Count     Range[int] `json:"count"`
	Image     string     `json:"image,omitempty"`
	Python    string     `json:"python,omitempty"`
	Nvcc      bool       `json:"nvcc,omitempty"`
	Docker    bool       `json:"docker,omitempty"`
	Env       Env        `json:"env,omitempty"`
	Commands  []string   `json:"commands,omitempty"`
	Resources *Resources `json:"resources,omitempty"`
	Scaling   *Scaling   `json:"scaling,omitempty"`
	Router    *Router    `json:"router,omitempty"`
	// SpotPolicy, Reservation and Privileged are the group's own
	// (dstack 0.20.x), over the service's.
	SpotPolicy  string `json:"spot_policy,omitempty"`
	Reservation string `json:"reservation,omitempty"`
	Privileged  bool   `json:"privileged,omitempty"`
}

// Router marks a replica group as the service's router (sglang, dynamo, ...).
type Router struct {
	Type string `json:"type"`
}

// Scaling autoscales replicas so each receives about Target of Metric.
type Scaling struct {
	Metric         string    `json:"metric"` // rps
	Target         float64   `json:"target"`
	Window         *Duration `json:"window,omitempty"`
	ScaleUpDelay   *Duration `json:"scale_up_delay,omitempty"`
	ScaleDownDelay *Duration `json:"scale_down_delay,omitempty"`
}

// RateLimit limits requests under Prefix to RPS per key, with Burst.
type RateLimit struct {
	Prefix string       `json:"prefix"`
	Key    RateLimitKey `json:"key"`
	RPS    float64      `json:"rps"`
	Burst  int          `json:"burst,omitempty"`
}

// RateLimitKey says what a rate limit counts by: the client IP, or a header.
type RateLimitKey struct {
	Type   string `json:"type"` // ip or header
	Header string `json:"header,omitempty"`
}

// Probe is a readiness check of each replica.
type Probe struct {
	Type       string        `json:"type"` // http
	URL        string        `json:"url"`
	Method     string        `json:"method"`
	Headers    []ProbeHeader `json:"headers,omitempty"`
	Body       string        `json:"body,omitempty"`
	Timeout    Duration      `json:"timeout"`
	Interval   Duration      `json:"interval"`
	ReadyAfter int           `json:"ready_after"`
	// UntilReady stops the probe once it passed ReadyAfter times: the
	// replica then stays ready (dstack 0.20's until_ready).
	UntilReady bool `json:"until_ready,omitempty"`
}

// ProbeHeader is one HTTP header a probe sends.
type ProbeHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func (d *decoder) service(body ast.Node) *ServiceSpec {
	s := &ServiceSpec{StripPrefix: true, Auth: true, HTTPS: "true"}
	fs := d.runFields(&s.RunSpec, KindService)
	fs["commands"] = func(n ast.Node, p string) { s.Commands = d.strList(n, p) }
	fs["port"] = func(n ast.Node, p string) { s.Port, _ = value(d, n, p, ParsePort) }
	fs["gateway"] = func(n ast.Node, p string) {
		if r := d.resolveQuiet(n); r != nil {
			if b, ok := r.(*ast.BoolNode); ok {
				s.Gateway = &ServiceGateway{Use: b.Value}
				return
			}
		}
		if name, ok := d.str(n, p); ok && name != "" {
			s.Gateway = &ServiceGateway{Name: name, Use: true}
		}
	}
	fs["domains"] = func(n ast.Node, p string) {
		for _, h := range d.strList(n, p) {
			s.Domains = append(s.Domains, strings.TrimSuffix(strings.ToLower(h), "."))
		}
	}
	fs["strip_prefix"] = func(n ast.Node, p string) { s.StripPrefix, _ = d.boolean(n, p) }
	fs["https"] = func(n ast.Node, p string) {
		if v, ok := d.oneOf(n, p, "true", "false", "auto"); ok {
			s.HTTPS = HTTPSMode(v)
		}
	}
	fs["auth"] = func(n ast.Node, p string) { s.Auth, _ = d.boolean(n, p) }
	fs["model"] = func(n ast.Node, p string) { s.Model = d.model(n, p) }
	var groupNodes []map[string]ast.Node
	groupsPath := "replicas"
	fs["replicas"] = func(n ast.Node, p string) { s.Replicas, groupNodes = d.replicas(n, p) }
	// groups: is dstack 0.20's name for a list of replica groups.
	fs["groups"] = func(n ast.Node, p string) {
		if !d.isSeq(n) {
			d.errorAt(n, p, "groups is a list of replica groups", "write `- name: ...` items, or use `replicas: N` for identical replicas")
			return
		}
		s.Replicas, groupNodes = d.replicas(n, p)
		groupsPath = "groups"
	}
	fs["router"] = func(n ast.Node, p string) { s.Router = d.serviceRouter(n, p) }
	fs["scaling"] = func(n ast.Node, p string) { s.Scaling = d.scaling(n, p) }
	fs["rate_limits"] = func(n ast.Node, p string) { s.RateLimits = d.rateLimits(n, p) }
	fs["probes"] = func(n ast.Node, p string) { s.Probes = d.probes(n, p) }
	present := d.object(body, "", "a service", fs)
	d.checkRun(&s.RunSpec, present, "")
	if present != nil && present["groups"] != nil && present["replicas"] != nil {
		d.errorAt(present["groups"], "groups", "replicas and groups exclude each other", "list the replica groups under one of them")
	} else if present["groups"] != nil {
		d.aliasKeys("groups", "replicas")
	}
	d.checkRouters(s, groupNodes, present, groupsPath)
	d.require(present, body, "", "port", "add the port the service listens on, like `port: 8000`")
	if present != nil && len(s.Replicas.Groups) == 0 {
		if len(s.Commands) == 0 && s.Image == "" {
			d.errorAt(body, "commands", "a service needs commands to run", "add `commands:`, or an image whose entrypoint starts the server")
		}
		if !s.Replicas.Count.IsZero() && isRange(s.Replicas.Count) && s.Scaling == nil {
			d.errorAt(present["replicas"], "replicas", "a range of replicas needs autoscaling rules", "add `scaling: {metric: rps, target: 10}`, or use a fixed number")
		}
	}
	return s
}

func isRange(r Range[int]) bool {
	return r.Min == nil || r.Max == nil || *r.Min != *r.Max
}

func (d *decoder) model(n ast.Node, path string) *Model {
	m := &Model{Type: "chat", Format: "openai"}
	if !d.isMap(n) {
		name, ok := d.str(n, path)
		if !ok || name == "" {
			return nil
		}
		m.Name = name
		return m
	}
	present := d.object(n, path, "a model", fields{
		"type":          func(n ast.Node, p string) { m.Type, _ = d.oneOf(n, p, "chat") },
		"name":          func(n ast.Node, p string) { m.Name, _ = d.str(n, p) },
		"format":        func(n ast.Node, p string) { m.Format, _ = d.oneOf(n, p, "openai", "tgi") },
		"prefix":        func(n ast.Node, p string) { m.Prefix, _ = d.str(n, p) },
		"chat_template": func(n ast.Node, p string) { m.ChatTemplate, _ = d.str(n, p) },
		"eos_token":     func(n ast.Node, p string) { m.EOSToken, _ = d.str(n, p) },
	})
	d.require(present, n, path, "name", "add the model name clients will request")
	for _, key := range []string{"chat_template", "eos_token"} {
		if present[key] != nil && m.Format != "tgi" {
			d.errorAt(present[key], join(path, key), key+" belongs to format tgi", "drop it: a model in format openai is served by its own chat template")
		}
	}
	return m
}

// replicas decodes a count or range of replicas, or a list of replica
// groups; nodes are the fields each group sets, in the order of Groups.
func (d *decoder) replicas(n ast.Node, path string) (out Replicas, nodes []map[string]ast.Node) {
	if !d.isSeq(n) {
		c, ok := d.countRange(n, path)
		if ok && c.Max == nil {
			d.errorAt(n, path, "a range of replicas needs a maximum", "write both bounds, like 1..4")
			return Replicas{}, nil
		}
		return Replicas{Count: c}, nil
	}
	items, _ := d.seq(n, path, "a list of replica groups")
	for i, it := range items {
		p := index(path, i)
		g := ReplicaGroup{Count: Exact(1)}
		present := d.objectWith(it, p, "a replica group", func(key string, n ast.Node, p string) bool {
			return d.replicaGroupField(&g, key, n, p)
		}, replicaGroupKeys)
		if present == nil {
			continue
		}
		if present["count"] != nil && present["replicas"] != nil {
			d.errorAt(present["replicas"], join(p, "replicas"), "count and replicas are the same field", "keep one of them")
		}
		if present["count"] == nil && present["replicas"] != nil {
			present["count"] = present["replicas"] // errors below point at what was written
			d.aliasKeys(join(p, "replicas"), join(p, "count"))
		}
		if g.Count.Max == nil && !g.Count.IsZero() {
			d.errorAt(present["count"], join(p, "count"), "a range of replicas needs a maximum", "write both bounds, like 1..4")
		}
		if isRange(g.Count) && g.Scaling == nil && !g.Count.IsZero() {
			d.errorAt(present["count"], join(p, "count"), "a range of replicas needs autoscaling rules", "add `scaling: {metric: rps, target: 10}` to this group")
		}
		out.Groups = append(out.Groups, g)
		nodes = append(nodes, present)
	}
	return out, nodes
}

// replicaGroupField decodes one field of a replica group; a switch, since
// a service may have many groups.
func (d *decoder) replicaGroupField(g *ReplicaGroup, key string, n ast.Node, p string) bool {
	switch key {
	case "name":
		g.Name, _ = value(d, n, p, checkName)
	case "count", "replicas": // replicas: dstack 0.20's name for count
		g.Count, _ = d.countRange(n, p)
	case "image":
		g.Image, _ = d.str(n, p)
	case "python":
		g.Python, _ = d.oneOf(n, p, "3.9", "3.10", "3.11", "3.12", "3.13")
	case "nvcc":
		g.Nvcc, _ = d.boolean(n, p)
	case "docker":
		g.Docker, _ = d.boolean(n, p)
	case "env":
		g.Env = d.env(n, p)
	case "commands":
		g.Commands = d.strList(n, p)
	case "resources":
		r := d.resources(n, p)
		g.Resources = &r
	case "scaling":
		g.Scaling = d.scaling(n, p)
	case "router":
		g.Router = d.groupRouter(n, p)
	case "spot_policy":
		g.SpotPolicy, _ = d.oneOf(n, p, SpotPolicySpot, SpotPolicyOnDemand, SpotPolicyAuto)
	case "reservation":
		g.Reservation, _ = d.str(n, p)
	case "privileged":
		g.Privileged, _ = d.boolean(n, p)
	default:
		return false
	}
	return true
}

func replicaGroupKeys() []string {
	return []string{"commands", "count", "docker", "env", "image", "name", "nvcc", "privileged", "python", "replicas", "reservation", "resources", "router", "scaling", "spot_policy"}
}

func (d *decoder) scaling(n ast.Node, path string) *Scaling {
	s := &Scaling{Metric: "rps"}
	present := d.objectWith(n, path, "scaling rules", func(key string, n ast.Node, p string) bool {
		switch key {
		case "metric":
			s.Metric, _ = d.oneOf(n, p, "rps")
		case "target":
			s.Target, _ = d.number(n, p)
		case "window":
			s.Window = d.duration(n, p, false)
		case "scale_up_delay":
			s.ScaleUpDelay = d.duration(n, p, false)
		case "scale_down_delay":
			s.ScaleDownDelay = d.duration(n, p, false)
		default:
			return false
		}
		return true
	}, func() []string { return []string{"metric", "scale_down_delay", "scale_up_delay", "target", "window"} })
	d.require(present, n, path, "target", "add the requests per second one replica should get, like `target: 10`")
	if present != nil && s.Target == 0 {
		if _, ok := present["target"]; ok {
			d.errorAt(present["target"], join(path, "target"), "target must be above 0", "")
		}
	}
	return s
}

func (d *decoder) rateLimits(n ast.Node, path string) []RateLimit {
	return list(d, n, path, "a list of rate limits", func(it ast.Node, p string) (RateLimit, bool) {
		rl := RateLimit{Prefix: "/", Key: RateLimitKey{Type: "ip"}}
		present := d.object(it, p, "a rate limit", fields{
			"prefix": func(n ast.Node, p string) { rl.Prefix, _ = d.str(n, p) },
			"rps":    func(n ast.Node, p string) { rl.RPS, _ = d.number(n, p) },
			"burst":  func(n ast.Node, p string) { rl.Burst, _ = d.integer(n, p, 0, 1<<30) },
			"key": func(n ast.Node, p string) {
				kp := d.object(n, p, "a rate limit key", fields{
					"type": func(n ast.Node, p string) {
						// ip_address is dstack's name for the client IP.
						if rl.Key.Type, _ = d.oneOf(n, p, "ip", "ip_address", "header"); rl.Key.Type == "ip_address" {
							rl.Key.Type = "ip"
						}
					},
					"header": func(n ast.Node, p string) { rl.Key.Header, _ = d.str(n, p) },
				})
				if kp != nil && rl.Key.Type == "header" && rl.Key.Header == "" {
					d.errorAt(n, join(p, "header"), "a header key needs the header name", "add `header: Authorization` or similar")
				}
			},
		})
		d.require(present, it, p, "rps", "add the allowed requests per second, like `rps: 4`")
		return rl, true
	})
}

func (d *decoder) probes(n ast.Node, path string) []Probe {
	return list(d, n, path, "a list of probes", func(it ast.Node, p string) (Probe, bool) {
		pr := Probe{Type: "http", URL: "/", Method: "get", Timeout: Duration{Value: 10e9}, Interval: Duration{Value: 15e9}, ReadyAfter: 1}
		d.object(it, p, "a probe", fields{
			"type": func(n ast.Node, p string) { pr.Type, _ = d.oneOf(n, p, "http") },
			"url":  func(n ast.Node, p string) { pr.URL, _ = d.str(n, p) },
			"method": func(n ast.Node, p string) {
				pr.Method, _ = d.oneOf(n, p, "get", "post", "put", "delete", "patch", "head")
			},
			"body": func(n ast.Node, p string) { pr.Body, _ = d.str(n, p) },
			"timeout": func(n ast.Node, p string) {
				if v := d.duration(n, p, false); v != nil {
					pr.Timeout = *v
				}
			},
			"interval": func(n ast.Node, p string) {
				if v := d.duration(n, p, false); v != nil {
					pr.Interval = *v
				}
			},
			"ready_after": func(n ast.Node, p string) { pr.ReadyAfter, _ = d.integer(n, p, 1, 1000) },
			"until_ready": func(n ast.Node, p string) { pr.UntilReady, _ = d.boolean(n, p) },
			"headers": func(n ast.Node, p string) {
				hs, _ := d.seq(n, p, "a list of headers")
				for j, h := range hs {
					var hd ProbeHeader
					hp := index(p, j)
					present := d.object(h, hp, "a header", fields{
						"name":  func(n ast.Node, p string) { hd.Name, _ = d.str(n, p) },
						"value": func(n ast.Node, p string) { hd.Value, _ = d.str(n, p) },
					})
					d.require(present, h, hp, "name", "add the header name")
					pr.Headers = append(pr.Headers, hd)
				}
			},
		})
		return pr, true
	})
}

func (s *ServiceSpec) setDefaults() {
	s.RunSpec.setDefaults()
	if s.Replicas.Count.IsZero() && len(s.Replicas.Groups) == 0 {
		s.Replicas.Count = Exact(1)
	}
	for i := range s.Replicas.Groups {
		if r := s.Replicas.Groups[i].Resources; r != nil {
			r.setDefaults()
		}
	}
}
