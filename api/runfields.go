package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Defaults of run fields, as in dstack.
const (
	defaultStopDuration  = 5 * time.Minute
	defaultRetryDuration = time.Hour
)

// EnvVar is one environment variable. A variable without a value (written
// as a bare name) takes its value from the client's environment when the
// run is submitted.
type EnvVar struct {
	Name     string
	Value    string
	HasValue bool
}

// Env is an ordered list of environment variables; it reads a list of
// "K=V" or "K", or a mapping, and writes the list form.
type Env []EnvVar

// Get returns the value of name and whether it is set with a value.
func (e Env) Get(name string) (string, bool) {
	for _, v := range e {
		if v.Name == name {
			return v.Value, v.HasValue
		}
	}
	return "", false
}

// MarshalJSON writes the list form: ["K=V", "K"].
func (e Env) MarshalJSON() ([]byte, error) {
	out := make([]string, len(e))
	for i, v := range e {
		out[i] = v.Name
		if v.HasValue {
			out[i] += "=" + v.Value
		}
	}
	return json.Marshal(out)
}

func checkEnvName(name string) error {
	if name == "" {
		return errors.New("empty variable name: write NAME=value or NAME")
	}
	for i, c := range name {
		if c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return fmt.Errorf("%q is not a variable name: use letters, digits and _, not starting with a digit", name)
	}
	return nil
}

func (d *decoder) env(n ast.Node, path string) Env {
	var out Env
	seen := map[string]bool{}
	addVar := func(at ast.Node, p string, v EnvVar) {
		if err := checkEnvName(v.Name); err != nil {
			msg, fix := splitFix(err)
			d.errorAt(at, p, msg, fix)
			return
		}
		if seen[v.Name] {
			d.errorAt(at, p, fmt.Sprintf("%s is set twice", v.Name), "keep one")
			return
		}
		seen[v.Name] = true
		out = append(out, v)
	}
	if d.isMap(n) {
		kvs, _ := d.entries(n, path, "environment variables")
		for _, kv := range kvs {
			p := join(path, kv.key)
			v := EnvVar{Name: kv.key}
			if r := d.resolve(kv.value, p); r != nil && !isNull(r) {
				v.Value, v.HasValue = d.str(r, p)
			}
			addVar(kv.keyN, p, v)
		}
		return out
	}
	items, _ := d.seq(n, path, "a list of NAME=value (or a mapping)")
	for i, it := range items {
		p := index(path, i)
		s, ok := d.str(it, p)
		if !ok {
			continue
		}
		name, val, has := strings.Cut(s, "=")
		addVar(it, p, EnvVar{Name: strings.TrimSpace(name), Value: val, HasValue: has})
	}
	return out
}

// list decodes a sequence item by item: item reads the node at p and says
// whether it yields a value (it reports its own errors). The result is
// never nil, so an empty list stays an empty list.
func list[T any](d *decoder, n ast.Node, path, what string, item func(it ast.Node, p string) (T, bool)) []T {
	items, _ := d.seq(n, path, what)
	out := make([]T, 0, len(items))
	for i, it := range items {
		if v, ok := item(it, index(path, i)); ok {
			out = append(out, v)
		}
	}
	return out
}

// VolumeMount attaches a network volume (Name) or a directory of the
// instance (InstancePath) at Path inside the job. An optional instance
// mount is skipped where the directory does not exist.
type VolumeMount struct {
	Name         string `json:"name,omitempty"`
	InstancePath string `json:"instance_path,omitempty"`
	Path         string `json:"path"`
	Optional     bool   `json:"optional,omitempty"`
}

func (d *decoder) volumeMounts(n ast.Node, path string) []VolumeMount {
	return list(d, n, path, "a list of volumes", func(it ast.Node, p string) (VolumeMount, bool) {
		var v VolumeMount
		if !d.isMap(it) {
			s, ok := d.str(it, p)
			if !ok {
				return v, false
			}
			src, dst, found := strings.Cut(s, ":")
			if !found || src == "" || dst == "" {
				d.errorAt(it, p, fmt.Sprintf("%q is not a volume mount", s),
					"write volume-name:/path for a network volume or /instance/path:/path for an instance directory")
				return v, false
			}
			if strings.HasPrefix(src, "/") || strings.HasPrefix(src, "~") {
				v.InstancePath = src
			} else {
				v.Name = src
			}
			v.Path = dst
		} else {
			present := d.object(it, p, "a volume mount", fields{
				"name":          func(n ast.Node, p string) { v.Name, _ = d.str(n, p) },
				"instance_path": func(n ast.Node, p string) { v.InstancePath, _ = d.str(n, p) },
				"path":          func(n ast.Node, p string) { v.Path, _ = d.str(n, p) },
				"optional":      func(n ast.Node, p string) { v.Optional, _ = d.boolean(n, p) },
			})
			if present == nil {
				return v, false
			}
			d.require(present, it, p, "path", "add the path inside the job, like /data")
			if (v.Name == "") == (v.InstancePath == "") {
				d.errorAt(it, p, "a volume mount needs exactly one of name and instance_path",
					"name mounts a network volume, instance_path a directory of the instance")
			}
		}
		if v.Path != "" && !strings.HasPrefix(v.Path, "/") && !strings.HasPrefix(v.Path, "~") {
			d.errorAt(it, p, fmt.Sprintf("mount path %q is relative", v.Path), "write an absolute path like /data")
		}
		return v, true
	})
}

// Repo is a git repository (local or remote) cloned into the job at Path.
type Repo struct {
	LocalPath string `json:"local_path,omitempty"`
	URL       string `json:"url,omitempty"`
	Branch    string `json:"branch,omitempty"`
	Hash      string `json:"hash,omitempty"`
	Path      string `json:"path,omitempty"`
	IfExists  string `json:"if_exists,omitempty"` // error or skip
}

func isURL(s string) bool {
	return strings.Contains(s, "://") || strings.HasPrefix(s, "git@")
}

func (d *decoder) repos(n ast.Node, path string) []Repo {
	return list(d, n, path, "a list of repos", func(it ast.Node, p string) (Repo, bool) {
		var r Repo
		if !d.isMap(it) {
			s, ok := d.str(it, p)
			if !ok || s == "" {
				return r, false
			}
			if isURL(s) {
				r.URL = s
			} else {
				r.LocalPath, r.Path, _ = strings.Cut(s, ":")
			}
			return r, true
		}
		present := d.object(it, p, "a repo", fields{
			"local_path": func(n ast.Node, p string) { r.LocalPath, _ = d.str(n, p) },
			"url":        func(n ast.Node, p string) { r.URL, _ = d.str(n, p) },
			"branch":     func(n ast.Node, p string) { r.Branch, _ = d.str(n, p) },
			"hash":       func(n ast.Node, p string) { r.Hash, _ = d.str(n, p) },
			"path":       func(n ast.Node, p string) { r.Path, _ = d.str(n, p) },
			"if_exists":  func(n ast.Node, p string) { r.IfExists, _ = d.oneOf(n, p, "error", "skip") },
		})
		if present != nil && (r.LocalPath == "") == (r.URL == "") {
			d.errorAt(it, p, "a repo needs exactly one of local_path and url", "")
		}
		return r, true
	})
}

// FileMapping copies a local file or directory into the job at Path.
type FileMapping struct {
	LocalPath string `json:"local_path"`
	Path      string `json:"path"`
}

func (d *decoder) files(n ast.Node, path string) []FileMapping {
	return list(d, n, path, "a list of files", func(it ast.Node, p string) (FileMapping, bool) {
		var f FileMapping
		if d.isMap(it) {
			present := d.object(it, p, "a file mapping", fields{
				"local_path": func(n ast.Node, p string) { f.LocalPath, _ = d.str(n, p) },
				"path":       func(n ast.Node, p string) { f.Path, _ = d.str(n, p) },
			})
			d.require(present, it, p, "local_path", "add the local file or directory")
		} else {
			s, ok := d.str(it, p)
			if !ok || s == "" {
				return f, false
			}
			f.LocalPath, f.Path, _ = strings.Cut(s, ":")
		}
		if f.Path == "" {
			f.Path = f.LocalPath
		}
		return f, true
	})
}

// Priority is dstack's run priority (0–100, higher first) or one of gpud's
// priority classes, after KAI Scheduler: train, build-preemptible, build,
// inference. Exactly one of Value and Class is meaningful: Class when set.
type Priority struct {
	Value int
	Class string
}

// Priority classes.
const (
	PriorityTrain            = "train"
	PriorityBuildPreemptible = "build-preemptible"
	PriorityBuild            = "build"
	PriorityInference        = "inference"
)

// MarshalJSON writes the class name, or the number.
func (p Priority) MarshalJSON() ([]byte, error) {
	if p.Class != "" {
		return json.Marshal(p.Class)
	}
	return json.Marshal(p.Value)
}

// Preemptible reports the default preemptibility of the priority: train
// and build-preemptible runs (and numeric priorities) may be preempted;
// build and inference runs may not.
func (p Priority) Preemptible() bool {
	return p.Class != PriorityBuild && p.Class != PriorityInference
}

func (d *decoder) priority(n ast.Node, path string) *Priority {
	s, ok := d.str(n, path)
	if !ok || s == "" {
		return nil
	}
	if v, err := strconv.Atoi(s); err == nil {
		if v < 0 || v > 100 {
			d.errorAt(n, path, fmt.Sprintf("priority %d is out of range", v), "use 0 to 100, or a class: train, build-preemptible, build, inference")
			return nil
		}
		return &Priority{Value: v}
	}
	c, ok := d.oneOf(n, path, PriorityTrain, PriorityBuildPreemptible, PriorityBuild, PriorityInference)
	if !ok {
		return nil
	}
	return &Priority{Class: c}
}

// checkName accepts dstack resource names: lowercase letters, digits and
// dashes, starting with a letter, at most 41 characters.
func checkName(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if len(s) > 41 {
		return "", fmt.Errorf("name %q is too long: use at most 41 characters", s)
	}
	for i, c := range s {
		ok := (c >= 'a' && c <= 'z') || (i > 0 && ((c >= '0' && c <= '9') || c == '-'))
		if !ok {
			return "", fmt.Errorf("%q is not a valid name: use lowercase letters, digits and dashes, starting with a letter", s)
		}
	}
	return s, nil
}

// checkCron accepts a five-field cron expression with numbers, names,
// ranges, lists, steps and *.
func checkCron(expr string) error {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return fmt.Errorf("cron %q has %d fields, not 5", expr, len(f))
	}
	for _, field := range f {
		for _, c := range field {
			ok := c == '*' || c == ',' || c == '-' || c == '/' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
			if !ok {
				return fmt.Errorf("cron %q has an invalid character %q", expr, c)
			}
		}
	}
	return nil
}

// PortMapping exposes a job port. Local is the port on the client or
// instance side; 0 means the same as Container, and LocalAny ("*:8080")
// means any free port.
type PortMapping struct {
	Local     int
	LocalAny  bool
	Container int
}

// String writes the mapping the way the configuration reads it.
func (m PortMapping) String() string {
	switch {
	case m.LocalAny:
		return "*:" + strconv.Itoa(m.Container)
	case m.Local != 0:
		return strconv.Itoa(m.Local) + ":" + strconv.Itoa(m.Container)
	}
	return strconv.Itoa(m.Container)
}

// MarshalJSON writes String: a number for a plain port, else a string.
func (m PortMapping) MarshalJSON() ([]byte, error) {
	if !m.LocalAny && m.Local == 0 {
		return json.Marshal(m.Container)
	}
	return json.Marshal(m.String())
}

// ParsePort reads "8080", "80:8080" or "*:8080".
func ParsePort(s string) (PortMapping, error) {
	var m PortMapping
	local, container, mapped := strings.Cut(strings.TrimSpace(s), ":")
	if !mapped {
		container, local = local, ""
	}
	c, err := portNumber(container)
	if err != nil {
		return m, err
	}
	m.Container = c
	switch {
	case local == "*":
		m.LocalAny = true
	case mapped:
		if m.Local, err = portNumber(local); err != nil {
			return m, err
		}
	}
	return m, nil
}

func portNumber(s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < 1 || v > 65535 {
		return 0, fmt.Errorf("%q is not a port: use a number from 1 to 65535, or local:container like 80:8080", s)
	}
	return v, nil
}

func (d *decoder) ports(n ast.Node, path string) []PortMapping {
	return list(d, n, path, "a list of ports", func(it ast.Node, p string) (PortMapping, bool) {
		return value(d, it, p, ParsePort)
	})
}
