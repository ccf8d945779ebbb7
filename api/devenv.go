package api

import (
	"github.com/goccy/go-yaml/ast"
)

// DevEnvironmentSpec is an interactive machine the user opens in an IDE
// (or over SSH); it runs Init once, then stays up until stopped or idle.
type DevEnvironmentSpec struct {
	RunSpec
	IDE                string        `json:"ide,omitempty"` // vscode, cursor, windsurf
	Version            string        `json:"version,omitempty"`
	Init               []string      `json:"init,omitempty"`
	InactivityDuration *Duration     `json:"inactivity_duration,omitempty"`
	Ports              []PortMapping `json:"ports,omitempty"`
}

func (d *decoder) devEnvironment(body ast.Node) *DevEnvironmentSpec {
	e := &DevEnvironmentSpec{}
	fs := d.runFields(&e.RunSpec, KindDevEnvironment)
	fs["ide"] = func(n ast.Node, p string) { e.IDE, _ = d.oneOf(n, p, "vscode", "cursor", "windsurf") }
	fs["version"] = func(n ast.Node, p string) { e.Version, _ = d.str(n, p) }
	fs["init"] = func(n ast.Node, p string) { e.Init = d.strList(n, p) }
	fs["inactivity_duration"] = func(n ast.Node, p string) { e.InactivityDuration = d.duration(n, p, true) }
	fs["ports"] = func(n ast.Node, p string) { e.Ports = d.ports(n, p) }
	present := d.object(body, "", "a dev environment", fs)
	d.checkRun(&e.RunSpec, present, "")
	return e
}
