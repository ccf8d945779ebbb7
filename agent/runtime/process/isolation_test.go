package process_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestMain lets the test binary act as the shim ("<binary> shim <dir>").
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "shim" {
		os.Exit(process.RunShim(os.Args[2]))
	}
	os.Exit(m.Run())
}

func open(t *testing.T, cfg process.Config) *process.Runtime {
	t.Helper()
	cfg.ShimCommand = []string{os.Args[0], "shim"}
	rt, err := process.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func output(t *testing.T, rt *process.Runtime, h runtime.Handle) []string {
	t.Helper()
	var out []string
	err := rt.Logs(context.Background(), h, runtime.LogOptions{Stdout: true, Stderr: true}, func(e api.JobLogEntry) error {
		out = append(out, e.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// filesHolding lists the files under dir whose bytes contain value.
func filesHolding(t *testing.T, dir, value string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(value)) {
			hits = append(hits, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// On a root agent (the server's local agent, or a registered host) the
// process runtime once ran jobs as root in the agent's working directory,
// and wrote their resolved secrets to launch.json for good. Now a job runs
// as the configured unprivileged user in a fresh directory of its own,
// cannot read the agent's data dir nor list the other jobs' directories,
// and its secret is in no file of the data dir while it runs or after.
func TestJobsRunUnprivilegedInTheirOwnDirectoryAndSecretsNeverTouchTheDisk(t *testing.T) {
	testutil.NeedRoot(t, "switching to an unprivileged user")
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "state.key"), []byte("server key"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := open(t, process.Config{DataDir: filepath.Join(dataDir, "jobs"), RunAs: "nobody"})
	raw := make([]byte, 16)
	rand.Read(raw)
	secret := "s3cret-" + hex.EncodeToString(raw)
	spec := api.JobSpec{ID: "iso-1", RunName: "iso", Env: map[string]string{"TOKEN": secret}, Commands: []string{
		"id -u", "pwd", "echo HOME=$HOME",
		"cat " + dataDir + "/state.key || echo cannot-read-key",
		"ls " + filepath.Dir(rt.WorkRoot()) + "/" + filepath.Base(rt.WorkRoot()) + " || echo cannot-list-jobs",
		": " + secret + "; test \"$TOKEN\" = " + secret + " && echo has-secret",
		"while [ ! -e gate ]; do sleep 0.05; done",
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := rt.Start(ctx, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cwd string
	testutil.Eventually(t, 20*time.Second, func() error {
		out := output(t, rt, h)
		if !slices.Contains(out, "has-secret") {
			return fmt.Errorf("output %q", out)
		}
		// pwd's line: stdout and stderr (cat's refusal) are two pipes, so
		// lines of the two may come in either order.
		i := slices.IndexFunc(out, func(l string) bool { return strings.HasPrefix(l, "/") })
		if i < 0 {
			return fmt.Errorf("no working directory in the output %q", out)
		}
		cwd = out[i]
		return nil
	})
	if hits := filesHolding(t, dataDir, secret); len(hits) > 0 {
		t.Fatalf("while the job runs, its secret is in %v", hits)
	}
	if fi, err := os.Stat(cwd); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("working directory %s: %v, %v; want mode 0700", cwd, fi, err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	exit, err := rt.Wait(ctx, h)
	if err != nil || exit.Code != 0 {
		t.Fatalf("exit %+v, %v; output %q", exit, err, output(t, rt, h))
	}
	out := output(t, rt, h)
	serverCwd, _ := os.Getwd()
	if slices.Contains(out, "0") || !slices.Contains(out, "65534") {
		t.Errorf("id -u in %q, want nobody's 65534", out)
	}
	if !strings.HasPrefix(cwd, rt.WorkRoot()+"/iso-1-") || cwd == serverCwd || strings.HasPrefix(cwd, dataDir) {
		t.Errorf("pwd = %s, want a fresh directory under %s (not %s nor the data dir)", cwd, rt.WorkRoot(), serverCwd)
	}
	for _, want := range []string{"HOME=" + cwd, "cannot-read-key", "cannot-list-jobs"} {
		if !slices.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if slices.Contains(out, "server key") {
		t.Error("the job read the agent's data dir")
	}
	if _, err := os.Stat(cwd); !os.IsNotExist(err) {
		t.Errorf("working directory after the job: %v, want it gone", err)
	}
	if hits := filesHolding(t, dataDir, secret); len(hits) > 0 {
		t.Fatalf("after the job, its secret is in %v", hits)
	}
	if err := rt.Remove(ctx, h); err != nil {
		t.Fatal(err)
	}
}

// A job cannot pick root (or any user but the configured one) when the
// runtime runs every job as an unprivileged user.
func TestAJobCannotChooseAnotherUserThanTheRuntimes(t *testing.T) {
	testutil.NeedRoot(t, "switching to an unprivileged user")
	rt := open(t, process.Config{DataDir: filepath.Join(t.TempDir(), "jobs"), RunAs: "nobody"})
	for _, user := range []string{"root", "0", "0:0"} {
		_, err := rt.Start(context.Background(), api.JobSpec{ID: "as-root", Commands: []string{"id -u"}, User: user}, nil)
		if err == nil || !strings.Contains(err.Error(), "runs every job as nobody") {
			t.Fatalf("user %s: %v, want a refusal", user, err)
		}
	}
}

// A job directory left by an agent from before job.json held launch.json
// with the job's secrets in plaintext: adoption finds the job by it, keeps
// its id and run name in job.json and deletes launch.json.
func TestAdoptionDeletesALegacyLaunchFile(t *testing.T) {
	jobs := filepath.Join(t.TempDir(), "jobs")
	dir := filepath.Join(jobs, "old-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	legacy, _ := json.Marshal(map[string]any{"job_id": "old-1", "run_name": "old", "argv": []string{"/bin/sh", "-c", "true"}, "env": []string{"TOKEN=plaintext-secret"}})
	child, _ := json.Marshal(map[string]any{"shim_pid": 1 << 22, "pid": 1 << 22})
	exit, _ := json.Marshal(runtime.Exit{Code: 3})
	for name, b := range map[string][]byte{"launch.json": legacy, "child.json": child, "exit.json": exit} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rt := open(t, process.Config{DataDir: jobs})
	found, err := rt.Adopt(context.Background())
	if err != nil || len(found) != 1 || found[0].Handle.JobID != "old-1" || found[0].RunName != "old" || found[0].Exit.Code != 3 {
		t.Fatalf("adopt = %+v, %v", found, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "launch.json")); !os.IsNotExist(err) {
		t.Fatalf("launch.json after adoption: %v, want it deleted", err)
	}
	if hits := filesHolding(t, jobs, "plaintext-secret"); len(hits) > 0 {
		t.Fatalf("the legacy secret is still in %v", hits)
	}
}

// A job whose shim is killed with it records no exit and so never deletes
// its working directory itself; the runtime does when it finds it lost,
// so the job's files do not stay in the work root for good.
func TestALostJobsWorkingDirectoryIsDeleted(t *testing.T) {
	jobs := filepath.Join(t.TempDir(), "jobs")
	rt := open(t, process.Config{DataDir: jobs})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := rt.Start(ctx, api.JobSpec{ID: "lost-1", Commands: []string{"pwd", "sleep 300"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cwd string
	testutil.Eventually(t, 20*time.Second, func() error {
		if out := output(t, rt, h); len(out) > 0 {
			cwd = out[0]
			return nil
		}
		return fmt.Errorf("no output yet")
	})
	var c struct {
		PID int `json:"pid"`
	}
	b, err := os.ReadFile(filepath.Join(jobs, "lost-1", "child.json"))
	if err != nil || json.Unmarshal(b, &c) != nil {
		t.Fatalf("child.json %q: %v", b, err)
	}
	shim, _, _ := strings.Cut(h.ID, ":")
	var shimPID int
	fmt.Sscan(shim, &shimPID)
	if err := syscall.Kill(shimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-c.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Wait(ctx, h); !errors.Is(err, runtime.ErrExitUnknown) {
		t.Fatalf("wait: %v, want the exit unknown", err)
	}
	if _, err := os.Stat(cwd); !os.IsNotExist(err) {
		t.Fatalf("working directory %s of the lost job: %v, want it gone", cwd, err)
	}
	if err := rt.Remove(ctx, h); err != nil {
		t.Fatal(err)
	}
}
