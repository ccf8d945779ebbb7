package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
)

// Launch says how to run one configured backend's plugin.
type Launch struct {
	// Name names the backend in logs ("project/name").
	Name string
	// Command is the executable and its arguments: this gpud with
	// "plugin serve TYPE" for a built-in, the plugin's path for an external
	// one. It never carries the configuration.
	Command []string
	// Config is the backend's configuration (credentials included), sent
	// over the plugin's connection after the handshake.
	Config json.RawMessage
}

// SupervisorOptions tune a Supervisor; the zero value is usable.
type SupervisorOptions struct {
	// Log receives the supervisor's messages and the plugin's stderr.
	Log zerolog.Logger
	// MinBackoff and MaxBackoff bound the wait before each restart of a
	// crashed plugin (api.Backoff: default 250ms, doubling up to 30s, from
	// MinBackoff again once the plugin ran for a minute).
	MinBackoff, MaxBackoff time.Duration
	// CallTimeout bounds the start's handshake, Configure and Info, and
	// the re-read after a restart (default 30s).
	CallTimeout time.Duration
	// OnRestart is called after a restart with what the plugin reports it
	// runs (List, then Status of each gang), so the server re-reads its work.
	OnRestart func(gangs map[string][]api.JobStatus)
}

// State is how a supervised plugin stands, for `gpud backend list`.
type State struct {
	// State is running, restarting (crashed; being restarted with
	// backoff), failed (restarts keep failing; still retried) or stopped.
	State     string    `json:"state"`
	LastError string    `json:"last_error,omitempty"`
	Restarts  int       `json:"restarts"`
	Pid       int       `json:"pid,omitempty"`
	Info      Info      `json:"info"`
	Since     time.Time `json:"since"`
}

// The states of a supervised plugin.
const (
	StateRunning    = "running"
	StateRestarting = "restarting"
	StateFailed     = "failed"
	StateStopped    = "stopped"
)

// failedAfter is how many restarts in a row must fail before the state
// says failed rather than restarting.
const failedAfter = 3

// Supervisor runs one backend plugin as a subprocess, as Nomad and
// Terraform run theirs: it starts it, negotiates the protocol, configures
// it, restarts it with backoff when it dies and re-reads its work; Close
// shuts it down. The Supervisor is itself a Backend whose calls go to the
// live process: a call made while the plugin restarts waits for it (until
// its ctx ends), and one cut by a crash is retried once the plugin is back,
// as every Backend method is idempotent. Its methods are safe for
// concurrent use.
type Supervisor struct {
	launch Launch
	opts   SupervisorOptions
	log    zerolog.Logger

	mu      sync.Mutex
	client  *plugin.Client
	backend *grpcBackend
	runner  *procRunner
	state   State
	changed chan struct{} // closed and replaced on every state change
	closed  bool
	done    chan struct{} // closed when the watch loop ends
}

var _ Backend = (*Supervisor)(nil)

// Start starts the plugin and waits until it is configured. An error
// (handshake, protocol version, configuration) leaves nothing running.
func Start(ctx context.Context, l Launch, opts SupervisorOptions) (*Supervisor, error) {
	if len(l.Command) == 0 {
		return nil, errors.New("backend plugin: no command")
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 250 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 30 * time.Second
	}
	s := &Supervisor{launch: l, opts: opts, log: opts.Log.With().Str("plugin", l.Name).Logger(),
		changed: make(chan struct{}), done: make(chan struct{})}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	go s.watch()
	return s, nil
}

// pluginEnv is what a plugin inherits of the server's environment: enough
// to run and to find an in-cluster Kubernetes API, never the server's own
// settings (GPUD_STATE_KEY, tokens).
var pluginEnv = []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}

// start runs one plugin process and configures it.
func (s *Supervisor) start(ctx context.Context) error {
	var env []string
	for _, k := range pluginEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	var run *procRunner
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{ProtocolVersion: {pluginName: &grpcPlugin{}}},
		SkipHostEnv:      true,
		// go-plugin hands the runner a blank command carrying its own
		// environment (cookie, versions, mTLS certificate).
		RunnerFunc: func(_ hclogLogger, spec *exec.Cmd, _ string) (runnerRunner, error) {
			cmd := exec.Command(s.launch.Command[0], s.launch.Command[1:]...)
			cmd.Env = append(env, spec.Env...)
			r, err := newProcRunner(cmd)
			run = r
			return r, err
		},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     s.opts.CallTimeout,
		Logger:           newHclog(s.log),
	})
	fail := func(err error) error {
		client.Kill()
		return fmt.Errorf("backend %s: %w", s.launch.Name, err)
	}
	rpc, err := client.Client()
	if err != nil {
		return fail(versionError(s.launch.Command[0], err))
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		return fail(err)
	}
	b, ok := raw.(*grpcBackend)
	if !ok {
		return fail(fmt.Errorf("plugin dispensed %T, not a backend", raw))
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	if err := b.configure(cctx, s.launch.Config); err != nil {
		return fail(err)
	}
	info, err := b.Info(cctx)
	if err != nil {
		return fail(err)
	}
	if info.Protocol != 0 && info.Protocol != ProtocolVersion {
		return fail(&VersionError{Plugin: s.launch.Command[0], PluginVersion: info.Protocol, ServerVersion: ProtocolVersion})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		client.Kill()
		return fmt.Errorf("backend %s: %w", s.launch.Name, ErrPluginUnavailable)
	}
	s.client, s.backend, s.runner = client, b, run
	s.setState(State{State: StateRunning, Restarts: s.state.Restarts, LastError: s.state.LastError, Pid: run.pid, Info: info, Since: time.Now()})
	s.log.Info().Int("pid", run.pid).Str("type", info.Type).Str("version", info.Version).Msg("backend plugin started")
	return nil
}

// setState records st and wakes the callers waiting on a change; s.mu held.
func (s *Supervisor) setState(st State) {
	s.state = st
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch restarts the plugin each time its process ends, until Close.
func (s *Supervisor) watch() {
	defer close(s.done)
	bo := api.Backoff{First: s.opts.MinBackoff, Max: s.opts.MaxBackoff}
	streak := 0 // restarts since the plugin last ran for a minute
	for {
		s.mu.Lock()
		run := s.runner
		s.mu.Unlock()
		<-run.exited
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		dead := s.client
		st := s.state
		if time.Since(st.Since) > time.Minute {
			streak = 0
		}
		st.State, st.Pid, st.Since = StateRestarting, 0, time.Now()
		st.LastError = fmt.Sprintf("plugin process %d exited: %v", run.pid, run.err)
		s.backend = nil
		s.setState(st)
		s.mu.Unlock()
		dead.Kill() // releases go-plugin's side of the dead process
		s.log.Error().Int("pid", run.pid).AnErr("exit", run.err).Msg("backend plugin exited; restarting it")
		for failures := 0; ; failures++ {
			streak++
			if !s.sleep(bo.Delay(streak)) {
				return
			}
			err := s.start(context.Background())
			if err == nil {
				break
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				return
			}
			st := s.state
			st.LastError = err.Error()
			if failures+1 >= failedAfter {
				st.State = StateFailed
			}
			s.setState(st)
			s.mu.Unlock()
			s.log.Error().Err(err).Dur("retry_in", bo.Delay(streak+1)).Msg("backend plugin restart failed")
		}
		s.mu.Lock()
		st = s.state
		st.Restarts++
		s.setState(st)
		s.mu.Unlock()
		s.reread()
	}
}

// reread asks the restarted plugin what it runs and hands it to OnRestart.
func (s *Supervisor) reread() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CallTimeout)
	defer cancel()
	gangs, err := ReadGangs(ctx, s)
	if err != nil {
		s.log.Error().Err(err).Msg("re-read the backend's gangs after a restart")
		return
	}
	s.log.Info().Int("gangs", len(gangs)).Msg("backend plugin restarted; its gangs re-read")
	if s.opts.OnRestart != nil {
		s.opts.OnRestart(gangs)
	}
}

// ReadGangs reads every gang b runs and its jobs (List, then Status).
func ReadGangs(ctx context.Context, b Backend) (map[string][]api.JobStatus, error) {
	ids, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]api.JobStatus, len(ids))
	for _, id := range ids {
		jobs, err := b.Status(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("status of gang %s: %w", id, err)
		}
		out[id] = jobs
	}
	return out, nil
}

// sleep waits d unless Close comes first (false).
func (s *Supervisor) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		closed, ch := s.closed, s.changed
		s.mu.Unlock()
		if closed {
			return false
		}
		select {
		case <-t.C:
			return true
		case <-ch:
		}
	}
}

// State reports how the plugin stands now.
func (s *Supervisor) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Close shuts the plugin down (go-plugin asks it to exit, then kills it
// after a grace period) and stops restarting it.
func (s *Supervisor) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.closed = true
	client := s.client
	st := s.state
	st.State, st.Pid, st.Since = StateStopped, 0, time.Now()
	s.setState(st)
	s.mu.Unlock()
	if client != nil {
		client.Kill()
	}
	<-s.done
}

// live returns the running plugin's backend, waiting while it restarts.
func (s *Supervisor) live(ctx context.Context) (*grpcBackend, error) {
	for {
		s.mu.Lock()
		b, closed, ch := s.backend, s.closed, s.changed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, fmt.Errorf("backend %s is shut down: %w", s.launch.Name, ErrPluginUnavailable)
		case b != nil:
			return b, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("backend %s is restarting (%s): %w", s.launch.Name, s.State().LastError, ctx.Err())
		case <-ch:
		}
	}
}

// do runs fn on the live plugin, again after a restart when the plugin died
// under it.
func (s *Supervisor) do(ctx context.Context, fn func(*grpcBackend) error) error {
	for {
		b, err := s.live(ctx)
		if err != nil {
			return err
		}
		err = fn(b)
		if !errors.Is(err, ErrPluginUnavailable) {
			return err
		}
		s.waitGone(ctx, b)
	}
}

// waitGone waits until b is no longer the live backend (its process ended
// and watch noticed) or ctx ends.
func (s *Supervisor) waitGone(ctx context.Context, b *grpcBackend) {
	for {
		s.mu.Lock()
		cur, closed, ch := s.backend, s.closed, s.changed
		s.mu.Unlock()
		if cur != b || closed {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
