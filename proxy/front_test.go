package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echoHandler answers with what it saw of the request, so that two
// servers that parse a request alike give the same answers; viaFront
// counts the requests the front served itself.
func echoHandler(viaFront *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*frontResponse); ok && viaFront != nil {
			viaFront.Add(1)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var hdr []string
		for k, vv := range r.Header {
			hdr = append(hdr, k+"="+strings.Join(vv, "|"))
		}
		slices.Sort(hdr)
		fmt.Fprintf(w, "method=%s uri=%s path=%q host=%s cl=%d te=%v close=%v body=%q hdr=%v",
			r.Method, r.RequestURI, r.URL.Path, r.Host, r.ContentLength, r.TransferEncoding, r.Close, body, hdr)
	})
}

// rawExchange writes payload on a new connection to addr, half-closes it
// and reads every answer until the server closes: each as "status body
// [headers]" (Date left out), then "closed".
func rawExchange(t *testing.T, addr, payload string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	var out []string
	method, _, _ := strings.Cut(payload, " ")
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		method = "GET"
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				out = append(out, "error "+err.Error())
			}
			break
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			out = append(out, "body error "+err.Error())
			break
		}
		var hdr []string
		for k, vv := range resp.Header {
			if k != "Date" {
				hdr = append(hdr, k+"="+strings.Join(vv, "|"))
			}
		}
		slices.Sort(hdr)
		out = append(out, fmt.Sprintf("%d %q %v te=%v cl=%d close=%v trailer=%v", resp.StatusCode, b, hdr,
			resp.TransferEncoding, resp.ContentLength, resp.Close, resp.Trailer))
	}
	return append(out, "closed")
}

// twoServers serves h with net/http alone and through a Front.
func twoServers(t *testing.T, h http.Handler) (plain, front string) {
	t.Helper()
	p := httptest.NewUnstartedServer(h)
	p.Config.ReadHeaderTimeout = 10 * time.Second
	p.Start()
	t.Cleanup(p.Close)
	f := serveOnFront(t, h)
	return p.Listener.Addr().String(), f.Listener.Addr().String()
}

// smuggling are requests a front must not read otherwise than net/http:
// name, bytes, and whether the front may serve the first request itself
// (false: it must hand it over).
var smuggling = []struct {
	name, payload string
	front         bool
}{
	{"plain GET", "GET /a?b=c HTTP/1.1\r\nHost: svc.test\r\nUser-Agent: t\r\n\r\n", true},
	{"keep-alive then close", "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"pipelined with bodies", "POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloPOST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"CL then TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"TE then CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"two equal CLs", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", false},
	{"two CLs", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 30\r\n\r\nhelloGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"CL list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", false},
	{"CL with plus", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", false},
	{"CL negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", false},
	{"CL hex", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello", false},
	{"CL huge", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\nhello", false},
	{"CL space inside", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\nhellohello", false},
	{"CL leading zeros", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello", true},
	{"CL with spaces around", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  5 \r\n\r\nhello", true},
	{"CL beyond the fast path", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 70000), false},
	{"space before colon", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello", false},
	{"TE chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
	{"TE Chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
	{"TE identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello", false},
	{"TE list", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", false},
	{"TE tab", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n", false},
	{"TE lower name", "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", false},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n two\r\n\r\n", false},
	{"obs-fold on CL", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n 5\r\n\r\nhello", false},
	{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", false},
	{"bare LF in a header", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", false},
	{"bare CR", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n", false},
	{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n", false},
	{"NUL in the path", "GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"obs-text", "GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n", false},
	{"non-token name", "GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", false},
	{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", false},
	{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n", false},
	{"no Host", "GET / HTTP/1.1\r\nX-A: b\r\n\r\n", false},
	{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
	{"Host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", false},
	{"Host with userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", false},
	{"Host with port", "GET / HTTP/1.1\r\nHost: a.test:8080\r\n\r\n", true},
	{"empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", false},
	{"absolute-form", "GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"asterisk-form", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"CONNECT", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", false},
	{"lower-case method", "get / HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"method with a slash", "G/T / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"double space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"trailing space", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", false},
	{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", false},
	{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", false},
	{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", false},
	{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false},
	{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", false},
	{"bad escape", "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"escapes", "GET /a%2Fb%20c?q=%41 HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"Expect", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", false},
	{"Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
	{"h2c upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", false},
	{"Connection close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /after HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"Connection keep-alive, close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\nGET /after HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"leading CRLF", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"CRLF after a POST", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"header of 9 KiB", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 9<<10) + "\r\n\r\n", false},
	{"header of 2 MiB", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n", false},
	{"many headers", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-A: b\r\n", 150) + "\r\n", false},
	{"Pragma no-cache", "GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n", true},
	{"HEAD", "HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"truncated head", "GET / HTTP/1.1\r\nHost: a\r\n", true},
	{"truncated body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello", true},
	{"in-subset then odd", "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n", true},
}

// TestFrontReadsRequestsAsNetHTTPDoes sends every request of the
// smuggling table to net/http alone and through the front: the answers
// (what the handler saw, statuses, closes) must be the same, and the
// front must serve none of the requests outside its subset itself.
func TestFrontReadsRequestsAsNetHTTPDoes(t *testing.T) {
	var viaFront atomic.Int64
	plain, front := twoServers(t, echoHandler(&viaFront))
	for _, tc := range smuggling {
		t.Run(tc.name, func(t *testing.T) {
			before := viaFront.Load()
			want := rawExchange(t, plain, tc.payload)
			got := rawExchange(t, front, tc.payload)
			if !slices.Equal(got, want) {
				t.Errorf("through the front:\n%s\nnet/http alone:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			served := viaFront.Load() - before
			if !tc.front && served > 0 && !strings.HasPrefix(tc.name, "in-subset") {
				t.Errorf("the front served %d request(s) outside its subset", served)
			}
			if tc.front && served == 0 && !strings.HasPrefix(tc.name, "truncated") {
				t.Errorf("the front served none of an in-subset request (handed over)")
			}
		})
	}
}

// answers are handlers that try the response writer's rules.
func answers() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html>hi</html>") })
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, strings.Repeat("x", 5000)) })
	mux.HandleFunc("/flushed", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "data: 2\n\n")
	})
	mux.HandleFunc("/length", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
		if _, err := io.WriteString(w, "!"); !errors.Is(err, http.ErrContentLength) {
			panic("a write past Content-Length: " + fmt.Sprint(err))
		}
	})
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "hello")
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		w.WriteHeader(http.StatusNoContent)
		if _, err := io.WriteString(w, "abc"); !errors.Is(err, http.ErrBodyNotAllowed) {
			panic("a body on 204: " + fmt.Sprint(err))
		}
	})
	mux.HandleFunc("/notmodified", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Etag", `"1"`)
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/early", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
		w.WriteHeader(http.StatusAccepted) // superfluous
		_, _ = io.WriteString(w, "made")
	})
	mux.HandleFunc("/identity", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		_, _ = io.WriteString(w, "until close")
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	})
	mux.HandleFunc("/encoded", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = io.WriteString(w, "\x1f\x8b not really")
	})
	mux.HandleFunc("/odd-headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Bad Name"] = []string{"x"}
		w.Header().Set("X-Split", "a\r\nInjected: yes")
		w.Header()["Date"] = nil // no Date at all
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("/status-999", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(999) })
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	return mux
}

// TestFrontAnswersAsNetHTTPDoes compares what goes on the wire for
// answers that exercise framing, trailers, bodiless statuses, 1xx,
// closes and panics, from net/http alone and from the front.
func TestFrontAnswersAsNetHTTPDoes(t *testing.T) {
	var viaFront atomic.Int64
	count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*frontResponse); ok {
			viaFront.Add(1)
		}
		answers().ServeHTTP(w, r)
	})
	plain, front := twoServers(t, count)
	for _, path := range []string{"/small", "/empty", "/large", "/flushed", "/length", "/short", "/trailers", "/nocontent",
		"/notmodified", "/early", "/identity", "/close", "/encoded", "/odd-headers", "/status-999", "/panic"} {
		for _, method := range []string{"GET", "HEAD"} {
			t.Run(method+path, func(t *testing.T) {
				payload := method + " " + path + " HTTP/1.1\r\nHost: a\r\n\r\nGET /small HTTP/1.1\r\nHost: a\r\n\r\n"
				before := viaFront.Load()
				want := rawExchange(t, plain, payload)
				got := rawExchange(t, front, payload)
				if !slices.Equal(got, want) {
					t.Errorf("through the front:\n%s\nnet/http alone:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				if viaFront.Load() == before {
					t.Error("the front served none of it")
				}
			})
		}
	}
}
