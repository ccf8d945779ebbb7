package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime"
)

// Wait blocks on the engine's wait endpoint until the container is not
// running, then reads the exit (code, OOM kill, finish time).
func (r *Runtime) Wait(ctx context.Context, h runtime.Handle) (runtime.Exit, error) {
	w := r.cli.ContainerWait(ctx, h.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
	case err := <-w.Error:
		if cerrdefs.IsNotFound(err) {
			return runtime.Exit{}, fmt.Errorf("job %s: container removed: %w", h.JobID, runtime.ErrExitUnknown)
		}
		return runtime.Exit{}, fmt.Errorf("job %s: wait: %w", h.JobID, err)
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
	ins, err := r.cli.ContainerInspect(ctx, h.ID, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return runtime.Exit{}, fmt.Errorf("job %s: container removed: %w", h.JobID, runtime.ErrExitUnknown)
	}
	if err != nil {
		return runtime.Exit{}, fmt.Errorf("job %s: inspect after exit: %w", h.JobID, err)
	}
	return exitOf(ins.Container.State), nil
}

func exitOf(s *container.State) runtime.Exit {
	if s == nil {
		return runtime.Exit{Code: -1}
	}
	e := runtime.Exit{Code: s.ExitCode, OOMKilled: s.OOMKilled, FinishedAt: parseDockerTime(s.FinishedAt)}
	e.Signal = signalName(s.ExitCode)
	return e
}

// Stop sends SIGTERM, waits up to grace for the container to stop (on the
// engine's wait endpoint, not by polling), then sends SIGKILL.
func (r *Runtime) Stop(ctx context.Context, h runtime.Handle, grace time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	w := r.cli.ContainerWait(waitCtx, h.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	if _, err := r.cli.ContainerKill(ctx, h.ID, client.ContainerKillOptions{Signal: "SIGTERM"}); err != nil {
		if notRunning(err) {
			return nil
		}
		return fmt.Errorf("job %s: SIGTERM: %w", h.JobID, err)
	}
	select {
	case <-w.Result:
		return nil
	case <-w.Error:
	case <-waitCtx.Done():
	}
	if _, err := r.cli.ContainerKill(ctx, h.ID, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil && !notRunning(err) {
		return fmt.Errorf("job %s: SIGKILL: %w", h.JobID, err)
	}
	return nil
}

// notRunning reports whether err says the container already ended.
func notRunning(err error) bool {
	return cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err)
}

// Adopt lists this agent's containers, running or not.
func (r *Runtime) Adopt(ctx context.Context) ([]runtime.Found, error) {
	f := make(client.Filters).Add("label", LabelManaged+"=true", LabelAgent+"="+r.cfg.AgentID)
	list, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("docker runtime: list containers: %w", err)
	}
	var found []runtime.Found
	for _, c := range list.Items {
		ins, err := r.cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("docker runtime: inspect %s: %w", c.ID, err)
		}
		jobID := c.Labels[LabelJob]
		fd := runtime.Found{Handle: handleOf(jobID, ins.Container), RunName: c.Labels[LabelRun]}
		fd.Running = ins.Container.State != nil && (ins.Container.State.Running || ins.Container.State.Restarting)
		if !fd.Running {
			fd.Exit = exitOf(ins.Container.State)
		}
		found = append(found, fd)
	}
	return found, nil
}

// Remove deletes the container (forcefully, if it still runs) and the
// job's files.
func (r *Runtime) Remove(ctx context.Context, h runtime.Handle) error {
	r.mu.Lock()
	delete(r.cgroups, h.ID)
	r.mu.Unlock()
	_, err := r.cli.ContainerRemove(ctx, h.ID, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("job %s: remove container: %w", h.JobID, err)
	}
	if err := os.RemoveAll(r.jobDir(h.JobID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("job %s: %w", h.JobID, err)
	}
	return nil
}
