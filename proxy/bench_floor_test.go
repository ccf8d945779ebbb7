package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
)

// benchFloorEnv, set to a backend's host:port, makes the test binary a
// floor proxy (see floorProxy) for BenchmarkGatewayVsNginxCaddy, its
// target "floor".
const benchFloorEnv = "GPUD_PROXY_BENCH_FLOOR"

// floorProxy is the least a Go reverse proxy on net/http's server can do
// for the benchmark's GET: one fixed request (the bytes the gateway
// sends the replica for it: its Host, the client's User-Agent and the
// X-Forwarded-* headers) written on a pooled
// keep-alive connection by the handler's goroutine, the answer parsed by
// http.ReadResponse and copied back. No routing, no header rewrite, no
// metrics, no retry, no cancellation: not a proxy to use, a measure of
// what net/http's server and Go's scheduler cost on their own, so that
// the gateway's added latency splits into the part its own code adds
// (gateway − floor) and the part any proxy on net/http pays (floor −
// direct).
func floorProxy(backend string) http.Handler {
	head := []byte("GET /v1/health HTTP/1.1\r\nHost: " + benchHost + "\r\nUser-Agent: Go-http-client/1.1\r\n" +
		"X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Host: " + benchHost + "\r\nX-Forwarded-Proto: http\r\n\r\n")
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	var mu sync.Mutex
	var idle []*conn
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		var c *conn
		if n := len(idle); n > 0 {
			c, idle = idle[n-1], idle[:n-1]
		}
		mu.Unlock()
		if c == nil {
			nc, err := net.Dial("tcp", backend)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			c = &conn{c: nc, br: bufio.NewReaderSize(nc, 16<<10)}
		}
		if _, err := c.c.Write(head); err != nil {
			c.c.Close()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp, err := http.ReadResponse(c.br, r)
		if err != nil {
			c.c.Close()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for k, vv := range resp.Header {
			w.Header()[k] = vv
		}
		w.WriteHeader(resp.StatusCode)
		_, err = io.Copy(w, resp.Body)
		resp.Body.Close()
		if err != nil {
			c.c.Close()
			return
		}
		mu.Lock()
		idle = append(idle, c)
		mu.Unlock()
	})
}
