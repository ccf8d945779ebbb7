package upload

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mattn/go-isatty"

	"gpud.dev/gpud/api"
)

// Sources lists what a run's repos and files pack, local paths resolved
// against baseDir (the configuration file's directory). A repo lands in
// the working directory itself unless it names a path; a file mapping at
// its path. A repo given by URL is not packed: the plan refuses it.
func Sources(spec *api.RunSpec, baseDir string) ([]Source, error) {
	var out []Source
	local := func(p string) string {
		if p == "~" || len(p) > 1 && p[:2] == "~/" {
			if home, err := os.UserHomeDir(); err == nil {
				return filepath.Join(home, p[1:])
			}
		}
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(baseDir, p)
	}
	for i, r := range spec.Repos {
		if r.URL != "" {
			return nil, fmt.Errorf("repos[%d]: %s: a repo URL is cloned by commands, not uploaded", i, r.URL)
		}
		out = append(out, Source{Local: local(r.LocalPath), Dest: r.Path})
	}
	for _, f := range spec.Files {
		out = append(out, Source{Local: local(f.LocalPath), Dest: f.Path})
	}
	return out, nil
}

// MaxPackBytes is the most the client packs when the caller sets no limit:
// the server's own limit (DefaultMaxBytes unless its admin raised it) is
// then checked from the declared size, before the body is sent.
const MaxPackBytes = 4 << 30

// Send packs the run's repos and files into a temporary file, refusing
// past maxBytes (0: MaxPackBytes) before anything is sent, uploads it
// to the project and returns its SHA-256 for ApplyRunRequest.Upload; ""
// when the run sets neither. Progress lines go to progress (nil: none)
// for archives over a MiB.
func Send(ctx context.Context, cl *api.Client, project string, spec *api.RunSpec, baseDir string, maxBytes int64, progress io.Writer) (string, error) {
	if len(spec.Repos) == 0 && len(spec.Files) == 0 {
		return "", nil
	}
	if maxBytes <= 0 {
		maxBytes = MaxPackBytes
	}
	sources, err := Sources(spec, baseDir)
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp("", "gpud-upload-*.tar.gz")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	a, err := Pack(tmp, sources, Options{MaxBytes: maxBytes, Warn: progress})
	if err != nil {
		return "", err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	var body io.Reader = tmp
	if progress != nil && a.Size > 1<<20 {
		body = &progressReader{r: tmp, total: a.Size, w: progress, redraw: isTerminal(progress)}
		fmt.Fprintf(progress, "uploading repos and files: %s (%d entries)\n", FormatBytes(a.Size), a.Files)
	}
	if _, err := cl.Upload(ctx, project, a.SHA256, a.Size, body); err != nil {
		return "", fmt.Errorf("upload repos and files: %w", err)
	}
	if pr, ok := body.(*progressReader); ok {
		pr.line(true)
	}
	return a.SHA256, nil
}

// progressReader prints how much of an upload was read: on a terminal
// redrawn in place at most every half second, and at the end (the only
// line a file or pipe gets).
type progressReader struct {
	r      io.Reader
	w      io.Writer
	n      int64
	total  int64
	last   time.Time
	redraw bool
}

// isTerminal reports whether w is a terminal a line can be redrawn on.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.redraw && time.Since(p.last) > 500*time.Millisecond {
		p.line(false)
	}
	return n, err
}

func (p *progressReader) line(done bool) {
	p.last = time.Now()
	end := "\r"
	if done {
		end = "\n"
	}
	fmt.Fprintf(p.w, "uploading: %s / %s (%d%%)%s", FormatBytes(p.n), FormatBytes(p.total), p.n*100/max(p.total, 1), end)
}
