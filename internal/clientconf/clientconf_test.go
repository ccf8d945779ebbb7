package clientconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestResolvePicksServerByPrecedence(t *testing.T) {
	file := &File{Current: "team", Servers: map[string]*Server{
		"team": {URL: "http://team:3000", Token: "team-token", Project: "ml"},
		"lab":  {URL: "https://lab.example", Token: "lab-token"},
	}}
	tests := []struct {
		name          string
		file          *File
		env           map[string]string
		server, proj  string
		want          Target
		wantErrSubstr string
	}{
		{name: "no file and no env means embedded in project main", file: &File{},
			want: Target{Embedded: true, Project: "main"}},
		{name: "current entry with its project", file: file,
			want: Target{Name: "team", URL: "http://team:3000", Token: "team-token", Project: "ml"}},
		{name: "--server picks another entry, project defaults to main", file: file, server: "lab",
			want: Target{Name: "lab", URL: "https://lab.example", Token: "lab-token", Project: "main"}},
		{name: "GPUD_SERVER and GPUD_TOKEN beat the file", file: file,
			env:  map[string]string{EnvServer: "http://127.0.0.1:9/", EnvToken: "t"},
			want: Target{URL: "http://127.0.0.1:9", Token: "t", Project: "main"}},
		{name: "GPUD_TOKEN alone replaces the entry's token", file: file,
			env:  map[string]string{EnvToken: "other"},
			want: Target{Name: "team", URL: "http://team:3000", Token: "other", Project: "ml"}},
		{name: "--project beats GPUD_PROJECT beats the entry", file: file, proj: "cv",
			env:  map[string]string{EnvProject: "nlp"},
			want: Target{Name: "team", URL: "http://team:3000", Token: "team-token", Project: "cv"}},
		{name: "GPUD_PROJECT beats the entry", file: file,
			env:  map[string]string{EnvProject: "nlp"},
			want: Target{Name: "team", URL: "http://team:3000", Token: "team-token", Project: "nlp"}},
		{name: "a single entry is used without current", file: &File{Servers: map[string]*Server{"only": {URL: "http://a:1", Token: "x"}}},
			want: Target{Name: "only", URL: "http://a:1", Token: "x", Project: "main"}},
		{name: "unknown --server names the known ones", file: file, server: "nope", wantErrSubstr: "known: lab, team"},
		{name: "a GPUD_SERVER that is not a URL is refused", file: file,
			env: map[string]string{EnvServer: "team:3000"}, wantErrSubstr: "GPUD_SERVER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(env(tt.env), tt.file, tt.server, tt.proj)
			if tt.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErrSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLoginSavesPrivateFileThatLoadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", "config.yml")
	f, exists, err := Load(path)
	if err != nil || exists {
		t.Fatalf("missing file: exists=%v err=%v, want an empty file", exists, err)
	}
	if err := f.Login("team", Server{URL: "http://127.0.0.1:3000/", Token: "secret"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600 (the file holds tokens)", st.Mode().Perm())
	}
	back, exists, err := Load(path)
	if err != nil || !exists {
		t.Fatalf("load: exists=%v err=%v", exists, err)
	}
	s := back.Servers["team"]
	if back.Current != "team" || s == nil || s.URL != "http://127.0.0.1:3000" || s.Token != "secret" {
		t.Fatalf("loaded %+v (server %+v), want current team with the trimmed URL and token", back, s)
	}
}

func TestLoginRefusesBadInput(t *testing.T) {
	tests := []struct {
		name, server string
		s            Server
		want         string
	}{
		{"empty name", "", Server{URL: "http://a:1", Token: "t"}, "--name"},
		{"URL without scheme", "a", Server{URL: "a:1", Token: "t"}, "http://host:port"},
		{"empty token", "a", Server{URL: "http://a:1"}, "--token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&File{}).Login(tt.server, tt.s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLoadRejectsBrokenFiles(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"not YAML", "servers: [", "config.yml"},
		{"entry without url", "servers:\n  a:\n    token: x\n", "url is missing"},
		{"current names no entry", "current: b\nservers:\n  a:\n    url: http://a:1\n", `no server named "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yml")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestHomePrefersGPUDHome(t *testing.T) {
	got, err := Home(env(map[string]string{EnvHome: "/tmp/x"}))
	if err != nil || got != "/tmp/x" {
		t.Fatalf("Home = %q, %v; want /tmp/x", got, err)
	}
	got, err = Home(env(nil))
	if err != nil || !strings.HasSuffix(got, "/.gpud") {
		t.Fatalf("Home = %q, %v; want ~/.gpud", got, err)
	}
}
