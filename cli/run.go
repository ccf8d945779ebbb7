package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/internal/upload"
)

// runCommand submits a task, service or dev environment and follows it.
func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "submit a task, service or dev environment, show its plan, stream its logs, exit with its exit code",
		ArgsUsage: "FILE",
		Description: "Reads the configuration, asks the server for a plan (the offers it would get), asks\n" +
			"[y/n] unless -y, submits it, shows its status until it runs, then streams its logs and\n" +
			"exits with the exit code of its first job. Ctrl-C asks whether to stop the run.\n" +
			"With no server configured (no ~/.gpud/config.yml, no GPUD_SERVER) the run goes to an\n" +
			"embedded server with a local agent on this machine, state under ~/.gpud ($GPUD_HOME),\n" +
			"and -y is implied.",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "submit without asking"},
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "submit and return; follow later with gpud logs -f"},
			&cli.StringFlag{Name: "name", Aliases: []string{"n"}, Usage: "run name (default: the configuration's name, or one the server picks)"},
			&cli.BoolFlag{Name: "force", Usage: "replace an active run of the same name"},
			&cli.StringFlag{Name: "profile", Usage: "merge the named profile of .gpud/profiles.yml or .dstack/profiles.yml"},
			&cli.BoolFlag{Name: "plan-only", Usage: "show the plan (offers, notes, fields gpud would refuse) and exit without submitting; exit 1 when refused"},
			&cli.BoolFlag{Name: "json", Usage: "with --plan-only: print the plan as JSON"},
		),
		Action: runRun,
	}
}

func runRun(c *cli.Context) error {
	path, err := oneArg(c, "file")
	if err != nil {
		return err
	}
	cfg, source, profiled, err := loadRunConfig(path, c.String("profile"), c.App.ErrWriter)
	if err != nil {
		return err
	}
	target, err := resolveTarget(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sess := &runSession{out: c.App.Writer, errw: c.App.ErrWriter, project: target.Project, assumeYes: c.Bool("yes"),
		planOnly: c.Bool("plan-only"), json: c.Bool("json")}
	if sess.json && !sess.planOnly {
		return usageError(errors.New("run: --json goes with --plan-only (a run's output is its jobs' logs)"))
	}
	if target.Embedded {
		if p := target.Project; p != daemon.DefaultProject {
			return usageError(fmt.Errorf("run: --project %s: the embedded server (no server configured) has only project %s", p, daemon.DefaultProject))
		}
		if c.Bool("detach") && !sess.planOnly {
			return usageError(errors.New("run: -d needs a server — with none configured the run lives in this command's embedded server, which ends with it; start one with gpud serve and gpud login"))
		}
		stop, err := sess.startEmbedded(ctx, c)
		if err != nil {
			return err
		}
		defer stop()
	} else if sess.client, err = api.NewClient(target.URL, target.Token, nil); err != nil {
		return err
	}
	req := api.ApplyRunRequest{
		ApplyRequest: api.ApplyRequest{ConfigurationYAML: string(source), Filename: filepath.Base(path)},
		Env:          api.ClientEnv(cfg, source, os.LookupEnv),
		Name:         c.String("name"),
		Force:        c.Bool("force"),
	}
	if profiled {
		// A merged profile exists only client-side: send the normalized spec.
		if req.Configuration, err = cfg.MarshalJSON(); err != nil {
			return err
		}
		req.ConfigurationYAML = ""
	}
	if req.Upload, err = upload.Send(ctx, sess.client, sess.project, cfg.Run(), filepath.Dir(path), 0, sess.errw); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	run, err := sess.submit(ctx, req)
	if err != nil || run == nil {
		return err
	}
	if run.IDELink != "" && !sess.embedded {
		fmt.Fprintf(sess.errw, "dev environment %s: once running, `gpud ssh-config %s` then `ssh %s`, or open %s\n", run.Name, run.Name, run.Name, run.IDELink)
	}
	if run.ServiceURL != "" && !sess.embedded {
		fmt.Fprintf(sess.errw, "service %s: %s%s once running (with your token), or gpud attach %s for localhost\n", run.Name, sess.client.BaseURL(), run.ServiceURL, run.Name)
	}
	if c.Bool("detach") {
		fmt.Fprintf(sess.errw, "run %s submitted; follow it with gpud logs -f %s\n", run.Name, run.Name)
		return nil
	}
	return sess.follow(ctx, run.Name)
}

// loadRunConfig parses the file and checks it is a run; errors are printed
// with their positions and mapped to exit code 1. profiled reports whether
// a profile was merged into it (then only the parsed spec carries it).
func loadRunConfig(path, profileName string, stderr io.Writer) (cfg *api.Config, source []byte, profiled bool, err error) {
	profile, err := selectProfile(profileName)
	if err != nil {
		return nil, nil, false, invalidInputf("gpud run: %w", err)
	}
	source, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, false, invalidInputf("gpud run: %w", err)
	}
	cfg, err = api.Parse(path, source, api.WithProfile(profile))
	if err != nil {
		var el api.ErrorList
		if errors.As(err, &el) {
			for _, e := range el {
				fmt.Fprintln(stderr, e.Detail())
			}
			return nil, nil, false, invalidInputf("gpud run: %s is invalid", path)
		}
		return nil, nil, false, invalidInputf("gpud run: %w", err)
	}
	if cfg.Run() == nil {
		return nil, nil, false, invalidInputf("gpud run: %s is a %s, not a task, service or dev-environment — use gpud apply %s", path, cfg.Kind, path)
	}
	return cfg, source, profile != nil, nil
}

// runSession is one `gpud run`: where it submits and how it talks to the user.
type runSession struct {
	client    *api.Client
	project   string
	out, errw io.Writer
	assumeYes bool
	embedded  bool
	// planOnly shows the plan and submits nothing; json prints it as JSON.
	planOnly, json bool
}

// submit plans the run, shows the plan, asks, and applies. It returns nil
// without an error when the user declines.
func (s *runSession) submit(ctx context.Context, req api.ApplyRunRequest) (*api.Run, error) {
	plan, err := s.client.PlanRun(ctx, s.project, req)
	if err != nil {
		return nil, serverError("plan", err, s.errw)
	}
	if s.planOnly {
		if s.json {
			return nil, printJSON(s.out, plan)
		}
		printPlan(s.out, plan)
		printNotes(s.errw, plan)
		return nil, nil
	}
	switch {
	case !s.assumeYes:
		printPlan(s.out, plan)
	case !s.embedded:
		// Scripts read the job's output on stdout: keep the plan off it.
		fmt.Fprintf(s.errw, "run %s: %s in project %s, %d offers\n", orDash(plan.Run.Name), plan.Action, s.project, len(plan.Offers))
	}
	printNotes(s.errw, plan)
	if !s.assumeYes {
		if !stdinIsTerminal() {
			return nil, usageError(errors.New("run: stdin is not a terminal, so gpud cannot ask [y/n] — pass -y to submit without asking"))
		}
		verb := "Submit"
		switch plan.Action {
		case "replace":
			verb = "Replace the active run with"
		case "update":
			verb = "Roll out to the running service"
		}
		if !ask(s.errw, fmt.Sprintf("%s the run %s?", verb, orDash(plan.Run.Name))) {
			fmt.Fprintln(s.errw, "not submitted")
			return nil, nil
		}
		req.Force = req.Force || plan.Action == "replace"
	}
	run, err := s.client.ApplyRun(ctx, s.project, req)
	if err != nil {
		return nil, serverError("submit", err, s.errw)
	}
	return &run, nil
}

// printPlan writes the run's plan: what it asks for and the offers.
func printPlan(w io.Writer, plan api.RunPlan) {
	r := plan.Run
	fmt.Fprintf(w, " project  %s\n run      %s (%s, %s)\n queue    %s, priority %d\n", r.Project, orDash(r.Name), r.Type, plan.Action, orDash(r.Queue), r.Priority)
	if len(r.Jobs) > 0 {
		j := r.Jobs[0].Resources
		fmt.Fprintf(w, " jobs     %d, each %s\n", len(r.Jobs), jobResources(j))
	}
	fmt.Fprintln(w)
	if len(plan.Offers) == 0 {
		fmt.Fprintln(w, " no offers now; the run will wait in its queue")
		return
	}
	t := newTable(w, " #", "BACKEND", "FLEET", "INSTANCE", "RESOURCES", "PRICE", "AVAILABILITY")
	for i, o := range plan.Offers {
		t.row(fmt.Sprintf(" %d", i+1), o.Backend, orDash(o.Fleet), orDash(o.Instance), instanceResources(o.Resources), offerPrice(o), orDash(o.Available))
	}
	_ = t.flush()
	fmt.Fprintln(w)
}

// printNotes writes the plan's notes: why it may wait, and what gpud does
// differently from a dstack server.
func printNotes(w io.Writer, plan api.RunPlan) {
	if plan.Message != "" {
		fmt.Fprintf(w, "note: %s\n", plan.Message)
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// serverError prints every configuration error of an invalid_configuration
// answer (the server's positions) and returns an exit-1 error.
func serverError(what string, err error, stderr io.Writer) error {
	var se *api.ServerError
	if errors.As(err, &se) && len(se.Errors) > 0 {
		for _, e := range se.Errors {
			fmt.Fprintln(stderr, e)
		}
		if se.Code == api.CodeNotHonoured {
			return invalidInputf("gpud: %s: the configuration sets fields gpud would not honour where the run may go (above): drop them or do what each line says", what)
		}
		return invalidInputf("gpud: %s: the server refused the configuration", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}
