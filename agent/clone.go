package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/upload"
)

// cloneTimeout bounds the clones of one job.
const cloneTimeout = 10 * time.Minute

// CheckRepoURL accepts the URLs the agent clones: http and https only, so
// a job can make the agent read neither the host's files (file://, a
// path) nor use the host's SSH keys or helpers (ssh, ext::).
func CheckRepoURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return errors.New("repo: only http:// and https:// URLs are cloned")
	}
	return nil
}

var commitHash = regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`)

// withClones clones the job's repos on the host and returns the spec whose
// Upload is its upload with the clones added (a new archive, kept like any
// upload), so the runtimes unpack one archive. A spec without repos is
// returned as it is.
func (a *Agent) withClones(ctx context.Context, spec api.JobSpec) (api.JobSpec, error) {
	if len(spec.Repos) == 0 {
		return spec, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cloneTimeout)
	defer cancel()
	if err := os.MkdirAll(UploadDir(a.cfg.DataDir), 0o700); err != nil {
		return spec, err
	}
	work, err := os.MkdirTemp(UploadDir(a.cfg.DataDir), ".clone-")
	if err != nil {
		return spec, err
	}
	defer os.RemoveAll(work)
	var sources []upload.Source
	for i, r := range spec.Repos {
		dir := filepath.Join(work, fmt.Sprint(i))
		if err := clone(ctx, r, dir, filepath.Join(work, "home")); err != nil {
			return spec, err
		}
		sources = append(sources, upload.Source{Local: dir, Dest: r.Path})
	}
	opt := upload.Options{Clone: true, MaxBytes: MaxUploadBytes}
	if spec.Upload != "" {
		opt.Base = filepath.Join(UploadDir(a.cfg.DataDir), spec.Upload+".tar.gz")
	}
	tmp, err := os.CreateTemp(work, "merged-*.tar.gz")
	if err != nil {
		return spec, err
	}
	defer tmp.Close()
	ar, err := upload.Pack(tmp, sources, opt)
	if err != nil {
		return spec, fmt.Errorf("pack the cloned repos: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return spec, err
	}
	if err := a.StoreUpload(ar.SHA256, tmp); err != nil {
		return spec, fmt.Errorf("keep the cloned repos: %w", err)
	}
	spec.Upload = ar.SHA256
	return spec, nil
}

// clone runs git on the host with none of its configuration or
// credentials: an empty HOME, no system or global config, no prompt, and
// http(s) as the only protocols (redirects included).
func clone(ctx context.Context, r api.JobRepo, dir, home string) error {
	if err := CheckRepoURL(r.URL); err != nil {
		return err
	}
	if r.Hash != "" && !commitHash.MatchString(r.Hash) {
		return fmt.Errorf("repo: hash %q is not a commit hash", r.Hash)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_ALLOW_PROTOCOL=http:https", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false"}
	// A private repo's credentials (user:token@ in the URL, from a secret)
	// go to git as an HTTP header in its environment, never on its command
	// line (which other users of the host can read) nor into the clone's
	// .git/config; the URL the job sees and errors show carries none.
	u, _ := url.Parse(r.URL)
	var scrub []string
	if u.User != nil {
		pass, _ := u.User.Password()
		cred := u.User.Username() + ":" + pass
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte(cred)))
		scrub = append(scrub, u.User.String(), cred, pass, url.QueryEscape(pass))
		u.User = nil
	}
	public := u.String()
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			msg := strings.TrimSpace(string(out))
			for _, secret := range scrub {
				if secret != "" {
					msg = strings.ReplaceAll(msg, secret, "***")
				}
			}
			return fmt.Errorf("repo %s: git %s: %v: %s", public, args[0], err, msg)
		}
		return nil
	}
	args := []string{"clone", "--quiet", "--no-recurse-submodules"}
	if r.Branch != "" {
		args = append(args, "--branch", r.Branch)
	}
	if r.Hash == "" {
		args = append(args, "--depth", "1")
	}
	if err := git(append(args, "--", public, dir)...); err != nil {
		return err
	}
	if r.Hash != "" {
		if err := git("-C", dir, "checkout", "--quiet", "--detach", r.Hash); err != nil {
			return err
		}
	}
	return nil
}
