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

// FuzzReadSimpleResponse holds the fast path's reader of replicas'
// answers to http.ReadResponse: an answer it accepts, net/http reads
// alike (status, headers, length, close) and frames alike (the body and
// the bytes after it), so that a kept-alive connection to a replica
// never desynchronises.
func FuzzReadSimpleResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\nHTTP/1.1 200 OK\r\n",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 2\r\nPragma: no-cache\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 005\r\nX-A: b\r\n c\r\n\r\nhello",
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\na",
		"HTTP/1.1 200 OK\nContent-Length: 1\n\na",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		req := &http.Request{Method: method}
		br := bufio.NewReaderSize(bytes.NewReader(data), 16<<10)
		_, _ = br.Peek(1) // what one read of the connection brought
		resp := readSimpleResponse(br, req)
		if resp == nil {
			if br.Buffered() != min(len(data), 16<<10) {
				t.Fatal("a refused answer was partly consumed")
			}
			return
		}
		body, berr := io.ReadAll(resp.Body)
		rest, _ := io.ReadAll(br)

		theirs := bufio.NewReader(bytes.NewReader(data))
		want, err := http.ReadResponse(theirs, req)
		if err != nil {
			t.Fatalf("accepted what net/http refuses (%v): %q", err, data)
		}
		if want.StatusCode != resp.StatusCode || want.Status != resp.Status || want.ContentLength != resp.ContentLength ||
			want.Close != resp.Close || want.ProtoMajor != 1 || want.ProtoMinor != 1 ||
			!maps.EqualFunc(map[string][]string(want.Header), map[string][]string(resp.Header), slices.Equal) {
			t.Fatalf("read otherwise:\nfast:     %d %q cl=%d close=%v %v\nnet/http: %d %q cl=%d close=%v %v\n%q",
				resp.StatusCode, resp.Status, resp.ContentLength, resp.Close, resp.Header,
				want.StatusCode, want.Status, want.ContentLength, want.Close, want.Header, data)
		}
		wbody, werr := io.ReadAll(want.Body)
		wrest, _ := io.ReadAll(theirs)
		if !bytes.Equal(body, wbody) || (berr == nil) != (werr == nil) || berr == nil && !bytes.Equal(rest, wrest) {
			t.Fatalf("framed otherwise: fast body %q (%v) rest %q; net/http body %q (%v) rest %q", body, berr, rest, wbody, werr, wrest)
		}
	})
}
