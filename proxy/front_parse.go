package proxy

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// The front's request parser (front.go): it accepts only a strict subset
// of HTTP/1.1 and says "hand over" for anything else, so that net/http's
// own parser judges every request outside the subset. The subset:
//
//   - the request line METHOD SP origin-form SP "HTTP/1.1" CRLF, METHOD a
//     token other than CONNECT, the target "/" followed by URI characters
//     (unreserved, sub-delims, ":", "@", "/", "?", and "%" with two hex
//     digits);
//   - header lines NAME ":" OWS VALUE OWS CRLF, NAME a token, VALUE
//     visible ASCII, SP and HTAB only (no obs-fold, no obs-text, no NUL,
//     no CR or LF of its own);
//   - exactly one Host, of letters, digits and "-._:[]";
//   - at most one Content-Length, digits only, up to fastMaxBody;
//   - no Transfer-Encoding, Upgrade, Expect or HTTP2-Settings;
//   - every line ending CRLF, the head ending with an empty line, all of
//     it within frontMaxHead bytes and frontMaxHeaders lines.

const (
	// frontMaxHead bounds the head the front reads itself: a larger one
	// goes to net/http (whose MaxHeaderBytes applies).
	frontMaxHead = 8 << 10
	// frontMaxHeaders bounds the header lines of a request on the front.
	frontMaxHeaders = 100
)

// headEnd finds the end of a request head in buf: n is the length of the
// head with its empty line; n 0 and ok true when more bytes are needed;
// ok false when the bytes already leave the subset (a bare LF, a CR not
// before LF at a line's end).
func headEnd(buf []byte) (n int, ok bool) {
	start := 0
	for {
		i := bytes.IndexByte(buf[start:], '\n')
		if i < 0 {
			return 0, true
		}
		i += start
		if i == 0 || buf[i-1] != '\r' {
			return 0, false // a bare LF: net/http decides
		}
		if i-1 == start {
			if start == 0 {
				return 0, false // an empty first line: net/http decides
			}
			return i + 1, true
		}
		start = i + 1
	}
}

// frontHead is a request head in the front's subset.
type frontHead struct {
	method, target string
	url            *url.URL
	header         http.Header
	host           string
	contentLength  int64
	close          bool // Connection: close
}

// parseHead parses head (headEnd's bytes, the empty line included); ok
// false for a request outside the subset, which net/http must judge.
func parseHead(head []byte) (h frontHead, ok bool) {
	s := string(head) // one copy; every name and value is a slice of it
	line, rest, found := cutCRLF(s)
	if !found {
		return h, false
	}
	sp1 := indexByte(line, ' ')
	if sp1 <= 0 {
		return h, false
	}
	h.method = line[:sp1]
	if !isToken(h.method) || h.method == "CONNECT" {
		return h, false
	}
	line = line[sp1+1:]
	sp2 := indexByte(line, ' ')
	if sp2 <= 0 || line[sp2+1:] != "HTTP/1.1" {
		return h, false
	}
	h.target = line[:sp2]
	if !validTarget(h.target) {
		return h, false
	}
	u, err := url.ParseRequestURI(h.target)
	if err != nil {
		return h, false
	}
	h.url = u
	h.contentLength = 0
	hosts, lengths, lines := 0, 0, 0
	h.header = make(http.Header, 8)
	// The values share one array: one allocation, not one per header.
	vals := make([]string, 0, strings.Count(rest, "\r\n"))
	for {
		line, rest, found = cutCRLF(rest)
		if !found {
			return h, false
		}
		if line == "" {
			break
		}
		if lines++; lines > frontMaxHeaders {
			return h, false
		}
		colon := indexByte(line, ':')
		if colon <= 0 {
			return h, false
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !isToken(name) || !validValue(value) {
			return h, false
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		switch key {
		case "Host":
			if hosts++; hosts > 1 || !validHost(value) {
				return h, false
			}
			h.host = value
		case "Content-Length":
			n, ok := parseLength(value)
			if lengths++; lengths > 1 || !ok {
				return h, false
			}
			h.contentLength = n
		case "Transfer-Encoding", "Upgrade", "Expect", "Http2-Settings":
			return h, false
		case "Connection":
			if hasToken(value, "close") {
				h.close = true
			}
			if hasToken(value, "upgrade") {
				return h, false
			}
		}
		if vv := h.header[key]; vv != nil {
			h.header[key] = append(vv, value)
		} else {
			vals = append(vals, value)
			h.header[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	if rest != "" || hosts != 1 {
		return h, false
	}
	// What net/http's readRequest does to every request.
	delete(h.header, "Host")
	if pragma := h.header["Pragma"]; len(pragma) > 0 && pragma[0] == "no-cache" {
		if _, ok := h.header["Cache-Control"]; !ok {
			h.header["Cache-Control"] = []string{"no-cache"}
		}
	}
	return h, true
}

func cutCRLF(s string) (line, rest string, ok bool) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\r' {
			if s[i+1] != '\n' {
				return "", "", false
			}
			return s[:i], s[i+2:], true
		}
	}
	return "", "", false
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// isToken says whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}

var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// targetChars are the bytes of an origin-form target besides "%".
var targetChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "-._~!$&'()*+,;=:@/?" {
		t[c] = true
	}
	return t
}()

func validTarget(s string) bool {
	if s == "" || s[0] != '/' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
			continue
		}
		if !targetChars[c] {
			return false
		}
	}
	return true
}

// validValue: visible ASCII, SP and HTAB.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
}

func validHost(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length of digits only, up to fastMaxBody.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 6 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, n <= fastMaxBody
}

// hasToken says whether the comma-separated list v holds token (any
// case).
func hasToken(v, token string) bool {
	for len(v) > 0 {
		var elem string
		if i := indexByte(v, ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			elem, v = v, ""
		}
		if len(trimOWS(elem)) == len(token) && equalFold(trimOWS(elem), token) {
			return true
		}
	}
	return false
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
