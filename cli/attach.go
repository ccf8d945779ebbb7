package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/portfwd"
)

// attachCommand forwards a run's ports to localhost until Ctrl-C.
func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "forward a run's ports to localhost until Ctrl-C: a service through the server proxy, a task's ports to its job",
		ArgsUsage: "RUN",
		Description: "A service is served on localhost:PORT (its port, or --port) by a reverse proxy to the\n" +
			"server's /proxy/services/PROJECT/RUN/ with your token added. For tasks and dev\n" +
			"environments each published port of the first job is forwarded over TCP from\n" +
			"localhost to the host port the agent bound on the job's instance. For a dev environment it\n" +
			"first sets up `ssh RUN` as `gpud ssh-config RUN` does, and prints its IDE link.",
		Flags: clientFlags(
			&cli.IntFlag{Name: "port", Usage: "local port for a service (default: the service's port)"},
		),
		Action: runAttach,
	}
}

func runAttach(c *cli.Context) error {
	name, cl, t, err := connectRun(c)
	if err != nil {
		return err
	}
	run, err := cl.GetRun(c.Context, t.Project, name)
	if err != nil {
		return fmt.Errorf("attach %s: %w", name, err)
	}
	if run.Finished() {
		return fmt.Errorf("attach %s: the run is %s", name, run.Status)
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sigs, stop := interrupts()
	defer stop()
	go func() { <-sigs; cancel() }()
	g := &forwards{cancel: cancel, errs: make(chan error, 16)}

	if run.ServiceURL != "" {
		port := c.Int("port")
		if port == 0 {
			port = servicePort(run)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("attach %s: %w (pick another with --port)", name, err)
		}
		base := cl.BaseURL() + run.ServiceURL
		fmt.Fprintf(c.App.Writer, "service %s: http://%s/ -> %s (Ctrl-C to detach)\n", name, l.Addr(), base)
		g.goRun(func() error { return portfwd.HTTP(ctx, l, base, t.Token) })
		return g.wait()
	}

	if run.Type == api.KindDevEnvironment {
		// A dev environment is reached over SSH: set up `ssh RUN` first.
		entry, err := writeSSHConfig(ctx, cl, t, name, true)
		if err != nil {
			return fmt.Errorf("attach %s: %w", name, err)
		}
		fmt.Fprintf(c.App.Writer, "ssh %s  (Host entry in %s)\n", name, entry)
		if run.IDELink != "" {
			fmt.Fprintf(c.App.Writer, "open in your IDE: %s\n", run.IDELink)
		}
		if len(run.Jobs) == 0 || len(run.Jobs[0].Ports) == 0 {
			return nil
		}
	}
	if len(run.Jobs) == 0 || len(run.Jobs[0].Ports) == 0 {
		return fmt.Errorf("attach %s: the run publishes no ports (add ports: to its configuration)", name)
	}
	job := run.Jobs[0]
	host, err := instanceAddress(ctx, cl, t.Project, job.Instance)
	if err != nil {
		return fmt.Errorf("attach %s: %w", name, err)
	}
	locals := localPorts(run)
	for _, p := range job.Ports {
		if p.Host == 0 {
			continue
		}
		target := net.JoinHostPort(host, strconv.Itoa(p.Host))
		local, ok := locals[p.Container]
		if !ok {
			local = p.Container
		}
		if isLoopback(host) && local == p.Host {
			fmt.Fprintf(c.App.Writer, "port %d: already on localhost:%d (the job runs on this machine)\n", p.Container, local)
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
		if err != nil {
			// Taken here: any free port serves as well; say which.
			if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return fmt.Errorf("attach %s: port %d: %w", name, p.Container, err)
			}
		}
		fmt.Fprintf(c.App.Writer, "port %d: localhost:%d -> %s\n", p.Container, l.Addr().(*net.TCPAddr).Port, target)
		g.goRun(func() error {
			return portfwd.TCP(ctx, l, target, func(err error) { fmt.Fprintf(c.App.ErrWriter, "gpud: %v\n", err) })
		})
	}
	if g.n == 0 {
		return nil
	}
	fmt.Fprintln(c.App.Writer, "forwarding; Ctrl-C to detach")
	return g.wait()
}

// servicePort is the port a service listens on, from its configuration.
func servicePort(run api.Run) int {
	cfg, err := api.Parse("", run.Configuration)
	if err == nil && cfg.Service != nil && cfg.Service.Port.Container > 0 {
		return cfg.Service.Port.Container
	}
	return 8000
}

// localPorts maps each container port of a task or dev environment to
// the local port its configuration asks for ("8080:80" -> 80: 8080).
func localPorts(run api.Run) map[int]int {
	out := map[int]int{}
	cfg, err := api.Parse("", run.Configuration)
	if err != nil {
		return out
	}
	var ports []api.PortMapping
	switch {
	case cfg.Task != nil:
		ports = cfg.Task.Ports
	case cfg.DevEnvironment != nil:
		ports = cfg.DevEnvironment.Ports
	}
	for _, p := range ports {
		if p.Local > 0 {
			out[p.Container] = p.Local
		}
	}
	return out
}

// isLoopback reports whether host names this machine's loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// instanceAddress is where a job's published ports are reached: the
// instance's hostname, or the server's host for the server's local agent.
func instanceAddress(ctx context.Context, cl *api.Client, project, instance string) (string, error) {
	is, err := cl.ListInstances(ctx, project)
	if err != nil {
		return "", err
	}
	for _, in := range is {
		if in.Name != instance && in.ID != instance {
			continue
		}
		if in.Backend == "local" || in.Hostname == "" {
			u, err := url.Parse(cl.BaseURL())
			if err != nil {
				return "", err
			}
			return u.Hostname(), nil
		}
		return in.Hostname, nil
	}
	return "", errors.New("the job's instance " + strconv.Quote(instance) + " is not listed")
}

// forwards runs forwarders; the first error ends them all.
type forwards struct {
	cancel context.CancelFunc
	errs   chan error
	n      int
}

func (f *forwards) goRun(fn func() error) {
	f.n++
	go func() {
		err := fn()
		if err != nil {
			f.cancel()
		}
		f.errs <- err
	}()
}

// wait returns the first error once every forwarder returned.
func (f *forwards) wait() error {
	var first error
	for range f.n {
		if err := <-f.errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
