// Package slurmtest finds the real Slurm cluster that .ci/slurm.sh starts
// (slurmctld, slurmd with 4 fake GPUs, slurmrestd with JWT auth) for the
// Slurm backend's tests, mints JWTs with `scontrol token` and submits
// jobs of "another user" with sbatch. Tests skip without the cluster,
// naming what is missing, and fail when CI is set.
//
// It is for tests only and must not import daemon, store or sched.
package slurmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Cluster is the running test cluster.
type Cluster struct {
	// URL is slurmrestd's address; Conf its slurm.conf; User the
	// unprivileged user jobs run as; Dir the cluster's directory.
	URL, Conf, User, Dir string
}

// The variables .ci/slurm.sh exports.
const (
	EnvRestd = "GPUD_TEST_SLURMRESTD"
	EnvConf  = "GPUD_TEST_SLURM_CONF"
	EnvUser  = "GPUD_TEST_SLURM_USER"
	EnvDir   = "GPUD_TEST_SLURM_DIR"
)

// Find returns the cluster, or skips t (fails it under CI) naming what
// is missing.
func Find(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{URL: os.Getenv(EnvRestd), Conf: os.Getenv(EnvConf), User: os.Getenv(EnvUser), Dir: os.Getenv(EnvDir)}
	var missing []string
	for _, v := range []struct{ name, val string }{{EnvRestd, c.URL}, {EnvConf, c.Conf}, {EnvUser, c.User}, {EnvDir, c.Dir}} {
		if v.val == "" {
			missing = append(missing, v.name)
		}
	}
	if len(missing) == 0 {
		if _, err := exec.LookPath("scontrol"); err != nil {
			missing = append(missing, "scontrol (apt-get install slurm-client)")
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("no Slurm test cluster: %s unset (run: eval \"$(bash .ci/slurm.sh --start | tail -1)\")", strings.Join(missing, ", "))
		if os.Getenv("CI") == "" {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	return c
}

// OutputDir is a fresh directory under the cluster's shared output
// directory, writable by the job user, removed after the test.
func (c *Cluster) OutputDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Join(c.Dir, "output"), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Slurm runs a Slurm client command (scontrol, sbatch, scancel, squeue)
// against the cluster, as root unless user is set.
func (c *Cluster) Slurm(ctx context.Context, user string, args ...string) (string, error) {
	if user != "" {
		args = append([]string{"-u", user, "--"}, args...)
		args = append([]string{"runuser"}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Token mints a JWT for user, valid for an hour.
func (c *Cluster) Token(t testing.TB, user string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Slurm(ctx, "", "scontrol", "token", "username="+user, "lifespan=3600")
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := strings.CutPrefix(out, "SLURM_JWT=")
	if !ok {
		t.Fatalf("scontrol token: %q", out)
	}
	return strings.TrimSpace(tok)
}

// Hold submits, as the job user, a job of "another tenant" that holds
// gpus GPUs until it is cancelled, and returns its id; it is cancelled
// when the test ends. It waits for the job to run.
func (c *Cluster) Hold(t testing.TB, gpus int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Slurm(ctx, c.User, "sbatch", "--parsable", "--job-name=other-tenant", fmt.Sprintf("--gres=gpu:%d", gpus),
		"--mem=64", "--output=/dev/null", "--chdir=/tmp", "--wrap=sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(strings.Split(out, ";")[0])
	t.Cleanup(func() { c.Cancel(id) })
	for ctx.Err() == nil {
		st, err := c.Slurm(ctx, "", "squeue", "-h", "-j", id, "-o", "%T")
		if err == nil && st == "RUNNING" {
			return id
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the holding job %s does not run", id)
	return ""
}

// Cancel cancels a Slurm job (scancel) as root.
func (c *Cluster) Cancel(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.Slurm(ctx, "", "scancel", id)
}

// State is squeue's state of job id ("" once slurmctld forgets it).
func (c *Cluster) State(ctx context.Context, id string) string {
	out, err := c.Slurm(ctx, "", "squeue", "-h", "-t", "all", "-j", id, "-o", "%T")
	if err != nil {
		return ""
	}
	return out
}
