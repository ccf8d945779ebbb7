package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
)

// The common request (fastEligible: no upgrade, no Expect, a body of
// known length up to fastMaxBody) skips httputil.ReverseProxy: serveFast
// renders the replica's request straight from the client's (the rewrite
// of forward.go: path, Host, X-Forwarded-*, no hop-by-hop header, no
// server credential) into one buffer, sends it on a pooled connection
// (upstream.go) and copies the answer back, flushing each write as the
// reverse proxy does. The same rules, without the reverse proxy's clone
// of the request, its header maps and its context: those allocations
// and copies were most of the gateway's own cost per request. Other
// requests go through the reverse proxy.

// hopHeaders are the hop-by-hop headers a proxy never forwards (RFC 9110
// 7.6.1), as httputil.ReverseProxy removes them.
var hopHeaders = map[string]bool{"Connection": true, "Proxy-Connection": true, "Keep-Alive": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true}

// forwardedHeaders are the client's own X-Forwarded-* and Forwarded: the
// gateway sets its own (as the reverse proxy's Rewrite does).
var forwardedHeaders = map[string]bool{"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true,
	"X-Forwarded-Proto": true}

// heads lends serveFast its request buffers.
var heads = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// serveFast forwards r, which fastEligible admits, to a replica of st.
func (st *serviceState) serveFast(w http.ResponseWriter, r *http.Request, f *forward) {
	body, err := readBody(r)
	if err != nil {
		st.proxyError(w, r, err)
		return
	}
	bp := heads.Get().(*[]byte)
	head := appendForward((*bp)[:0], r, f)
	resp, err := st.sendFast(r, f, head, body)
	*bp = head[:0]
	heads.Put(bp)
	if err != nil {
		st.proxyError(w, r, err)
		return
	}
	defer resp.Body.Close()
	dst := w.Header()
	removeConnectionHeaders(resp.Header)
	for k, vv := range resp.Header {
		if !hopHeaders[k] {
			dst[k] = vv
		}
	}
	if len(resp.Trailer) > 0 {
		keys := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	announced := len(resp.Trailer)
	w.WriteHeader(resp.StatusCode)
	if err := copyFlushing(w, resp.Body); err != nil {
		if r.Context().Value(http.ServerContextKey) != nil {
			// The answer is cut: the client must see it cut, not
			// complete (as the reverse proxy does).
			panic(http.ErrAbortHandler)
		}
		return
	}
	if len(resp.Trailer) == 0 {
		return
	}
	_ = http.NewResponseController(w).Flush()
	if len(resp.Trailer) == announced {
		for k, vv := range resp.Trailer {
			dst[k] = vv
		}
		return
	}
	for k, vv := range resp.Trailer {
		for _, v := range vv {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
}

// copyFlushing copies an answer's body to w, flushing each write so that
// SSE and streamed tokens reach the client as they come; the last bytes
// of a body go out when the handler returns.
func copyFlushing(w http.ResponseWriter, body io.Reader) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	flusher, _ := w.(http.Flusher)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if err == nil && flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// removeConnectionHeaders drops the headers that h's Connection header
// names (hop-by-hop by that naming).
func removeConnectionHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for sf := range strings.SplitSeq(v, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(sf))
			}
		}
	}
}

// connectionNamed says whether r's Connection header names key.
func connectionNamed(conn []string, key string) bool {
	for _, v := range conn {
		for sf := range strings.SplitSeq(v, ",") {
			if sf = textproto.TrimString(sf); sf != "" && textproto.CanonicalMIMEHeaderKey(sf) == key {
				return true
			}
		}
	}
	return false
}

// appendForward renders the request a replica sees for r: what rewrite
// (forward.go) makes of it through the reverse proxy.
func appendForward(buf []byte, r *http.Request, f *forward) []byte {
	buf = append(buf, r.Method...)
	buf = append(buf, ' ')
	u := *r.URL
	if f != nil && f.strip {
		esc := strings.TrimPrefix(r.URL.EscapedPath(), f.prefix)
		if esc == "" || esc[0] != '/' {
			esc = "/" + esc
		}
		if p, err := url.PathUnescape(esc); err == nil {
			u.Path, u.RawPath = p, esc
		} else {
			u.Path, u.RawPath = "/"+strings.TrimLeft(strings.TrimPrefix(r.URL.Path, f.prefix), "/"), ""
		}
	}
	u.RawQuery = cleanQuery(u.RawQuery)
	buf = append(buf, u.RequestURI()...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, r.Host...)
	buf = append(buf, "\r\n"...)
	if len(r.Header) > 0 || r.ContentLength > 0 {
		conn := r.Header["Connection"]
		stripAuth := f == nil || f.stripAuth
		for k, vv := range r.Header {
			switch {
			case k == "Te":
				for _, v := range vv {
					if strings.Contains(strings.ToLower(v), "trailers") {
						buf = append(buf, "Te: trailers\r\n"...)
						break
					}
				}
				continue
			case hopHeaders[k], forwardedHeaders[k], k == "Host", k == "Content-Length",
				k == "Authorization" && stripAuth, len(conn) > 0 && connectionNamed(conn, k):
				continue
			}
			for _, v := range vv {
				buf = appendHeader(buf, k, v)
			}
		}
	}
	if r.ContentLength > 0 || r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH" {
		buf = append(buf, "Content-Length: "...)
		buf = appendInt(buf, r.ContentLength)
		buf = append(buf, "\r\n"...)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		buf = appendHeader(buf, "X-Forwarded-For", ip)
	}
	buf = appendHeader(buf, "X-Forwarded-Host", r.Host)
	if r.TLS != nil {
		buf = append(buf, "X-Forwarded-Proto: https\r\n"...)
	} else {
		buf = append(buf, "X-Forwarded-Proto: http\r\n"...)
	}
	return append(buf, "\r\n"...)
}

func appendInt(buf []byte, n int64) []byte {
	if n <= 0 {
		return append(buf, '0')
	}
	var d [20]byte
	i := len(d)
	for n > 0 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(buf, d[i:]...)
}

// cleanQuery re-encodes a query the replica might read otherwise than
// the gateway (a ';' separator, a bad escape), as the reverse proxy does.
func cleanQuery(q string) string {
	for i := 0; i < len(q); {
		switch q[i] {
		case ';':
			return reencodeQuery(q)
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return reencodeQuery(q)
			}
			i += 3
		default:
			i++
		}
	}
	return q
}

func reencodeQuery(q string) string {
	v, _ := url.ParseQuery(q) // what parses is kept; the rest is dropped
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
