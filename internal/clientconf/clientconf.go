// Package clientconf owns the client's configuration file,
// ~/.gpud/config.yml (or $GPUD_HOME/config.yml): the servers the CLI knows,
// each with its URL, bearer token and default project, and which one is
// current. It resolves the server a command talks to from the file, the
// GPUD_SERVER / GPUD_TOKEN / GPUD_PROJECT environment variables and flags.
//
// clientconf imports only the leaves api (its YAML set-up) and
// internal/atomicfile: it is read by the command line before anything else
// is wired, and must never import daemon, store, agent or sched.
package clientconf

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/atomicfile"
)

// DefaultProject is the project a command uses when neither the flag, the
// environment nor the server entry names one.
const DefaultProject = "main"

// Environment variables that override the file.
const (
	EnvHome    = "GPUD_HOME"    // the directory holding config.yml and the embedded server's state
	EnvServer  = "GPUD_SERVER"  // a server URL; set, it replaces the file's current server
	EnvToken   = "GPUD_TOKEN"   // the bearer token for that server
	EnvProject = "GPUD_PROJECT" // the project, unless --project is given
)

// Server is one named server entry of the file.
type Server struct {
	URL     string `yaml:"url"`
	Token   string `yaml:"token"`
	Project string `yaml:"project,omitempty"`
}

// File is the content of config.yml. Servers is keyed by a name chosen at
// login; Current names the entry commands use by default.
type File struct {
	Current string             `yaml:"current,omitempty"`
	Servers map[string]*Server `yaml:"servers,omitempty"`
}

// Home returns the gpud home directory: $GPUD_HOME when set, else ~/.gpud.
// getenv is os.Getenv in production and a map lookup in tests.
func Home(getenv func(string) string) (string, error) {
	if h := getenv(EnvHome); h != "" {
		return h, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the home directory (set %s instead): %w", EnvHome, err)
	}
	return filepath.Join(home, ".gpud"), nil
}

// Path returns the configuration file's path under home.
func Path(home string) string { return filepath.Join(home, "config.yml") }

// Load reads the file at path. A missing file is not an error: it yields an
// empty File, and exists is false.
func Load(path string) (f *File, exists bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read client config: %w", err)
	}
	f = &File{}
	if err := api.DecodeYAML(path, b, f); err != nil {
		return nil, true, fmt.Errorf("%w\n(edit the file, or remove it and run gpud login again)", err)
	}
	for name, s := range f.Servers {
		if s == nil || s.URL == "" {
			return nil, true, fmt.Errorf("%s: servers.%s: url is missing — run gpud login --name %s --url URL --token TOKEN", path, name, name)
		}
	}
	if f.Current != "" && f.Servers[f.Current] == nil {
		return nil, true, fmt.Errorf("%s: current: no server named %q — use one of %s", path, f.Current, strings.Join(f.Names(), ", "))
	}
	return f, true, nil
}

// Save writes f to path atomically (a temporary file renamed over it) with
// mode 0600, since it holds tokens; the directory is created with mode 0700.
func (f *File) Save(path string) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode client config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	return nil
}

// Names returns the server names, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Servers))
	for n := range f.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Login records a server under name and makes it current. It checks the
// URL's shape; whether the token works is the caller's business.
func (f *File) Login(name string, s Server) error {
	if name == "" {
		return errors.New("login: the server name is empty — pass --name NAME")
	}
	if err := CheckURL(s.URL); err != nil {
		return err
	}
	if s.Token == "" {
		return errors.New("login: the token is empty — pass --token TOKEN (the admin token is printed once by gpud serve)")
	}
	s.URL = strings.TrimRight(s.URL, "/")
	if f.Servers == nil {
		f.Servers = map[string]*Server{}
	}
	f.Servers[name] = &s
	f.Current = name
	return nil
}

// CheckURL accepts http:// and https:// URLs with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("server URL %q: use http://host:port or https://host", raw)
	}
	return nil
}

// Target is the server a command talks to.
type Target struct {
	// Embedded is true when no server is configured at all: commands that
	// can (gpud run) start an in-process server; the others say how to log in.
	Embedded bool
	Name     string // the file's entry name; empty for GPUD_SERVER or embedded
	URL      string
	Token    string
	Project  string
}

// Resolve picks the target. Order: GPUD_SERVER (with GPUD_TOKEN) beats the
// file; serverName (the --server flag) picks an entry other than the
// current one; with neither and no entry, the target is embedded. The
// project is the flag, else GPUD_PROJECT, else the entry's, else "main".
// GPUD_TOKEN alone overrides the token of the file's entry.
func Resolve(getenv func(string) string, f *File, serverName, projectFlag string) (Target, error) {
	var t Target
	switch {
	case getenv(EnvServer) != "":
		t.URL = strings.TrimRight(getenv(EnvServer), "/")
		if err := CheckURL(t.URL); err != nil {
			return Target{}, fmt.Errorf("%s: %w", EnvServer, err)
		}
	case serverName != "":
		s := f.Servers[serverName]
		if s == nil {
			return Target{}, fmt.Errorf("--server %q: no such server in the client config — known: %s; add one with gpud login", serverName, strings.Join(f.Names(), ", "))
		}
		t.Name, t.URL, t.Token, t.Project = serverName, s.URL, s.Token, s.Project
	case f.Current != "":
		s := f.Servers[f.Current]
		t.Name, t.URL, t.Token, t.Project = f.Current, s.URL, s.Token, s.Project
	case len(f.Servers) == 1:
		for name, s := range f.Servers {
			t.Name, t.URL, t.Token, t.Project = name, s.URL, s.Token, s.Project
		}
	default:
		t.Embedded = true
	}
	if tok := getenv(EnvToken); tok != "" {
		t.Token = tok
	}
	switch {
	case projectFlag != "":
		t.Project = projectFlag
	case getenv(EnvProject) != "":
		t.Project = getenv(EnvProject)
	case t.Project == "":
		t.Project = DefaultProject
	}
	return t, nil
}
