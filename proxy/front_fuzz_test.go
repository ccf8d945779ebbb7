package proxy

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
)

// FuzzFrontParse checks the front's parser against net/http's: whatever
// request the front accepts (headEnd, then parseHead), net/http's
// ReadRequest must accept too and read alike — the method, the target,
// the URL, the Host, every header, the body's length, Connection: close —
// and frame it alike: the body and the bytes after it are the same for
// both, so no request can be smuggled past one of them in the other's
// reading. Requests the front refuses go to net/http whole, so they need
// no check. Run it longer with `go test ./proxy -run '^$' -fuzz
// FuzzFrontParse -fuzztime 1m`.
func FuzzFrontParse(f *testing.F) {
	for _, tc := range smuggling {
		if len(tc.payload) < 16<<10 { // the large ones only slow the mutations down
			f.Add([]byte(tc.payload))
		}
	}
	f.Add([]byte("GET /a?b HTTP/1.1\r\nHost: h\r\nA: 1\r\na: 2\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, ok := headEnd(data)
		if !ok || n == 0 {
			return
		}
		h, ok := parseHead(data[:n])
		if !ok {
			return
		}
		br := bufio.NewReader(bytes.NewReader(data))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("the front accepts what net/http refuses (%v):\n%q", err, data[:n])
		}
		if req.Method != h.method || req.RequestURI != h.target || req.URL.String() != h.url.String() ||
			req.Host != h.host || req.ContentLength != h.contentLength || len(req.TransferEncoding) != 0 ||
			req.Close != h.close || req.ProtoMajor != 1 || req.ProtoMinor != 1 {
			t.Fatalf("read otherwise:\nfront:    %s %s %s host=%s cl=%d close=%v\nnet/http: %s %s %s host=%s cl=%d te=%v close=%v proto=%s\n%q",
				h.method, h.target, h.url, h.host, h.contentLength, h.close,
				req.Method, req.RequestURI, req.URL, req.Host, req.ContentLength, req.TransferEncoding, req.Close, req.Proto, data[:n])
		}
		theirs := req.Header.Clone()
		delete(theirs, "Host") // as net/http's server does
		if !maps.EqualFunc(map[string][]string(theirs), map[string][]string(h.header), slices.Equal) {
			t.Fatalf("headers read otherwise:\nfront:    %v\nnet/http: %v\n%q", h.header, theirs, data[:n])
		}
		// The same framing: net/http's body, then what follows it.
		body, berr := io.ReadAll(req.Body)
		rest, _ := io.ReadAll(br)
		end := min(n+int(h.contentLength), len(data))
		if !bytes.Equal(body, data[n:end]) || berr == nil && !bytes.Equal(rest, data[end:]) {
			t.Fatalf("framed otherwise: net/http's body %q (%v) and rest %q, the front's body %q and rest %q",
				body, berr, rest, data[n:end], data[end:])
		}
	})
}
