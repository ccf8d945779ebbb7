package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/plugins/sshfleet"
	"gpud.dev/gpud/proxy"
	"gpud.dev/gpud/store"
)

// DefaultProject is the project every server creates on first start; the
// admin is its admin member and the embedded default runs in it.
const DefaultProject = "main"

// StateKeyEnv is the environment variable Options.StateKey defaults to.
const StateKeyEnv = "GPUD_STATE_KEY"

// DefaultImage is the image of runs that name none on a server (not the
// embedded one): dstack's base image, as dstack gives such runs.
const DefaultImage = "dstackai/base:0.10-base-ubuntu22.04"

// Options configure a server. The zero value (but DataDir) is a server on
// 127.0.0.1:3000 with a local agent that runs every job in Docker, those
// without an image in DefaultImage; user code never runs on the server
// host as a process unless the admin chose the process runtime.
type Options struct {
	// DataDir holds state.db, its key file, job logs and the local agent's
	// data (default ~/.gpud/server).
	DataDir string
	// MaxUploadBytes bounds an upload of repos and files, packed (default
	// 100 MiB, upload.DefaultMaxBytes); larger ones are refused before a
	// byte is read.
	MaxUploadBytes int64
	// Listen is the API address (default 127.0.0.1:3000; port 0 picks one).
	Listen string
	// NoLocalAgent serves without the in-process agent (no local fleet).
	NoLocalAgent bool
	// FakeGPUs gives the local agent a fake inventory ("8xH100:80GB").
	FakeGPUs string
	// Runtime forces the local agent's runtime: "docker", "process" (the
	// admin's opt-in: jobs run as ProcessUser), or "" for Docker, whose
	// absence fails each job with the fix (see localHostConfig).
	Runtime string
	// Embedded is `gpud run` with no server (StartEmbedded): the laptop
	// mode, where image-less runs execute as processes as the invoking
	// user (each in a working directory of its own) and runs with an image
	// in Docker when it is reachable. No DefaultImage applies.
	Embedded bool
	// DefaultImage is the image of runs without one (default DefaultImage;
	// ignored when Embedded).
	DefaultImage string
	// PythonImage, NvccImage and DindImage are the images of runs without
	// one that set python, nvcc or docker: true (defaults DefaultPythonImage,
	// DefaultNvccImage, DefaultDindImage; see container_image.go, where
	// "{python}" takes the run's Python version). Ignored when Embedded,
	// but for DindImage.
	PythonImage, NvccImage, DindImage string
	// ProcessUser is whom the process runtime runs the local fleet's jobs
	// as, the server being root (default agent.DefaultProcessUser, "nobody").
	ProcessUser string
	// ProcessAsServerUser is the admin's explicit acceptance that a server
	// that is not root, and so cannot switch users, runs process-runtime
	// jobs as its own user, which can read its data dir and state key.
	// Without it such a server refuses to start the process runtime.
	ProcessAsServerUser bool
	// AllowPrivileged lets jobs with `privileged: true` run on the local
	// fleet (the server's own host, where such a container is root); off,
	// they fail at start with the fix. The embedded server ignores it.
	AllowPrivileged bool
	// VolumePrefixes are the directories of the server's own host under
	// which runs may mount instance volumes (--allow-volume-prefix); none
	// by default, any (but the data dirs) in the embedded mode.
	VolumePrefixes []string
	// ProcessWorkRoot holds the process runtime's per-job working
	// directories (default /var/tmp/gpud-work-<hash>; see process.Config).
	ProcessWorkRoot string
	// ShimCommand starts the process runtime's shim (tests set it; default
	// this executable with "agent shim").
	ShimCommand []string
	// JobRetention is how long the local agent keeps a finished job's
	// container or files (default agent.DefaultJobRetention, an hour); its
	// logs stay in the store.
	JobRetention time.Duration
	// RolloutTimeout bounds how long a service's rolling update waits for
	// its new replicas to be ready before it gives up and keeps the old
	// ones (default 15m).
	RolloutTimeout time.Duration
	// ResyncInterval is the safety-net period of the reconcilers
	// (default 30s); the hot path is driven by the change feed.
	ResyncInterval time.Duration
	// LogWaitTimeout bounds one wait of a follow log stream for new output
	// (default 10s); it is a safety net, as new lines, the job's end and its
	// log copier's end wake the stream at once.
	LogWaitTimeout time.Duration
	// LogLimit bounds the bytes of log kept per job (default
	// store.DefaultLogLimit, 50 MiB): older output goes first, and the logs
	// API says how much with a marker entry.
	LogLimit int64
	// RotateAdminToken makes the admin a fresh token at start (the
	// embedded default does, as it keeps no token on disk).
	RotateAdminToken bool
	// Clock is the server's time: the timestamps it records, usage
	// samples, the cron schedule's ticks and their timers (default the
	// wall clock).
	Clock Clock
	// FairShareWindow, FairShareHalfLife and FairShareK set time-based
	// fair share (scheduler_fairshare.go, docs/scheduler.md): how far back queue
	// usage counts (default 168h, as KAI), the half-life of its decay
	// (default 24h; negative: no decay, KAI's default) and the strength of
	// the correction (default 1, as KAI's kValue; negative: off).
	FairShareWindow   time.Duration
	FairShareHalfLife time.Duration
	FairShareK        float64
	// AgentBinary is the gpud uploaded to SSH fleet hosts (default this
	// executable); SSHAgentArgs are extra `gpud agent` flags for them
	// (tests: --fake-gpus); SSHHealth bounds their failure detection.
	AgentBinary  string
	SSHAgentArgs []string
	SSHHealth    sshfleet.HealthConfig
	// RegistrationListen, when set, accepts `gpud agent --server` tunnels
	// over TLS there, with RegistrationCert/Key or else a self-signed
	// certificate kept in DataDir (RegistrationCAFile, for --server-ca).
	RegistrationListen string
	RegistrationCert   string
	RegistrationKey    string
	// Domain, when set, serves services at https://<run>.<Domain> (the
	// default project's; another project's at <run>.<project>.<Domain>)
	// and the API at https://<Domain>, on HTTPSListen (default :443) and
	// HTTPListen (default :80: ACME HTTP-01 and redirects to HTTPS). See
	// gateway_tls.go and docs/gateway.md.
	Domain                  string
	HTTPSListen, HTTPListen string
	// GatewayTLS is how the gateway's certificates come: GatewayTLSACME
	// (default), GatewayTLSInternal or GatewayTLSNone. ACMECA is the ACME
	// directory (default Let's Encrypt), ACMEEmail its account contact,
	// ACMECARoot a PEM file of the roots that the directory's HTTPS is
	// trusted by (a private CA such as pebble).
	GatewayTLS                    string
	ACMECA, ACMEEmail, ACMECARoot string
	// ExternalGateway says standalone gateways (`gpud gateway --server`)
	// serve the projects' gateway domains, so services may use a gateway
	// though this server runs no gateway listener.
	ExternalGateway bool
	// TrustedProxies are the front proxies (networks) whose
	// X-Forwarded-For the gateway believes for rate limits keyed by ip
	// (proxy.Options.TrustedProxies); none: the connection's peer counts.
	TrustedProxies []netip.Prefix
	// StateKey is the base64 of a 32-byte key that seals the state file
	// instead of the key file beside it (default $GPUD_STATE_KEY, as
	// `gpud admin` reads it); a malformed key fails New.
	StateKey string
	// ConfigFile is the server's configuration file (gpud serve --config):
	// its projects' backends are checked and stored at start
	// (backends_config.go). PluginDir holds external backend plugins,
	// gpud-backend-<type> (default DATA_DIR/plugins); BuiltinBackends
	// names the backend types this binary serves as `PluginCommand TYPE`
	// subprocesses (default command: this executable, "plugin serve").
	ConfigFile      string
	PluginDir       string
	BuiltinBackends []string
	PluginCommand   []string
	Version         string
	Logger          zerolog.Logger
}

// Server is a running gpud server. Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	log      zerolog.Logger
	store    *store.Store
	listener net.Listener
	http     *http.Server
	url      string
	// adminToken is set only when this start created (or rotated) it.
	adminToken string

	agents  agentSet
	working tracker
	names   nameLocks
	// gw serves services (proxy.Gateway); gwResolver is its view of
	// the store (api_proxy.go, gateway_resolver.go).
	gw         *proxy.Gateway
	gwResolver *gatewayResolver
	// svc is the service loop's memory (autoscale.go, probes.go).
	svc services
	// routers is the SGLang router sync's memory (router_sync.go).
	routers routerSyncs
	// domains indexes services' own hostnames (service_domains.go).
	domains domainIndex
	// schedWake wakes the scheduler loop (buffer 1: wake-ups coalesce).
	schedWake chan struct{}
	// specs caches decoded run and job specs for hot reads.
	specs specCache

	// The parts, each owning one side of the server (doc.go); each holds
	// this Server, for the store, the clock and the helpers above.
	accountsAPI *accountsAPI
	runsAPI     *runsAPI
	fleetsAPI   *fleetsAPI
	scheduler   *scheduler
	dispatcher  *dispatcher
	reconciler  *reconciler
	hosts       *hosts
	// gateway serves services at their hosts over HTTPS (gateway_tls.go).
	gateway gatewayServer
	// backends are the projects' backend plugins (backends.go).
	backends *backendSet

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New opens the server's state (creating the admin user, the default
// project, queue and local fleet on first start), starts its local agent
// and listens on Options.Listen. It does not serve until Run.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		opts.DataDir = filepath.Join(home, ".gpud", "server")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:3000"
	}
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = 30 * time.Second
	}
	if opts.LogWaitTimeout <= 0 {
		opts.LogWaitTimeout = 10 * time.Second
	}
	if _, err := fairShareOptions(opts); err != nil {
		return nil, err
	}
	if opts.DefaultImage == "" && !opts.Embedded {
		opts.DefaultImage = DefaultImage
	}
	setImageDefaults(&opts)
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if opts.StateKey == "" {
		opts.StateKey = os.Getenv(StateKeyEnv)
	}
	st, err := store.Open(filepath.Join(opts.DataDir, "state.db"), store.Options{Logger: opts.Logger, KeyEnv: opts.StateKey, LogLimit: opts.LogLimit})
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	s := &Server{opts: opts, log: opts.Logger, store: st, schedWake: make(chan struct{}, 1)}
	s.accountsAPI = &accountsAPI{s}
	s.runsAPI = &runsAPI{s}
	s.fleetsAPI = &fleetsAPI{s}
	s.scheduler = &scheduler{Server: s}
	s.dispatcher = &dispatcher{s}
	s.reconciler = &reconciler{s}
	s.hosts = &hosts{Server: s}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.start(ctx); err != nil {
		s.cancel()
		s.closeBackends()
		return nil, errors.Join(err, st.Close())
	}
	return s, nil
}

// start bootstraps the state, starts the background loops and listens.
func (s *Server) start(ctx context.Context) error {
	token, err := s.bootstrap(ctx, s.opts.RotateAdminToken)
	if err != nil {
		return err
	}
	s.adminToken = token
	if !s.opts.NoLocalAgent {
		if err := s.hosts.startLocalAgent(ctx); err != nil {
			return err
		}
	}
	if err := s.startBackends(ctx); err != nil {
		return err
	}
	s.reconciler.adoptJobs(ctx)
	s.hosts.resumeSSHFleets()
	s.gwResolver = newGatewayResolver(s) // before the probes, which tell it of readiness changes
	for _, loop := range []func(context.Context){s.reconciler.feedLoop, s.scheduler.schedulerLoop, s.scheduler.usageLoop, s.serviceLoop, s.volumeCleanupLoop, s.hosts.hostsSeenLoop} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			loop(s.ctx)
		}()
	}
	s.reconciler.resync(ctx)
	if err := s.startServiceGateway(); err != nil {
		return err
	}
	h, err := s.routes()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.opts.Listen, err)
	}
	s.listener = ln
	s.url = "http://" + ln.Addr().String()
	s.http = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if err := s.startGateway(ctx, h); err != nil {
		return errors.Join(err, ln.Close())
	}
	return s.hosts.startRegistration()
}

// URL is the base URL the API is served on ("http://127.0.0.1:3000").
func (s *Server) URL() string { return s.url }

// AdminToken returns the admin's token when this start created it (first
// start, or RotateAdminToken), else "". It is never stored in plaintext.
func (s *Server) AdminToken() string { return s.adminToken }

// Store returns the server's state store (for tests and admin commands).
func (s *Server) Store() *store.Store { return s.store }

// Run serves the API until ctx ends, then shuts down gracefully: in-flight
// requests get up to 10s, background loops stop, the state file is closed.
// Jobs on agents keep running; the next start re-adopts them.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.listener) }()
	select {
	case <-ctx.Done():
	case <-s.ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return errors.Join(fmt.Errorf("serve: %w", err), s.Close())
		}
	}
	return s.Close()
}

// Close stops serving and the background loops and closes the state file.
// It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := s.http.Shutdown(sctx)
		err = errors.Join(err, s.closeGateway(sctx))
		if s.hosts.registrationHTTP != nil {
			err = errors.Join(err, s.hosts.registrationHTTP.Close())
		}
		s.cancel()
		s.closeBackends()
		s.hosts.closeSSHFleets()
		s.wg.Wait()
		if s.hosts.local != nil {
			err = errors.Join(err, s.hosts.local.close())
		}
		s.closeErr = errors.Join(err, s.store.Close())
	})
	return s.closeErr
}

// RegistrationURL is the https:// URL agents register at, "" when
// registration is off.
func (s *Server) RegistrationURL() string { return s.hosts.registrationURL }
