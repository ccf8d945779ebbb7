package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// readResponse reads a replica's answer to req from br: the common
// answer (readSimpleResponse) without net/http's general reader and its
// allocations, anything else with http.ReadResponse.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if resp := readSimpleResponse(br, req); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// readSimpleResponse reads an answer already whole in br's buffer that
// is in a strict subset — "HTTP/1.1 NNN reason" with a status from 200
// to 599 other than 204 and 304, header lines of a token, a colon and
// visible ASCII, exactly one Content-Length of digits, no
// Transfer-Encoding, every line ending CRLF, not to a HEAD request — and
// nil, consuming nothing, for anything else (http.ReadResponse reads
// it). FuzzReadSimpleResponse holds it to http.ReadResponse's reading.
func readSimpleResponse(br *bufio.Reader, req *http.Request) *http.Response {
	if req.Method == "HEAD" {
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 || end+4 > 4096 {
		return nil
	}
	n := end + 4
	s := string(buf[:n])
	line, rest, ok := cutCRLF(s)
	if !ok || len(line) < 12 || line[:9] != "HTTP/1.1 " || len(line) > 12 && line[12] != ' ' {
		return nil
	}
	code := 0
	for i := 9; i < 12; i++ {
		if line[i] < '0' || line[i] > '9' {
			return nil
		}
		code = code*10 + int(line[i]-'0')
	}
	if code < 200 || code > 599 || code == 204 || code == 304 || !validValue(line) {
		return nil
	}
	status := line[9:]
	header := make(http.Header, 8)
	// The values share one array: one allocation, not one per header.
	vals := make([]string, 0, strings.Count(rest, "\r\n"))
	cl := int64(-1)
	closing := false
	for {
		line, rest, ok = cutCRLF(rest)
		if !ok {
			return nil
		}
		if line == "" {
			break
		}
		colon := indexByte(line, ':')
		if colon <= 0 {
			return nil
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !isToken(name) || !validValue(value) {
			return nil
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		switch key {
		case "Content-Length":
			v, ok := parseDigits(value)
			if cl != -1 || !ok {
				return nil
			}
			cl = v
		case "Transfer-Encoding", "Trailer":
			return nil
		case "Connection":
			if hasToken(value, "close") {
				closing = true
			}
		}
		if vv := header[key]; vv != nil {
			header[key] = append(vv, value)
		} else {
			vals = append(vals, value)
			header[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	if cl < 0 || rest != "" {
		return nil
	}
	if closing {
		delete(header, "Connection") // as net/http's reader does
	}
	if pragma := header["Pragma"]; len(pragma) > 0 && pragma[0] == "no-cache" {
		if _, ok := header["Cache-Control"]; !ok {
			header["Cache-Control"] = []string{"no-cache"}
		}
	}
	if _, err := br.Discard(n); err != nil {
		return nil
	}
	resp := &http.Response{Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, ContentLength: cl, Close: closing, Request: req}
	if cl == 0 {
		resp.Body = http.NoBody
	} else {
		resp.Body = &fixedBody{r: br, left: cl}
	}
	return resp
}

// parseDigits reads a decimal number of at most 18 digits.
func parseDigits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// fixedBody is a body of a known length on a kept-alive connection.
type fixedBody struct {
	r    io.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left == 0 && err == nil {
		err = io.EOF
	}
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Close leaves the connection to its owner (fastBody), which closes it
// unless the body was read to its end.
func (b *fixedBody) Close() error { return nil }
