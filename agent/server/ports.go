package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/api"
)

// portRelay upgrades GET /api/v1/jobs/{id}/ports/{port} to one TCP
// connection to the port job id publishes for container port {port}, on
// this host (agent.DialPublishedPort): the server's gateway reaches a
// service replica on any host through it, with no inbound port on the
// host. Only the server calls it (the bearer token, like every route);
// it names a job and one of that job's published ports, never a host
// address or another port.
func (s *server) portRelay(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.PortProtocol) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("want Upgrade: %s", api.PortProtocol))
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("port %q: want a number from 1 to 65535", r.PathValue("port")))
		return
	}
	id := r.PathValue("id")
	up, err := s.a.DialPublishedPort(r.Context(), id, port)
	switch {
	case errors.Is(err, agent.ErrNotFound), errors.Is(err, agent.ErrInvalid):
		fail(w, err)
		return
	case err != nil:
		writeError(w, http.StatusBadGateway, err)
		return
	}
	c, err := switchProtocols(w, api.PortProtocol)
	if err != nil {
		up.Close()
		return
	}
	splice(c, up)
}

// switchProtocols takes over w's connection and answers 101 with
// protocol; the returned stream keeps what the client sent after its
// request. When it fails, the client has had its answer (a 500 before the
// take-over) or the connection is closed.
func switchProtocols(w http.ResponseWriter, protocol string) (net.Conn, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusInternalServerError, errors.New("cannot take over the connection: "+err.Error()))
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{}) // the HTTP server's timeouts must not end the stream
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + protocol + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	if brw.Reader.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: brw.Reader}, nil
	}
	return conn, nil
}

// splice copies between the server's stream c and the job's connection up
// until the job's side ends, then closes both. The server's end of input
// is passed on as a half-close (the job may still answer); a broken
// stream closes the job's connection at once.
func splice(c net.Conn, up net.Conn) {
	go func() {
		_, err := io.Copy(up, c)
		if cw, ok := up.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
			return
		}
		up.Close()
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	up.Close()
}
