package proxy

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzRoute: whatever the host and path, routing never panics, a path
// route's prefix is a prefix of the path that names exactly the project
// and run it returns, and a request reaches only a service its host or
// path names.
func FuzzRoute(f *testing.F) {
	for _, seed := range [][2]string{
		{"web.example.test", "/"},
		{"WEB.example.test.:443", "/x"},
		{"", "/proxy/services/main/web/v1"},
		{"", "/proxy/services/main/web"},
		{"", "/proxy/services//web/"},
		{"", "/proxy/services/main//"},
		{"evil", "/proxy/services/main/../other/web/"},
		{"[::1]:80", "/proxy/services/a/b/c/d"},
	} {
		f.Add(seed[0], seed[1])
	}
	res := newResolver(
		&Service{Project: "main", Run: "web", Hosts: []string{"web.example.test"}},
		&Service{Project: "other", Run: "web"},
	)
	g, err := New(res, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host, path string) {
		project, run, prefix, ok := ParsePath(path)
		if ok {
			if !strings.HasPrefix(path, prefix) || prefix != PathPrefix+project+"/"+run || project == "" || run == "" ||
				strings.Contains(project, "/") || strings.Contains(run, "/") {
				t.Fatalf("ParsePath(%q) = %q %q %q", path, project, run, prefix)
			}
		}
		r := httptest.NewRequest("GET", "http://x/", nil)
		r.Host = host
		r.URL = &url.URL{Path: path}
		svc, pfx, ok := g.Route(r)
		if !ok {
			return
		}
		byHost := hostOf(r) == "web.example.test"
		switch {
		case byHost && (svc.Key() != "main/web" || pfx != ""):
			t.Fatalf("host %q routed to %s (prefix %q)", host, svc.Key(), pfx)
		case !byHost && (pfx == "" || !strings.HasPrefix(path, pfx) || svc.Key() != strings.TrimPrefix(pfx, PathPrefix)):
			t.Fatalf("path %q routed to %s (prefix %q)", path, svc.Key(), pfx)
		}
	})
}
