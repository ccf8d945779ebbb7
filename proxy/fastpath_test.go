package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"strings"
	"testing"
)

// captureTransport keeps the request the reverse proxy would send.
type captureTransport struct{ out *http.Request }

func (c *captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.out = r
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// TestTheFastPathSendsWhatTheReverseProxySends: for requests with every
// header the rewrite treats specially (hop-by-hop ones, ones named in
// Connection, the client's X-Forwarded-*, a server credential, Te), a
// stripped prefix with escapes and a query with ';', the request the fast
// path renders is the reverse proxy's (rewrite) request, header for
// header.
func TestTheFastPathSendsWhatTheReverseProxySends(t *testing.T) {
	cases := []struct {
		name, method, target, body string
		f                          forward
		headers                    [][2]string
		tls                        bool
	}{
		{name: "plain GET", method: "GET", target: "http://svc.example/v1/health?x=1",
			headers: [][2]string{{"User-Agent", "curl/8"}, {"Accept", "*/*"}}},
		{name: "hop-by-hop and spoofed forwarding", method: "GET", target: "http://svc.example/a%2Fb/c?q=1;r=2",
			f: forward{prefix: "", stripAuth: true},
			headers: [][2]string{{"Connection", "keep-alive, X-Secret"}, {"X-Secret", "s"}, {"Keep-Alive", "timeout=5"},
				{"Proxy-Authorization", "Basic x"}, {"Te", "trailers, deflate"}, {"X-Forwarded-For", "6.6.6.6"},
				{"Forwarded", "for=6.6.6.6"}, {"X-Forwarded-Host", "evil"}, {"Authorization", "Bearer gpud"},
				{"Cookie", "a=1"}, {"Cookie", "b=2"}}, tls: true},
		{name: "stripped prefix, POST, kept Authorization", method: "POST", body: `{"a":1}`,
			target:  "http://127.0.0.1/proxy/services/p/s/x%20y/z?bad=%zz&ok=1",
			f:       forward{prefix: "/proxy/services/p/s", strip: true},
			headers: [][2]string{{"Authorization", "Bearer service-key"}, {"Content-Type", "application/json"}}},
		{name: "stripped to the root", method: "DELETE", target: "http://127.0.0.1/proxy/services/p/s",
			f: forward{prefix: "/proxy/services/p/s", strip: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			for _, h := range tc.headers {
				in.Header.Add(h[0], h[1])
			}
			if tc.tls {
				in.TLS = &tls.ConnectionState{}
			}
			f := tc.f
			capture := &captureTransport{}
			rp := &httputil.ReverseProxy{Rewrite: rewrite, Transport: capture}
			rp.ServeHTTP(httptest.NewRecorder(), in.WithContext(context.WithValue(in.Context(), forwardKey{}, &f)))
			want := capture.out
			if want == nil {
				t.Fatal("the reverse proxy sent nothing")
			}

			head := appendForward(nil, in, &f)
			got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(append(head, tc.body...))))
			if err != nil {
				t.Fatalf("the fast path's request does not parse: %v\n%s", err, head)
			}
			if got.Method != want.Method || got.RequestURI != want.URL.RequestURI() || got.Host != want.Host {
				t.Errorf("request line: %s %s host %s, want %s %s host %s", got.Method, got.RequestURI, got.Host,
					want.Method, want.URL.RequestURI(), want.Host)
			}
			wh := want.Header.Clone()
			if wh.Get("User-Agent") == "" {
				wh.Del("User-Agent") // the reverse proxy's "send none"
			}
			gh := got.Header.Clone()
			if want.ContentLength > 0 || tc.method == "POST" {
				if got.ContentLength != want.ContentLength {
					t.Errorf("Content-Length %d, want %d", got.ContentLength, want.ContentLength)
				}
			}
			gh.Del("Content-Length")
			if !reflect.DeepEqual(gh, wh) {
				t.Errorf("headers\n got %v\nwant %v", gh, wh)
			}
		})
	}
}
