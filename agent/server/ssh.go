package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/sshd"
	"gpud.dev/gpud/api"
)

// ssh upgrades GET /api/v1/jobs/{id}/ssh to SSH into job id (agent/sshd).
// Only the server calls it (the bearer token): it names the job, and the
// one public key accepted, in the request; the client behind the server
// chooses neither.
func (s *server) ssh(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.SSHProtocol) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("want Upgrade: %s", api.SSHProtocol))
		return
	}
	key, err := sshd.ParseAuthorizedKey(r.Header.Get(api.HeaderSSHAuthorizedKey))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	id := r.PathValue("id")
	st, err := s.a.Get(id)
	if err != nil {
		fail(w, err)
		return
	}
	if st.State != api.JobRunning {
		writeError(w, http.StatusConflict, fmt.Errorf("job %s is %s, not running", id, st.State))
		return
	}
	hostKey, err := s.sshHostKey()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	c, err := switchProtocols(w, api.SSHProtocol)
	if err != nil {
		return
	}
	log := s.log.With().Str("job", id).Str("user", r.Header.Get(api.HeaderSSHUser)).Logger()
	log.Info().Msg("ssh session opened")
	closed := s.a.SessionOpened(id)
	defer closed()
	// The connection ends with the job.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		_, _ = s.a.Wait(ctx, id) // returns when the job is final or the connection ended
		cancel()
	}()
	err = sshd.Serve(ctx, c, sshd.Config{
		HostKey: hostKey, AuthorizedKey: key, Log: log,
		Exec:  func(ctx context.Context, req runtime.ExecRequest) (int, error) { return s.a.Exec(ctx, id, req) },
		Dial:  func(ctx context.Context, port int) (net.Conn, error) { return s.a.DialJob(ctx, id, port) },
		Touch: func() { s.a.Touch(id) },
	})
	log.Info().AnErr("error", err).Msg("ssh session closed")
}

// sshHostKey is the agent process's SSH host key, made on first use.
func (s *server) sshHostKey() (ssh.Signer, error) {
	s.hostKeyOnce.Do(func() { s.hostKey, s.hostKeyErr = sshd.NewHostKey() })
	return s.hostKey, s.hostKeyErr
}

// bufferedConn reads what the HTTP server had already buffered first.
type bufferedConn struct {
	net.Conn
	r interface{ Read([]byte) (int, error) }
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
