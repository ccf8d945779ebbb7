package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// frontResponse is the front's http.ResponseWriter, with net/http's
// rules for what goes on the wire: the header is sent at the first flush
// or at the end; a handler that ends having written less than
// frontBuffered bytes without a Content-Length gets one, any other answer
// without one is chunked; Date and, for a body without Content-Type, a
// sniffed type are added; 1xx, 204 and 304 carry no body, nor does an
// answer to HEAD; declared trailers (and http.TrailerPrefix headers) end
// a chunked body; a body shorter than its Content-Length, a
// "Connection: close" of the request or of the handler, or a front
// shutting down close the connection after the answer. It supports
// http.Flusher, http.Hijacker and http.ResponseController's deadlines.
type frontResponse struct {
	c      *frontConn
	req    *http.Request
	header http.Header

	status      int  // the final status, once WriteHeader(>= 200)
	wroteHeader bool // WriteHeader(>= 200) was called
	committed   bool // the status line and the header are in c.bw
	handlerDone bool
	hijacked    bool
	closeAfter  bool
	wantsClose  bool // the request's Connection: close

	head     []byte   // the handler's header, rendered at WriteHeader, without the framing ones
	cl       int64    // the handler's Content-Length, -1 if none
	te       string   // its Transfer-Encoding
	conn     []string // its Connection
	hasDate  bool
	hasType  bool
	hasCE    bool
	trailers []string // declared by the Trailer header
	prefixed bool     // a http.TrailerPrefix key was set before the header went
	chunked  bool
	written  int64
	pending  []byte // body before the header is committed
	sniff    []byte // the write that overflowed pending, for the type
}

// frontBuffered is how much body is kept before the header is sent, as
// net/http's bufferBeforeChunkingSize.
const frontBuffered = 2048

func (w *frontResponse) Header() http.Header { return w.header }

func (w *frontResponse) WriteHeader(code int) {
	if w.hijacked {
		w.c.f.logf("http: response.WriteHeader on hijacked connection")
		return
	}
	if w.wroteHeader {
		w.c.f.logf("http: superfluous response.WriteHeader call with status %d", code)
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational answer goes at once, with the header as it is.
		b := appendStatusLine(nil, code)
		for k, vv := range w.header {
			if isToken(k) {
				for _, v := range vv {
					b = appendHeader(b, k, v)
				}
			}
		}
		b = append(b, "\r\n"...)
		_, _ = w.c.bw.Write(b)
		_ = w.c.bw.Flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	w.render()
}

// render snapshots the handler's header (net/http clones it at
// WriteHeader): the framing headers are kept apart, decided at commit.
func (w *frontResponse) render() {
	b := appendStatusLine(w.c.headBuf[:0], w.status)
	for k, vv := range w.header {
		switch {
		case k == "Content-Length":
			if len(vv) > 0 && vv[0] != "" {
				if n, err := strconv.ParseInt(vv[0], 10, 64); err == nil && n >= 0 {
					w.cl = n
				} else {
					w.c.f.logf("http: invalid Content-Length of %q", vv[0])
				}
			}
			continue
		case k == "Transfer-Encoding":
			if len(vv) > 0 {
				w.te = vv[0]
			}
			continue
		case k == "Connection":
			w.conn = vv
			continue
		case k == "Date":
			w.hasDate = true
		case k == "Content-Type":
			w.hasType = true
		case k == "Content-Encoding":
			w.hasCE = len(vv) > 0 && vv[0] != ""
		case k == "Trailer":
			for _, v := range vv {
				for t := range strings.SplitSeq(v, ",") {
					t = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(t))
					if t != "" && t != "Transfer-Encoding" && t != "Content-Length" && t != "Trailer" {
						w.trailers = append(w.trailers, t)
					}
				}
			}
		case strings.HasPrefix(k, http.TrailerPrefix):
			w.prefixed = true
			continue
		}
		if !isToken(k) {
			continue
		}
		if !bodyAllowedForStatus(w.status) && (k == "Content-Type" && w.status == http.StatusNotModified) {
			continue
		}
		for _, v := range vv {
			b = appendHeader(b, k, v)
		}
	}
	w.head = b
	w.c.headBuf = b[:0]
}

func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == 204, status == 304:
		return false
	}
	return true
}

func (w *frontResponse) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.cl != -1 && w.written > w.cl {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if len(w.pending)+len(p) <= frontBuffered {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		// The type is sniffed from the body's start, as net/http does
		// from the first bytes its buffer passes on.
		w.sniff = p
		w.commit()
	}
	if err := w.writeBody(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *frontResponse) WriteString(s string) (int, error) {
	return w.Write([]byte(s))
}

// writeBody writes p after the header: as a chunk when chunked.
func (w *frontResponse) writeBody(p []byte) error {
	if w.req.Method == "HEAD" || len(p) == 0 {
		return nil
	}
	bw := w.c.bw
	if w.chunked {
		var hex [16]byte
		_, _ = bw.Write(strconv.AppendInt(hex[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(p)
		_, err := bw.WriteString("\r\n")
		return err
	}
	_, err := bw.Write(p)
	return err
}

// commit writes the status line and the header, deciding the framing as
// net/http's chunkWriter.writeHeader does; then the pending body.
func (w *frontResponse) commit() {
	if w.committed {
		return
	}
	w.committed = true
	p := w.pending
	isHEAD := w.req.Method == "HEAD"
	allowed := bodyAllowedForStatus(w.status)
	trailers := len(w.trailers) > 0 || w.prefixed
	hasTE := w.te != ""
	b := w.head
	if w.handlerDone && !trailers && !hasTE && allowed && w.cl == -1 && (!isHEAD || len(p) > 0) {
		w.cl = int64(len(p))
	}
	keepAlives := !w.c.f.inShutdown.Load()
	if w.wantsClose || !keepAlives || len(w.conn) > 0 && w.conn[0] == "close" {
		w.closeAfter = true
	}
	hasCL := w.cl != -1
	if allowed && !w.hasType && !w.hasCE && !hasTE && len(p)+len(w.sniff) > 0 {
		first := p
		if len(first) < 512 && len(w.sniff) > 0 {
			first = append(first[:len(first):len(first)], w.sniff[:min(len(w.sniff), 512-len(first))]...)
		}
		b = appendHeader(b, "Content-Type", http.DetectContentType(first))
	}
	if !w.hasDate {
		b = append(b, "Date: "...)
		b = appendDate(b)
		b = append(b, "\r\n"...)
	}
	if hasCL && hasTE && w.te != "identity" {
		w.c.f.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", w.te, w.cl)
		hasCL = false
		w.cl = -1
	}
	switch {
	case isHEAD || !allowed:
		// no body, no Transfer-Encoding
	case hasCL:
	case hasTE && w.te == "identity":
		w.closeAfter = true
	default:
		w.chunked = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if hasCL && allowed && !w.chunked {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.cl, 10)
		b = append(b, "\r\n"...)
	}
	if w.closeAfter && (!keepAlives || !hasTokenIn(w.conn, "close")) {
		b = append(b, "Connection: close\r\n"...)
	} else {
		for _, v := range w.conn {
			b = appendHeader(b, "Connection", v)
		}
	}
	b = append(b, "\r\n"...)
	_, _ = w.c.bw.Write(b)
	w.c.headBuf = b[:0]
	w.head = nil
	w.pending, w.sniff = nil, nil
	_ = w.writeBody(p)
}

func hasTokenIn(vv []string, token string) bool {
	for _, v := range vv {
		if hasToken(v, token) {
			return true
		}
	}
	return false
}

// Flush sends what the handler wrote (the header first).
func (w *frontResponse) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error (http.ResponseController).
func (w *frontResponse) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commit()
	return w.c.bw.Flush()
}

// finish ends the answer when the handler returned.
func (w *frontResponse) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commit()
	if w.chunked {
		bw := w.c.bw
		_, _ = bw.WriteString("0\r\n")
		for k, vv := range w.header {
			if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && isToken(kk) {
				for _, v := range vv {
					_, _ = bw.Write(appendHeader(nil, kk, v))
				}
			}
		}
		for _, k := range w.trailers {
			for _, v := range w.header[k] {
				_, _ = bw.Write(appendHeader(nil, k, v))
			}
		}
		_, _ = bw.WriteString("\r\n")
	}
	if w.cl != -1 && w.written != w.cl && bodyAllowedForStatus(w.status) && w.req.Method != "HEAD" {
		w.closeAfter = true // the client cannot find the next answer
	}
	if err := w.c.bw.Flush(); err != nil {
		w.closeAfter = true
	}
}

// Hijack hands the connection to the handler (after the watcher
// stopped), with what the front had buffered.
func (w *frontResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.handlerDone {
		return nil, nil, errors.New("http: Hijack called after the handler returned")
	}
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.wroteHeader {
		w.commit()
	}
	if err := w.c.bw.Flush(); err != nil {
		return nil, nil, err
	}
	w.c.stopWatch()
	w.hijacked = true
	_ = w.c.c.SetDeadline(time.Time{})
	return w.c.c, bufio.NewReadWriter(w.c.br, w.c.bw), nil
}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
func (w *frontResponse) SetReadDeadline(t time.Time) error { return w.c.c.SetReadDeadline(t) }

func (w *frontResponse) SetWriteDeadline(t time.Time) error { return w.c.c.SetWriteDeadline(t) }

// EnableFullDuplex: the front read the body before the handler ran.
func (w *frontResponse) EnableFullDuplex() error { return nil }

// dateCache is the formatted Date of the current second.
var dateCache atomic.Pointer[dateEntry]

type dateEntry struct {
	sec int64
	s   string
}

func appendDate(b []byte) []byte {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return append(b, d.s...)
	}
	d := &dateEntry{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return append(b, d.s...)
}
