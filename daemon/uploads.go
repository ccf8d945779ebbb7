package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/untar"
	"gpud.dev/gpud/internal/upload"
)

// Uploads: the archives of runs' repos and files. The client packs them
// (internal/upload), PUTs the archive to .../uploads/{sha256} and names it
// in ApplyRunRequest.Upload. The server keeps each under its project,
// content-addressed (DataDir/uploads/<project>/<sha256>.tar.gz), so a run
// can only name an archive its own project uploaded. Before a job starts,
// the dispatcher pushes the archive to the job's agent over the agent API
// (the one link every kind of host has, the server always being the
// caller), and the agent unpacks it into the job's own directory.

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// maxUpload is the packed size the server accepts.
func (s *Server) maxUpload() int64 {
	if s.opts.MaxUploadBytes > 0 {
		return s.opts.MaxUploadBytes
	}
	return upload.DefaultMaxBytes
}

// uploadPath is where project's archive sum is kept.
func (s *Server) uploadPath(project, sum string) string {
	return filepath.Join(s.opts.DataDir, "uploads", project, sum+".tar.gz")
}

// handleUpload stores an archive. Its size must be declared (Content-Length)
// and within the limit, or it is refused before a byte of the body is
// read; the body is then read no further than the declared size, its
// SHA-256 must be the path's, and its entries must pass untar's rules (no
// absolute or ".." names, no link out, within the file-count and size
// limits), or nothing is kept.
func (s *runsAPI) handleUpload(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	sum := r.PathValue("sha256")
	if !sha256Hex.MatchString(sum) {
		return badField("sha256", "%q is not a SHA-256 in hex (64 lowercase hex digits)", sum)
	}
	limit := s.maxUpload()
	switch {
	case r.ContentLength < 0:
		return apiErr(http.StatusLengthRequired, api.CodeBadRequest, "", "an upload declares its size (Content-Length) up front")
	case r.ContentLength == 0:
		return apiErr(http.StatusBadRequest, api.CodeBadRequest, "", "the upload is empty")
	case r.ContentLength > limit:
		return apiErr(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, "",
			"the upload is %s, over this server's limit of %s: leave large or generated paths out with .gpudignore (gitignore syntax), or ask the server's admin for gpud serve --max-upload-size",
			upload.FormatBytes(r.ContentLength), upload.FormatBytes(limit))
	}
	dst := s.uploadPath(project, sum)
	if fi, err := os.Stat(dst); err == nil {
		// Uploaded again: it is in use again, so the sweep keeps it.
		now := time.Now()
		if err := os.Chtimes(dst, now, now); err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		writeJSON(w, http.StatusOK, api.Upload{SHA256: sum, Size: fi.Size()})
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".incoming-*")
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), http.MaxBytesReader(w, r.Body, r.ContentLength))
	if err != nil {
		return decodeError(err)
	}
	if n != r.ContentLength {
		return apiErr(http.StatusBadRequest, api.CodeBadRequest, "", "the upload ended after %d of %d bytes", n, r.ContentLength)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return badField("sha256", "the upload's SHA-256 is %s, not the %s its path names", got, sum)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if err := untar.Check(tmp, untar.DefaultLimits); err != nil {
		if errors.Is(err, untar.ErrRefused) {
			return badField("upload", "%v", err)
		}
		return fmt.Errorf("upload: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	s.log.Info().Str("project", project).Str("sha256", sum).Int64("bytes", n).Msg("upload stored")
	s.sweepUploads(project)
	writeJSON(w, http.StatusCreated, api.Upload{SHA256: sum, Size: n})
	return nil
}

// checkRunUpload refuses a run whose configuration sets repos or files
// without an upload of its project, and an upload named without them.
func (s *Server) checkRunUpload(project string, spec *api.RunSpec, sum string) error {
	needs := len(spec.Files) > 0 || slices.ContainsFunc(spec.Repos, func(r api.Repo) bool { return r.URL == "" })
	switch {
	case sum == "" && needs:
		field := "configuration.files"
		if len(spec.Repos) > 0 {
			field = "configuration.repos"
		}
		return badField(field, "repos and files travel as an archive: upload it (PUT .../uploads/{sha256}) and name it in the request's upload, as gpud run and gpud apply do")
	case sum == "":
		return nil
	case !needs:
		return badField("upload", "the configuration sets no local repos or files; drop upload")
	case !sha256Hex.MatchString(sum):
		return badField("upload", "%q is not a SHA-256 in hex", sum)
	}
	if _, err := os.Stat(s.uploadPath(project, sum)); err != nil {
		return badField("upload", "project %s has no upload %s; PUT it to /api/v1/projects/%s/uploads/%s first", project, sum, project, sum)
	}
	return nil
}

// pushUpload makes sure the job's agent holds the archive before the job
// starts: it asks, and sends it when the agent lacks it.
func (s *dispatcher) pushUpload(ctx context.Context, link *agentLink, project, sum string) error {
	has, err := link.client.HasUpload(ctx, sum)
	if err != nil || has {
		return err
	}
	f, err := os.Open(s.uploadPath(project, sum))
	if err != nil {
		return fmt.Errorf("the run's upload %s is gone from the server: %w", sum, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return link.client.PutUpload(ctx, sum, fi.Size(), f)
}

// jobRepos are the run's repos given by URL, which the job's agent clones
// on its host (agent.withClones), with their URLs interpolated: shown keeps
// secret references (what the job's spec stores), and sealed, set only
// when a URL interpolates a secret (a private repo's token), resolves them.
func jobRepos(spec *api.RunSpec, resolve func(api.Reference) (string, error)) (shown, sealed []api.JobRepo, err error) {
	secret := false
	for i, r := range spec.Repos {
		if r.URL == "" {
			continue
		}
		real, err := api.Interpolate(r.URL, resolve)
		if err != nil {
			return nil, nil, badField(fmt.Sprintf("configuration.repos[%d].url", i), "%v", err)
		}
		public, err := api.Interpolate(r.URL, withoutSecrets(resolve))
		if err != nil {
			return nil, nil, badField(fmt.Sprintf("configuration.repos[%d].url", i), "%v", err)
		}
		secret = secret || real != public
		jr := api.JobRepo{URL: public, Branch: r.Branch, Hash: r.Hash, Path: r.Path}
		shown = append(shown, jr)
		jr.URL = real
		sealed = append(sealed, jr)
	}
	if !secret {
		sealed = nil
	}
	return shown, sealed, nil
}

// uploadKeep is how long an archive no job names is kept after its last
// upload: long enough for a plan, an apply and a retry of the client.
const uploadKeep = 24 * time.Hour

// sweepUploads removes the project's archives that no job record names
// (a run deleted, or an upload never applied) and that were not uploaded
// in the last uploadKeep. It runs after each stored upload, so a project's
// disk use is bounded by what its runs name plus a day of uploads.
func (s *Server) sweepUploads(project string) {
	dir := filepath.Dir(s.uploadPath(project, "x"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		s.log.Warn().Err(err).Str("project", project).Msg("sweep uploads")
		return
	}
	named := map[string]bool{}
	for _, j := range s.store.Jobs().ByProject(project) {
		js, err := jobSpecOf(j)
		if err != nil {
			return // a record that does not decode might name any: keep all
		}
		named[js.Spec.Upload] = true
	}
	for _, e := range entries {
		sum, ok := strings.CutSuffix(e.Name(), ".tar.gz")
		if !ok || named[sum] {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < uploadKeep {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			s.log.Warn().Err(err).Str("project", project).Str("sha256", sum).Msg("sweep uploads")
			continue
		}
		s.log.Info().Str("project", project).Str("sha256", sum).Msg("upload removed: no run names it")
	}
}
