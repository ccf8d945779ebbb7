package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/mixed"
	"gpud.dev/gpud/api"
)

// RunPolicy is whom an agent runs jobs for, which decides what its runtime
// may do with user code (docs/security.md, "Where user code runs, and as
// whom"). The zero value is `gpud agent`'s on a host of its own, but for
// ProcessAsOwnUser.
type RunPolicy struct {
	// ProcessUser is whom a root agent's process runtime runs jobs as
	// (DefaultProcessUser when ""); see ProcessRunAs.
	ProcessUser string
	// ProcessAsOwnUser lets an agent that is not root, and so cannot
	// switch users, run process jobs as its own user (logged): `gpud
	// agent` always, gpud serve only with --process-as-server-user.
	// Without it such an agent refuses the process runtime.
	ProcessAsOwnUser bool
	// InvokingUser runs process jobs as the agent's own user, whoever that
	// is: the embedded laptop mode, whose jobs are the invoking user's own
	// commands. ProcessUser and ProcessAsOwnUser are then unused.
	InvokingUser bool
	// ServerHost is gpud serve's own host, where every member's jobs run
	// beside the server's files: an auto (or unset) runtime is Docker
	// alone, and without the engine each job fails at start with the fix,
	// never a fallback to host processes; mixed runs image-less jobs as
	// processes of ProcessUser beside it; and a job with privileged: true
	// is refused (a privileged container is root on the host) unless
	// AllowPrivileged.
	ServerHost bool
	// AllowPrivileged is the host admin's opt-in to jobs with privileged:
	// true (gpud serve --allow-privileged for the server's own host, gpud
	// agent --allow-privileged for another): without it every agent but
	// the embedded laptop mode's (InvokingUser) refuses them, as such a
	// container is root on the host. The agent reports it
	// (api.HostInfo.AllowPrivileged) so plans can refuse early.
	AllowPrivileged bool
	// VolumePrefixes are the host directories the host admin lets jobs
	// mount as instance volumes (gpud agent or gpud serve
	// --allow-volume-prefix); none by default. The embedded laptop mode
	// (InvokingUser) allows any. VolumeDenied are paths never mounted
	// beside the agent's own data dirs (the server's, on its host).
	VolumePrefixes []string
	VolumeDenied   []string
}

// VolumePrefixesAllowed is where jobs may mount instance volumes: the
// admin's prefixes, or anywhere (but the data dirs) for the invoking
// user's own jobs on their own machine.
func (p RunPolicy) VolumePrefixesAllowed() []string {
	if p.InvokingUser {
		return []string{"/"}
	}
	return p.VolumePrefixes
}

// PrivilegedAllowed reports whether the agent runs privileged jobs: the
// admin allowed them, or the jobs are the invoking user's own commands on
// their own machine.
func (p RunPolicy) PrivilegedAllowed() bool { return p.AllowPrivileged || p.InvokingUser }

// RunAsError is a refusal of the process runtime's user (ProcessRunAs):
// the operator must choose other settings.
type RunAsError struct{ Err error }

func (e *RunAsError) Error() string { return e.Err.Error() }
func (e *RunAsError) Unwrap() error { return e.Err }

// OpenHostRuntime opens the runtime o.Kind names (auto when "") under
// policy p: it decides whom process jobs run as, overriding
// o.ProcessUser, and on the server's own host keeps user code off the
// host (see RunPolicy.ServerHost).
func OpenHostRuntime(ctx context.Context, o RuntimeOptions, p RunPolicy) (runtime.Runtime, api.DockerInfo, error) {
	o.ProcessUser = ""
	// On the server's host only an explicit choice runs processes.
	runsProcesses := !p.ServerHost || o.Kind == RuntimeProcess || o.Kind == RuntimeMixed
	if !p.InvokingUser && runsProcesses {
		user, err := ProcessRunAs(p.ProcessUser, p.ProcessAsOwnUser)
		if err != nil {
			return nil, api.DockerInfo{}, &RunAsError{err}
		}
		if user == "" && o.Kind != RuntimeDocker {
			msg := "this agent is not root: process-runtime jobs run as its own user and can read its data dir"
			if p.ServerHost {
				msg = "--process-as-server-user: process-runtime jobs run as this server's user and can read its data dir and state key"
			}
			o.Logger.Warn().Int("uid", os.Geteuid()).Msg(msg)
		}
		o.ProcessUser = user
	}
	if !p.ServerHost {
		rt, info, err := OpenRuntime(ctx, o)
		if err != nil || p.PrivilegedAllowed() {
			return rt, info, err
		}
		return unprivileged{Runtime: rt, fix: "run it on a host whose admin started gpud agent --allow-privileged"}, info, nil
	}
	switch o.Kind {
	case "", RuntimeAuto, RuntimeDocker, RuntimeMixed:
	default:
		return OpenRuntime(ctx, o)
	}
	var rt runtime.Runtime
	d, info, err := openDocker(ctx, o)
	switch {
	case err == nil && p.AllowPrivileged:
		rt = d
	case err == nil:
		rt = unprivileged{Runtime: d, fix: "run it on another fleet's host, or have the admin start gpud serve --allow-privileged"}
	case o.Kind == RuntimeDocker:
		return nil, info, err
	default:
		o.Logger.Warn().Err(err).Msg("Docker is not reachable: the local agent fails every job until Docker runs and the server restarts (or the admin starts it with --runtime process)")
		rt = unreachable{err: err, processUser: cmp.Or(p.ProcessUser, DefaultProcessUser)}
	}
	if o.Kind != RuntimeMixed {
		return rt, info, nil
	}
	proc, err := openProcess(o)
	if err != nil {
		return nil, info, errors.Join(fmt.Errorf("process runtime: %w", err), rt.Close())
	}
	return mixed.New(rt, proc), info, nil
}

// unprivileged refuses jobs with `privileged: true`: a privileged
// container is root on the host (it can mount the host's disks), on the
// server's own host the server's privileges. RunPolicy.AllowPrivileged
// (gpud serve or gpud agent --allow-privileged) is the admin's choice to
// allow them.
type unprivileged struct {
	runtime.Runtime
	fix string // what to do instead, for the error
}

// Start refuses a privileged job with the fix, else starts it.
func (u unprivileged) Start(ctx context.Context, spec api.JobSpec, pulling func()) (runtime.Handle, error) {
	if spec.Privileged {
		return runtime.Handle{}, fmt.Errorf("job %s: privileged: true would be root on this host, whose admin does not allow privileged jobs; %s", spec.ID, u.fix)
	}
	return u.Runtime.Start(ctx, spec, pulling)
}

// unreachable is the Docker side of the server host's runtime when Docker
// did not answer at start and the admin chose no process runtime: every
// job fails at start with a message that says what to do, as running user
// code as host processes is the admin's choice, not a fallback.
type unreachable struct {
	err         error
	processUser string
}

var _ runtime.Runtime = unreachable{}

// Name is "none": the instance shows that it runs nothing.
func (unreachable) Name() string { return "none" }

// Start fails with the fix.
func (u unreachable) Start(_ context.Context, spec api.JobSpec, _ func()) (runtime.Handle, error) {
	return runtime.Handle{}, fmt.Errorf("job %s: Docker is not reachable on the server host (%v): start Docker and restart gpud serve, "+
		"or have the admin start gpud serve --runtime process, which runs jobs as processes of user %q", spec.ID, u.err, u.processUser)
}

func (u unreachable) errFor(h runtime.Handle) error {
	return fmt.Errorf("job %s: no runtime: Docker is not reachable on the server host (%v)", h.JobID, u.err)
}

// Wait fails: no job ever ran.
func (u unreachable) Wait(_ context.Context, h runtime.Handle) (runtime.Exit, error) {
	return runtime.Exit{}, fmt.Errorf("%w: %w", runtime.ErrExitUnknown, u.errFor(h))
}

// Stop fails: no job ever ran.
func (u unreachable) Stop(_ context.Context, h runtime.Handle, _ time.Duration) error {
	return u.errFor(h)
}

// Logs has nothing to return.
func (unreachable) Logs(context.Context, runtime.Handle, runtime.LogOptions, func(api.JobLogEntry) error) error {
	return nil
}

// Usage fails: no job ever ran.
func (u unreachable) Usage(_ context.Context, h runtime.Handle) (runtime.Usage, error) {
	return runtime.Usage{}, u.errFor(h)
}

// Adopt finds nothing.
func (unreachable) Adopt(context.Context) ([]runtime.Found, error) { return nil, nil }

// Remove has nothing to remove.
func (unreachable) Remove(context.Context, runtime.Handle) error { return nil }

// Close releases nothing.
func (unreachable) Close() error { return nil }
