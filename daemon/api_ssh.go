package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// SSH into runs (api/ssh.go): each user registers one public key
// (handleSetSSHKey); the run's ssh endpoint checks that the caller may use
// the run (its project's member: the route's gate and findRun in that
// project), picks its job, and relays the caller's upgraded stream to that
// job's agent, naming the job and the caller's key itself. The agent
// serves SSH and accepts nothing but that key, so a stream reaches the
// one job the server chose, and only for the user whose key it is.

// sshKeyKV is where a user's public key is kept.
func sshKeyKV(user string) string { return "ssh-keys/" + user }

// maxSSHKey bounds a registered key (an authorized_keys line).
const maxSSHKey = 16 << 10

// handleSetSSHKey stores the caller's (or, for an admin, any user's)
// public key for SSH into runs; it replaces the previous one.
func (s *accountsAPI) handleSetSSHKey(w http.ResponseWriter, r *http.Request) error {
	u, err := s.selfOrAdmin(r)
	if err != nil {
		return err
	}
	var req api.SSHKey
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	line := strings.TrimSpace(req.PublicKey)
	if len(line) > maxSSHKey || strings.ContainsAny(line, "\r\n") {
		return badField("public_key", "one authorized_keys line of at most %d bytes", maxSSHKey)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return badField("public_key", "%v: want an OpenSSH public key like \"ssh-ed25519 AAAA… name\"", err)
	}
	// Stored without its comment or options: the agent is handed the key only.
	line = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	if err := s.store.KV().Store(r.Context(), sshKeyKV(u.ID), []byte(line)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SSHKey{PublicKey: line})
	return nil
}

// handleRunSSH upgrades to a raw stream that carries SSH to the run's job
// (?job= names one by id or name; by default its first running job).
func (s *runsAPI) handleRunSSH(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.SSHProtocol) {
		return badField("Upgrade", "this endpoint carries SSH: send Connection: Upgrade and Upgrade: %s (`gpud ssh-proxy RUN` does)", api.SSHProtocol)
	}
	run, err := s.findRun(project, r.PathValue("run"))
	if err != nil {
		return err
	}
	job, err := s.sshJob(run, r.URL.Query().Get("job"))
	if err != nil {
		return err
	}
	key, err := s.store.KV().Load(r.Context(), sshKeyKV(c.name))
	if errors.Is(err, store.ErrNotFound) {
		return conflict("user %s has no SSH key registered: run `gpud ssh-config %s` (or `gpud attach %s`), which makes and registers one", c.name, run.Name, run.Name)
	}
	if err != nil {
		return err
	}
	link := s.agents.get(job.Instance)
	if link == nil || link.client == nil || !s.dispatcher.hostServes(job.Instance, project) {
		return apiErr(http.StatusServiceUnavailable, api.CodeConflict, "", "the host %s of run %s has no agent connected", job.Instance, run.Name)
	}
	up, err := link.client.SSH(r.Context(), job.ID, string(key), c.name)
	if err != nil {
		return apiErr(http.StatusBadGateway, api.CodeConflict, "", "run %s: the agent of %s refused SSH: %v", run.Name, job.Instance, err)
	}
	defer up.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("ssh: take over the connection: %w", err)
	}
	defer conn.Close()
	// A hijacked connection is no longer the HTTP server's to close: the
	// relay ends when the server does.
	stop := context.AfterFunc(s.ctx, func() { conn.Close(); up.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Time{}) // the API server's timeouts must not end the session
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.SSHProtocol + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		return nil // the client left before the switch; nothing to answer
	}
	s.log.Info().Str("run", run.Name).Str("job", job.ID).Str("user", c.name).Str("instance", job.Instance).Msg("ssh relay opened")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, brw.Reader) // client to agent; ends when either side closes
		up.Close()
	}()
	_, _ = io.Copy(conn, up) // agent to client
	conn.Close()
	wg.Wait()
	s.log.Info().Str("run", run.Name).Str("job", job.ID).Str("user", c.name).Msg("ssh relay closed")
	return nil
}

// sshJob is the job of run an SSH stream goes to: the one named (id or
// name), or the running job with the lowest id.
func (s *runsAPI) sshJob(run store.Record, name string) (store.Record, error) {
	jobs := s.store.Jobs().ByRun(run.ID)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	for _, j := range jobs {
		if j.Status != store.JobRunning || (name != "" && name != j.ID && name != j.Name) {
			continue
		}
		return j, nil
	}
	if name != "" {
		return store.Record{}, conflict("run %s has no running job %q", run.Name, name)
	}
	return store.Record{}, conflict("run %s is %s: SSH reaches a running job only", run.Name, run.Status)
}

// ideLink is the IDE link of a dev environment whose configuration sets
// ide (api.IDELink), opening its working_dir when that is absolute; ""
// for other runs. The SSH session itself starts in the job's working
// directory.
func ideLink(run string, config json.RawMessage) string {
	var c struct {
		Type       string `json:"type"`
		IDE        string `json:"ide"`
		WorkingDir string `json:"working_dir"`
	}
	if json.Unmarshal(config, &c) != nil || c.Type != string(api.KindDevEnvironment) || c.IDE == "" {
		return ""
	}
	return api.IDELink(c.IDE, run, c.WorkingDir)
}

// sshSessionOpen asks job j's agent whether an SSH session into j is open
// (api.JobSessions); known is false when the agent cannot be asked.
func (s *Server) sshSessionOpen(j store.Record) (open, known bool) {
	link := s.agents.get(j.Instance)
	if link == nil || link.client == nil {
		return false, false
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	st, err := link.client.Get(ctx, j.ID)
	if err != nil {
		s.log.Debug().Err(err).Str("job", j.ID).Str("instance", j.Instance).Msg("inactivity: the agent's sessions are unknown")
		return false, false
	}
	return st.Sessions != nil && st.Sessions.Active > 0, true
}
