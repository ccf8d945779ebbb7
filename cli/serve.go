package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/proxy"
)

// serveCommand runs the server: HTTP API, scheduler loop, reconcilers and
// a local agent.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the gpud server (HTTP API, queues, scheduler, a local agent)",
		Description: "State lives in --data-dir (state.db, its key file, job logs). On first start the admin\n" +
			"token is printed once; only its hash is stored. SIGINT or SIGTERM shut down gracefully;\n" +
			"jobs keep running and are re-adopted at the next start.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Usage: "state directory (default ~/.gpud/server)", EnvVars: []string{"GPUD_DATA_DIR"}},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:3000", Usage: "API address"},
			&cli.BoolFlag{Name: "no-local-agent", Usage: "do not run jobs on this machine"},
			&cli.StringFlag{Name: "fake-gpus", Usage: "fake accelerators for the local agent, like 8xH100:80GB"},
			&cli.StringFlag{Name: "runtime", Usage: "local agent runtime: docker (auto: Docker; without it every job fails with the fix) or process (jobs run as host processes of --process-user); see docs/server.md"},
			&cli.StringFlag{Name: "default-image", Value: daemon.DefaultImage, Usage: "image of runs that name none, as on dstack"},
			&cli.StringFlag{Name: "python-image", Value: daemon.DefaultPythonImage, Usage: "image of runs that name none and set python: {python} becomes the version (3.11), {devel} -devel with nvcc: true"},
			&cli.StringFlag{Name: "nvcc-image", Value: daemon.DefaultNvccImage, Usage: "image of runs that name none and set nvcc: true but no python (the CUDA compiler's devel image)"},
			&cli.StringFlag{Name: "dind-image", Value: daemon.DefaultDindImage, Usage: "image of runs with docker: true (Docker-in-Docker, privileged)"},
			&cli.StringFlag{Name: "process-user", Value: agent.DefaultProcessUser, Usage: "with --runtime process: the unprivileged user jobs run as (the server must be root)"},
			&cli.BoolFlag{Name: "process-as-server-user", Usage: "with --runtime process on a server that is not root: accept that jobs run as the server's user and can read its data dir and state key"},
			&cli.BoolFlag{Name: "allow-privileged", Usage: "let runs with privileged: true run on this server's own host (such a container is root here)"},
			&cli.StringSliceFlag{Name: "allow-volume-prefix", Usage: "let runs mount instance volumes (host paths) under these directories of this server's own host, like /data,/scratch (never its data dir); none by default"},
			&cli.StringFlag{Name: "max-upload-size", Value: "100MB", Usage: "largest upload of a run's repos and files, packed (refused before a byte is read)"},
			&cli.StringFlag{Name: "process-work-dir", Usage: "with --runtime process: where each job gets a fresh working directory (default /var/tmp/gpud-work-<hash>)"},
			&cli.DurationFlag{Name: "job-retention", Value: agent.DefaultJobRetention, Usage: "the local agent removes a finished job's container or files this long after it ended (its logs stay in the server's store)"},
			&cli.StringFlag{Name: "registration-listen", Usage: "accept `gpud agent --server` hosts over TLS on this address, like :8443 (docs/fleets.md)"},
			&cli.StringFlag{Name: "registration-cert", Usage: "TLS certificate for --registration-listen (default: a self-signed one, its CA in DATA_DIR/registration-ca.pem)"},
			&cli.StringFlag{Name: "registration-key", Usage: "private key of --registration-cert"},
			&cli.StringFlag{Name: "domain", Usage: "serve services at https://<run>.<domain> (other projects' at <run>.<project>.<domain>) and the API at https://<domain>; needs a wildcard DNS record *.<domain> to this host (docs/gateway.md)"},
			&cli.StringFlag{Name: "https-listen", Usage: "the gateway's HTTPS address (default :443 with --domain)"},
			&cli.StringFlag{Name: "http-listen", Usage: "the gateway's plain-HTTP address: ACME HTTP-01 challenges and redirects to HTTPS (default :80 with --domain)"},
			&cli.StringFlag{Name: "tls", Value: daemon.GatewayTLSACME, Usage: "the gateway's certificates: acme (from --acme-ca), internal (a CA of the server's own, for air-gapped sites: clients trust DATA_DIR/gateway-ca.pem, or `gpud gateway ca`), or none (plain HTTP)"},
			&cli.StringFlag{Name: "acme-ca", Value: proxy.LetsEncryptCA, Usage: "ACME directory URL the gateway's certificates come from"},
			&cli.StringFlag{Name: "acme-email", Usage: "contact address of the ACME account (expiry notices)"},
			&cli.StringFlag{Name: "acme-ca-root", Usage: "PEM file of the root that the ACME directory's own HTTPS certificate chains to (a private ACME CA such as pebble)"},
			&cli.StringSliceFlag{Name: "trust-forwarded-for", Usage: "the gateway sits behind these reverse proxies (CIDRs or addresses, like 10.0.0.0/8): on their connections, a rate limit keyed by ip counts the last X-Forwarded-For entry; elsewhere the peer's address (docs/gateway.md)"},
			&cli.BoolFlag{Name: "external-gateway", Usage: "standalone gateways (gpud gateway --server URL on a public host) serve the projects' gateway domains: services may use gateways without this server's own listeners"},
			&cli.StringFlag{Name: "config", Usage: "server configuration file (YAML): projects[].backends[] are checked and stored at start, like dstack's server/config.yml (docs/backends.md)"},
			&cli.StringFlag{Name: "plugin-dir", Usage: "directory of external backend plugins, executables gpud-backend-<type> that only their owner (root or the server's user) may write (default DATA_DIR/plugins)"},
			&cli.DurationFlag{Name: "fair-share-window", Value: daemon.DefaultFairShareWindow, Usage: "time-based fair share: how far back queue usage counts (KAI's windowSize default, one week); see docs/scheduler.md"},
			&cli.DurationFlag{Name: "fair-share-half-life", Value: daemon.DefaultFairShareHalfLife, Usage: "time-based fair share: usage weighs half as much this much later; 0 for no decay (KAI's default)"},
			&cli.Float64Flag{Name: "fair-share-k", Value: daemon.DefaultFairShareK, Usage: "time-based fair share: how strongly past usage lowers a queue's over-quota share (KAI's kValue, default 1); 0 turns it off"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, c, zerolog.Ctx(c.Context))
		},
	}
}

func runServe(ctx context.Context, c *cli.Context, log *zerolog.Logger) error {
	rt := c.String("runtime")
	if rt == "auto" {
		rt = ""
	}
	window, halfLife, k := c.Duration("fair-share-window"), c.Duration("fair-share-half-life"), c.Float64("fair-share-k")
	if window <= 0 || halfLife < 0 || k < 0 {
		return usageError(fmt.Errorf("--fair-share-window must be positive, --fair-share-half-life and --fair-share-k zero or more (see docs/scheduler.md)"))
	}
	// 0 is "off" on the command line; in daemon.Options 0 is the default
	// and a negative value is off.
	if halfLife == 0 {
		halfLife = -1
	}
	if k == 0 {
		k = -1
	}
	if c.Duration("job-retention") <= 0 {
		return usageError(fmt.Errorf("serve: --job-retention %s: give a positive duration, like 10m or 24h", c.Duration("job-retention")))
	}
	maxUpload, err := api.ParseSize(c.String("max-upload-size"))
	if err != nil || maxUpload <= 0 {
		return usageError(fmt.Errorf("serve: --max-upload-size %q: use a size like 100MB or 1GB", c.String("max-upload-size")))
	}
	if err := checkGatewayFlags(c); err != nil {
		return err
	}
	trusted, err := parseTrustedProxies(c.StringSlice("trust-forwarded-for"))
	if err != nil {
		return usageError(err)
	}
	srv, err := daemon.New(ctx, daemon.Options{
		MaxUploadBytes: int64(maxUpload),
		DataDir:        c.String("data-dir"), Listen: c.String("listen"), NoLocalAgent: c.Bool("no-local-agent"),
		FakeGPUs: c.String("fake-gpus"), Runtime: rt, Version: version, Logger: *log,
		DefaultImage: c.String("default-image"), ProcessUser: c.String("process-user"),
		PythonImage: c.String("python-image"), NvccImage: c.String("nvcc-image"), DindImage: c.String("dind-image"),
		ProcessAsServerUser: c.Bool("process-as-server-user"), ProcessWorkRoot: c.String("process-work-dir"), JobRetention: c.Duration("job-retention"),
		AllowPrivileged: c.Bool("allow-privileged"), VolumePrefixes: c.StringSlice("allow-volume-prefix"),
		RegistrationListen: c.String("registration-listen"), RegistrationCert: c.String("registration-cert"), RegistrationKey: c.String("registration-key"),
		FairShareWindow: window, FairShareHalfLife: halfLife, FairShareK: k,
		Domain: c.String("domain"), HTTPSListen: c.String("https-listen"), HTTPListen: c.String("http-listen"),
		GatewayTLS: c.String("tls"), ACMECA: c.String("acme-ca"), ACMEEmail: c.String("acme-email"), ACMECARoot: c.String("acme-ca-root"),
		ExternalGateway: c.Bool("external-gateway"), TrustedProxies: trusted,
		ConfigFile: c.String("config"), PluginDir: c.String("plugin-dir"), BuiltinBackends: builtinBackends().Names(),
	})
	if err != nil {
		return err
	}
	if tok := srv.AdminToken(); tok != "" {
		fmt.Fprintf(c.App.Writer, "Admin token (shown once; only its hash is stored):\n  %s\nLog in with: gpud login --url %s --token %s\n", tok, srv.URL(), tok)
	}
	log.Info().Str("url", srv.URL()).Msg("serving")
	return srv.Run(ctx)
}
