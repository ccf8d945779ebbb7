package api

import (
	"github.com/goccy/go-yaml/ast"
)

// GatewaySpec is an ingress for services, serving https://<run>.<Domain>.
// In dstack it is an instance in Region on Backend; gpud serves it from the
// server itself (gpud serve --domain), so Backend and Region are optional.
type GatewaySpec struct {
	Type         Kind              `json:"type"`
	Name         string            `json:"name,omitempty"`
	Backend      string            `json:"backend"`
	Region       string            `json:"region"`
	Default      bool              `json:"default,omitempty"`
	Domain       string            `json:"domain,omitempty"`
	Certificate  *Certificate      `json:"certificate"` // nil: plain HTTP
	PublicIP     bool              `json:"public_ip"`
	InstanceType string            `json:"instance_type,omitempty"`
	Replicas     int               `json:"replicas"`
	Tags         map[string]string `json:"tags,omitempty"`
	// Router is dstack 0.20's router on the gateway (api/router.go).
	Router *GatewayRouter `json:"router,omitempty"`
}

// Certificate says where a gateway's TLS certificate comes from: Let's
// Encrypt (ACME, the default), AWS Certificate Manager by ARN, or none
// (plain HTTP, as `certificate: null`).
type Certificate struct {
	Type string `json:"type"` // lets-encrypt, acm or none
	ARN  string `json:"arn,omitempty"`
}

func (d *decoder) gateway(body ast.Node) *GatewaySpec {
	g := &GatewaySpec{PublicIP: true, Replicas: 1, Certificate: &Certificate{Type: "lets-encrypt"}}
	d.object(body, "", "a gateway", fields{
		"type":    typeField(&g.Type, KindGateway),
		"name":    func(n ast.Node, p string) { g.Name, _ = value(d, n, p, checkName) },
		"backend": func(n ast.Node, p string) { g.Backend, _ = d.str(n, p) },
		"region":  func(n ast.Node, p string) { g.Region, _ = d.str(n, p) },
		"default": func(n ast.Node, p string) { g.Default, _ = d.boolean(n, p) },
		"domain":  func(n ast.Node, p string) { g.Domain, _ = d.str(n, p) },
		"certificate": func(n ast.Node, p string) {
			if r := d.resolveQuiet(n); r != nil && isNull(r) {
				g.Certificate = nil
				return
			}
			c := &Certificate{}
			cp := d.object(n, p, "a certificate", fields{
				"type": func(n ast.Node, p string) { c.Type, _ = d.oneOf(n, p, "lets-encrypt", "acm", "none") },
				"arn":  func(n ast.Node, p string) { c.ARN, _ = d.str(n, p) },
			})
			d.require(cp, n, p, "type", "use lets-encrypt, none, or acm with an arn")
			if c.Type == "acm" && c.ARN == "" {
				d.errorAt(n, join(p, "arn"), "an acm certificate needs its ARN", "add `arn: arn:aws:acm:...`")
			}
			g.Certificate = c
		},
		"public_ip":     func(n ast.Node, p string) { g.PublicIP, _ = d.boolean(n, p) },
		"instance_type": func(n ast.Node, p string) { g.InstanceType, _ = d.str(n, p) },
		"replicas":      func(n ast.Node, p string) { g.Replicas, _ = d.integer(n, p, 1, 16) },
		"tags":          func(n ast.Node, p string) { g.Tags = d.tags(n, p) },
		"router":        func(n ast.Node, p string) { g.Router = d.gatewayRouter(n, p) },
	})
	return g
}
