package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDstack020ServiceAndGatewayFieldsParse reads the service and gateway
// fields dstack 0.20 accepts that gpud once rejected as unknown: a
// service-level and a gateway router, groups: for replicas:, a group's
// replicas: for count:, a group's spot_policy, reservation and
// privileged, and a tgi model's chat_template and eos_token.
func TestDstack020ServiceAndGatewayFieldsParse(t *testing.T) {
	svc := func(t *testing.T, src string) *ServiceSpec {
		t.Helper()
		cfg, err := Parse("s.yml", []byte(src))
		if err != nil {
			t.Fatalf("rejected:\n%v", err)
		}
		checkRoundTrip(t, "s.yml", cfg)
		return cfg.Service
	}
	t.Run("service router", func(t *testing.T) {
		s := svc(t, "type: service\nport: 8000\ncommands: [serve]\nrouter:\n  type: sglang\n  policy: round_robin\n  pd_disaggregation: true\n")
		if s.Router == nil || *s.Router != (ServiceRouter{Type: "sglang", Policy: "round_robin", PDDisaggregation: true}) {
			t.Errorf("router %+v", s.Router)
		}
		s = svc(t, "type: service\nport: 8000\ncommands: [serve]\nrouter: {}\n")
		if s.Router == nil || s.Router.Policy != "cache_aware" || s.Router.Type != "sglang" {
			t.Errorf("router defaults %+v, want sglang cache_aware as dstack's", s.Router)
		}
	})
	t.Run("groups and a group's own fields", func(t *testing.T) {
		s := svc(t, `type: service
port: 8000
groups:
  - name: router
    replicas: 1
    commands: [smg launch]
    router: {}
  - name: prefill
    replicas: 1..4
    scaling: {target: 3}
    spot_policy: on-demand
    reservation: cr-123
    privileged: true
    commands: [serve prefill]
`)
		g := s.Replicas.Groups
		if len(g) != 2 || g[0].Router == nil || g[0].Router.Type != "sglang" || *g[0].Count.Max != 1 {
			t.Fatalf("groups %+v", g)
		}
		if g[1].SpotPolicy != "on-demand" || g[1].Reservation != "cr-123" || !g[1].Privileged || *g[1].Count.Max != 4 {
			t.Errorf("group fields %+v", g[1])
		}
	})
	t.Run("dynamo router group", func(t *testing.T) {
		s := svc(t, "type: service\nport: 8000\nreplicas:\n  - count: 1\n    commands: [frontend]\n    router: {type: dynamo}\n  - count: 2\n    commands: [worker]\n")
		if s.Replicas.Groups[0].Router.Type != "dynamo" {
			t.Errorf("router %+v", s.Replicas.Groups[0].Router)
		}
	})
	t.Run("tgi model", func(t *testing.T) {
		s := svc(t, "type: service\nport: 8000\ncommands: [serve]\nmodel:\n  name: m\n  format: tgi\n  chat_template: \"{{ x }}\"\n  eos_token: </s>\n")
		if s.Model.ChatTemplate != "{{ x }}" || s.Model.EOSToken != "</s>" {
			t.Errorf("model %+v", s.Model)
		}
	})
	t.Run("gateway router", func(t *testing.T) {
		cfg, err := Parse("g.yml", []byte("type: gateway\nname: g\nbackend: aws\nregion: r\ndomain: d.example\nrouter:\n  type: sglang\n  policy: power_of_two\n"))
		if err != nil {
			t.Fatal(err)
		}
		checkRoundTrip(t, "g.yml", cfg)
		if r := cfg.Gateway.Router; r == nil || *r != (GatewayRouter{Type: "sglang", Policy: "power_of_two"}) {
			t.Errorf("gateway router %+v", r)
		}
	})
}

// TestRouterMistakesAreReportedAtTheirField checks dstack's rules on
// routers and the aliases, each error at its line and field.
func TestRouterMistakesAreReportedAtTheirField(t *testing.T) {
	const head = "type: service\nport: 8000\n"
	for _, tc := range []struct {
		name, src string
		line      int
		says      string
	}{
		{"router group of two", head + "replicas:\n  - count: 2\n    commands: [r]\n    router: {type: sglang}\n", 4, "replicas[0].count: a router group runs exactly one replica"},
		{"two router groups", head + "replicas:\n  - commands: [r]\n    router: {}\n  - commands: [r]\n    router: {}\n", 7, "replicas[1].router: a service has one router group at most"},
		{"both routers", head + "router: {policy: random}\nreplicas:\n  - commands: [r]\n    router: {}\n", 3, "router: a service-level router and a router replica group exclude each other"},
		{"unknown router", head + "replicas:\n  - commands: [r]\n    router: {type: nginx}\n", 5, `"nginx" is not allowed`},
		{"unknown policy", head + "commands: [r]\nrouter: {policy: fastest}\n", 4, `"fastest" is not allowed`},
		{"groups and replicas", head + "replicas: 2\ncommands: [r]\ngroups:\n  - commands: [r]\n", 6, "replicas and groups exclude each other"},
		{"groups not a list", head + "commands: [r]\ngroups: 2\n", 4, "groups is a list of replica groups"},
		{"count and replicas", head + "replicas:\n  - count: 1\n    replicas: 1\n    commands: [r]\n", 5, "count and replicas are the same field"},
		{"a group's range without scaling", head + "groups:\n  - replicas: 1..2\n    commands: [r]\n", 4, "a range of replicas needs autoscaling rules"},
		{"chat_template on openai", head + "commands: [r]\nmodel:\n  name: m\n  chat_template: x\n", 6, "chat_template belongs to format tgi"},
		{"a bad spot policy", head + "replicas:\n  - commands: [r]\n    spot_policy: sometimes\n", 5, `"sometimes" is not allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("s.yml", []byte(tc.src))
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("accepted, want an error at line %d saying %q", tc.line, tc.says)
			}
			for _, e := range list {
				if e.Line == tc.line && strings.Contains(e.Error(), tc.says) {
					return
				}
			}
			t.Errorf("errors %v, want one at line %d saying %q", fmt.Sprint(list), tc.line, tc.says)
		})
	}
}

// TestDstack020SpellingsKeepTheirPositions: the fields written as groups:
// and a group's replicas: are found at their lines under the fields they
// fill (replicas, count), so a plan's refusal points at what was written.
func TestDstack020SpellingsKeepTheirPositions(t *testing.T) {
	cfg, err := Parse("s.yml", []byte("type: service\nport: 8000\ngroups:\n  - replicas: 1\n    commands: [r]\n    router: {}\n  - commands: [w]\n    spot_policy: spot\n"))
	if err != nil {
		t.Fatal(err)
	}
	for path, line := range map[string]int{"replicas": 3, "replicas[0].count": 4, "replicas[0].router": 6, "replicas[1].spot_policy": 8} {
		if e := cfg.At(path, "m", ""); e.Line != line {
			t.Errorf("%s at line %d, want %d", path, e.Line, line)
		}
	}
}

// TestDstackRateLimitKeyIPAddressIsTheClientIP: dstack's rate limit key
// type ip_address is gpud's ip.
func TestDstackRateLimitKeyIPAddressIsTheClientIP(t *testing.T) {
	cfg, err := Parse("s.yml", []byte("type: service\nport: 8000\ncommands: [r]\nrate_limits:\n  - rps: 2\n    key: {type: ip_address}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Service.RateLimits[0].Key; k.Type != "ip" {
		t.Errorf("key %+v, want ip", k)
	}
	cfg, err = Parse("s.yml", []byte("type: service\nport: 8000\ncommands: [r]\nprobes:\n  - url: /health\n    until_ready: true\n"))
	if err != nil || !cfg.Service.Probes[0].UntilReady {
		t.Fatalf("until_ready: %v %+v", err, cfg)
	}
	checkRoundTrip(t, "s.yml", cfg)
}
