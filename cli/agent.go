package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/gpu"
	"gpud.dev/gpud/agent/host"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/agent/server"
	"gpud.dev/gpud/agent/tunnel"
	"gpud.dev/gpud/api"
)

// agentCommand is `gpud agent`: the host agent and its inventory dump.
func agentCommand() *cli.Command {
	fakeGPUs := &cli.StringFlag{Name: "fake-gpus", Usage: "report a fake inventory instead of reading hardware, like 8xH100:80GB", EnvVars: []string{"GPUD_FAKE_GPUS"}}
	return &cli.Command{
		Name:  "agent",
		Usage: "run the host agent: report accelerators, run jobs in Docker or as processes, serve the agent API",
		Description: "Serves the agent API (/api/v1, bearer token) and Prometheus /metrics. Jobs keep\n" +
			"running when the agent stops; a restarted agent re-adopts them. See docs/agent.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: defaultAgentDir(), Usage: "state file, job files and the token live here", EnvVars: []string{"GPUD_AGENT_DATA_DIR"}},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7071", Usage: "host:port or unix:///path/agent.sock", EnvVars: []string{"GPUD_AGENT_LISTEN"}},
			&cli.StringFlag{Name: "token", Usage: "API bearer token (default: DATA_DIR/token, created on first start); with --server the fleet's registration token. Prefer the environment variable or --token-file: a flag's value shows in ps", EnvVars: []string{"GPUD_AGENT_TOKEN"}},
			&cli.StringFlag{Name: "token-file", Usage: "read the token (see --token) from this file (keep it mode 0600)", EnvVars: []string{"GPUD_AGENT_TOKEN_FILE"}},
			&cli.StringFlag{Name: "hostname", Usage: "with --server: the name to register this host under (default: the hostname)", EnvVars: []string{"GPUD_AGENT_HOSTNAME"}},
			&cli.StringFlag{Name: "runtime", Value: agent.RuntimeAuto, Usage: "docker, process, mixed (jobs with an image in Docker, image-less ones as processes; process alone without Docker), or auto (docker when reachable, else process)"},
			&cli.StringFlag{Name: "process-user", Value: agent.DefaultProcessUser, Usage: "process runtime on a root agent: the unprivileged user jobs run as (an agent that is not root runs them as itself)", EnvVars: []string{"GPUD_AGENT_PROCESS_USER"}},
			&cli.StringFlag{Name: "process-work-dir", Usage: "process runtime: where each job gets a fresh working directory (default /var/tmp/gpud-work-<hash>)"},
			&cli.StringFlag{Name: "server", Usage: "register with the server at this https:// URL instead of listening (the token, from GPUD_AGENT_TOKEN or --token-file, is then the fleet's registration token); see docs/fleets.md", EnvVars: []string{"GPUD_SERVER"}},
			&cli.StringFlag{Name: "server-ca", Usage: "PEM file of the CA that signed the server's certificate (default: the system's roots)"},
			&cli.BoolFlag{Name: "allow-privileged", Usage: "run jobs with privileged: true (and docker: true) on this host: such a container is root here, so only for hosts whose jobs may own them", EnvVars: []string{"GPUD_AGENT_ALLOW_PRIVILEGED"}},
			&cli.StringSliceFlag{Name: "allow-volume-prefix", Usage: "let jobs mount instance volumes (host paths) under these directories, like /data,/scratch (never the agent's data dir); none by default", EnvVars: []string{"GPUD_AGENT_ALLOW_VOLUME_PREFIX"}},
			&cli.StringFlag{Name: "agent-id", Value: "default", Usage: "tells this agent's containers from other agents' on the same engine"},
			&cli.DurationFlag{Name: "job-retention", Value: agent.DefaultJobRetention, Usage: "remove a finished job's container or files this long after it ended (its logs are in the server's store)", EnvVars: []string{"GPUD_AGENT_JOB_RETENTION"}},
			fakeGPUs,
		},
		Action: func(c *cli.Context) error {
			token, err := agentToken(c)
			if err != nil {
				return usageError(err)
			}
			if c.Duration("job-retention") <= 0 {
				return usageError(fmt.Errorf("--job-retention %s: give a positive duration, like 10m or 24h", c.Duration("job-retention")))
			}
			return runAgent(c.Context, agentFlags{
				dataDir: c.String("data-dir"), listen: c.String("listen"), token: token,
				runtime: c.String("runtime"), agentID: c.String("agent-id"), fakeGPUs: c.String("fake-gpus"),
				processUser: c.String("process-user"), processWorkDir: c.String("process-work-dir"),
				server: c.String("server"), serverCA: c.String("server-ca"), hostname: c.String("hostname"),
				allowPrivileged: c.Bool("allow-privileged"), volumePrefixes: c.StringSlice("allow-volume-prefix"),
				jobRetention: c.Duration("job-retention"),
			})
		},
		Subcommands: []*cli.Command{
			{
				Name:  "inventory",
				Usage: "print this host's CPU, memory, disk, OS and accelerators once, then exit",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the agent API's host info as JSON"}, fakeGPUs},
				Action: func(c *cli.Context) error {
					return runInventory(c.Context, c.String("fake-gpus"), c.Bool("json"), c.App.Writer)
				},
			},
			{
				Name:      "shim",
				Hidden:    true,
				Usage:     "supervise one process-runtime job (started by the agent)",
				ArgsUsage: "JOB_DIR",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError(fmt.Errorf("agent shim: give the job directory"))
					}
					if code := process.RunShim(c.Args().First()); code != 0 {
						return exitWith(code, "")
					}
					return nil
				},
			},
		},
	}
}

type agentFlags struct {
	dataDir, listen, token, runtime, agentID, fakeGPUs string
	server, serverCA, hostname                         string
	processUser, processWorkDir                        string
	allowPrivileged                                    bool
	volumePrefixes                                     []string
	jobRetention                                       time.Duration
}

// agentToken is the token from --token (or GPUD_AGENT_TOKEN) or from the
// file --token-file names, never both. A token typed as a flag shows in
// every user's ps, so it is warned about.
func agentToken(c *cli.Context) (string, error) {
	token, file := c.String("token"), c.String("token-file")
	if file == "" {
		if token != "" && os.Getenv("GPUD_AGENT_TOKEN") != token {
			zerolog.Ctx(c.Context).Warn().Msg("--token on the command line is visible to every user in ps; set GPUD_AGENT_TOKEN or use --token-file")
		}
		return token, nil
	}
	if token != "" {
		return "", fmt.Errorf("give the token once: --token (GPUD_AGENT_TOKEN) or --token-file, not both")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token = strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--token-file %s is empty", file)
	}
	return token, nil
}

func defaultAgentDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ".gpud/agent"
	}
	return filepath.Join(home, ".gpud", "agent")
}

func runAgent(ctx context.Context, f agentFlags) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := zerolog.Ctx(ctx).With().Str("component", "agent").Logger()
	token := f.token
	if f.server != "" {
		token = "" // --token registers; the API token is the data dir's, sent over TLS
	}
	// The agent runs jobs for a server: as root, its process runtime runs
	// them as an unprivileged user; otherwise as the agent's own user.
	h, err := server.OpenHost(ctx, server.HostConfig{DataDir: f.dataDir, AgentID: f.agentID, Runtime: f.runtime,
		Policy:          agent.RunPolicy{ProcessUser: f.processUser, ProcessAsOwnUser: true, AllowPrivileged: f.allowPrivileged, VolumePrefixes: f.volumePrefixes},
		ProcessWorkRoot: f.processWorkDir, FakeGPUs: f.fakeGPUs, JobRetention: f.jobRetention, Token: token, Version: version, Logger: log})
	if runAs := (*agent.RunAsError)(nil); errors.As(err, &runAs) {
		return usageError(runAs)
	}
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer func() {
		if cerr := h.Close(); cerr != nil {
			log.Warn().Err(cerr).Msg("agent close")
		}
	}()
	if f.server != "" {
		cfg, err := tunnel.NewConfig(tunnel.Flags{Server: f.server, ServerCA: f.serverCA, Token: f.token, DataDir: f.dataDir, Host: f.hostname}, h.Token, h.Handler, log)
		if err != nil {
			return usageError(err)
		}
		log.Info().Str("server", f.server).Str("runtime", h.RuntimeName()).Str("data_dir", f.dataDir).Msg("agent registering")
		return tunnel.Serve(ctx, cfg)
	}
	l, err := server.Listen(f.listen)
	if err != nil {
		return err
	}
	log.Info().Str("listen", f.listen).Str("runtime", h.RuntimeName()).Str("data_dir", f.dataDir).Msg("agent serving")
	return h.Serve(ctx, l)
}

func runInventory(ctx context.Context, fake string, asJSON bool, w io.Writer) error {
	inv, err := gpu.Discover(ctx, gpu.Options{Fake: fake})
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	dir, _ := os.Getwd()
	h, err := host.Info(dir)
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	h.Accelerators, h.AgentVersion = agent.Accelerators(inv), version
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(h)
	}
	printInventory(w, h)
	return nil
}

func printInventory(w io.Writer, h api.HostInfo) {
	fmt.Fprintf(w, "host      %s (%s, %s, kernel %s)\n", h.Hostname, h.OS, h.Arch, h.Kernel)
	fmt.Fprintf(w, "cpus      %d\nmemory    %.1fGB\ndisk      %.1fGB (%.1fGB free)\n", h.CPUs, h.Memory.GiB(), h.Disk.GiB(), h.DiskFree.GiB())
	fmt.Fprintf(w, "addresses %s\n", strings.Join(h.Addresses, ", "))
	acc := h.Accelerators
	fmt.Fprintf(w, "gpus      %d from %s", len(acc.Devices), acc.Source)
	if acc.Driver != "" {
		fmt.Fprintf(w, " (driver %s, CUDA %s)", acc.Driver, acc.CUDA)
	}
	fmt.Fprintln(w)
	for _, d := range acc.Devices {
		fmt.Fprintf(w, "  %d  %-28s %-8s %6s  %s  %s\n", d.Index, d.Name, d.Vendor, api.Size(d.MemoryTotal), d.PCIBusID, d.UUID)
		for _, m := range d.MIG {
			fmt.Fprintf(w, "       MIG %-10s %6s  %s\n", m.Profile, api.Size(m.MemoryTotal), m.UUID)
		}
	}
	if len(acc.Links) > 0 {
		fmt.Fprintln(w, "topology")
		for i, row := range acc.Links {
			fmt.Fprintf(w, "  %d  %s\n", i, strings.Join(row, " "))
		}
	}
}
