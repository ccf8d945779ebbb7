package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeResolver serves snapshots the test sets; a request's token is
// "Bearer good" for services with auth.
type fakeResolver struct {
	mu      sync.Mutex
	byKey   map[string]*Service
	waiting chan *Service // WaitReplica answers with what arrives here
}

func newResolver(svcs ...*Service) *fakeResolver {
	f := &fakeResolver{byKey: map[string]*Service{}}
	for _, s := range svcs {
		f.set(s)
	}
	return f
}

// set replaces the snapshot of s's service.
func (f *fakeResolver) set(s *Service) {
	f.mu.Lock()
	f.byKey[s.Key()] = s
	f.mu.Unlock()
}

func (f *fakeResolver) ServiceByHost(host string) (*Service, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.byKey {
		for _, h := range s.Hosts {
			if h == host {
				return s, true
			}
		}
	}
	return nil, false
}

func (f *fakeResolver) Service(project, run string) (*Service, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.byKey[project+"/"+run]
	return s, ok
}

func (f *fakeResolver) Models(string) []*Service { return nil }

func (f *fakeResolver) Authorize(r *http.Request, _ *Service) error {
	if r.Header.Get("Authorization") == "Bearer good" {
		return nil
	}
	return errors.New("bad token")
}

func (f *fakeResolver) ServerCredential(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer good"
}

func (f *fakeResolver) WaitReplica(ctx context.Context, svc *Service) (*Service, error) {
	if f.waiting == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	select {
	case s := <-f.waiting:
		f.set(s)
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// backend is a replica: an HTTP server that answers "<name> <path>
// auth=<Authorization> host=<Host>" and counts its requests.
type backend struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
	// closed counts the connections the server saw closed.
	closed atomic.Int64
}

func newBackend(t *testing.T, name string, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{name: name}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s auth=%s host=%s", name, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Host)
		}
	}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		h(w, r)
	}))
	b.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			b.closed.Add(1)
		}
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) replica() Replica {
	return Replica{ID: b.name, Addr: strings.TrimPrefix(b.srv.URL, "http://")}
}

// newGateway serves a gateway over res on a loopback test server.
func newGateway(t *testing.T, res Resolver, opts Options) (*Gateway, *httptest.Server) {
	t.Helper()
	g, err := New(res, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g, serveFront(t, g)
}

// serveFront serves h on a loopback httptest.Server (for its URL and
// Close) whose connections the gateway's Front owns, as on the gateway's
// listeners; GPUD_PROXY_TEST_NETHTTP=1 serves it with net/http alone.
func serveFront(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	if os.Getenv("GPUD_PROXY_TEST_NETHTTP") != "" {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	return serveOnFront(t, h)
}

// serveOnFront is serveFront on a Front whatever the environment says.
func serveOnFront(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	f := NewFront(srv.Config)
	srv.URL = "http://" + srv.Listener.Addr().String()
	done := make(chan error, 1)
	go func() { done <- f.Serve(srv.Listener) }()
	t.Cleanup(func() {
		_ = f.Close()
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("front: %v", err)
		}
	})
	return srv
}

// get sends a GET with optional headers ("Host" sets the host) and
// returns the status, body and response.
func get(t *testing.T, url string, headers ...string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b), resp
}
