package daemon

import (
	"errors"
	"strings"

	"gpud.dev/gpud/api"
)

// This file turns the fields that say what a job runs in (image, python,
// nvcc, docker, entrypoint) into its JobSpec, as a dstack server does.
// Their rules are in fields_rules_container.go.

// Images of runs without an image that ask for something of it, modelled
// on dstack's: its Python images (dstack before 0.19 picked one per
// Python version, with a -devel variant that has the CUDA compiler), the
// devel variant of DefaultImage and its Docker-in-Docker image.
const (
	DefaultPythonImage = "dstackai/base:py{python}-0.4-cuda-12.1{devel}"
	DefaultNvccImage   = "dstackai/base:0.10-devel-ubuntu22.04"
	DefaultDindImage   = "dstackai/dind"
)

// The placeholders of Options.PythonImage: the run's Python version, and
// "-devel" for a run with nvcc: true ("" without).
const (
	pythonPlaceholder = "{python}"
	develPlaceholder  = "{devel}"
)

// startDockerd is what dstack runs first in its Docker-in-Docker image:
// it starts the job's own Docker engine.
const startDockerd = "start-dockerd"

// setImageDefaults fills the image settings a server was given none of.
func setImageDefaults(o *Options) {
	if o.PythonImage == "" {
		o.PythonImage = DefaultPythonImage
	}
	if o.NvccImage == "" {
		o.NvccImage = DefaultNvccImage
	}
	if o.DindImage == "" {
		o.DindImage = DefaultDindImage
	}
}

// runImage is the image the server chooses for a job of run whose own
// image (the run's or its group's) is image: that one when set; with
// docker: true the Docker-in-Docker image; on a server (not the embedded
// mode, whose image-less jobs are host processes) the Python image for
// the run's version (its devel variant with nvcc), or the nvcc image;
// else "", which dispatch turns into the default image. ok is false when
// the Python image has no place for the version or the devel variant
// (the plan refuses those: checkPython, checkNvcc).
func runImage(o *Options, run *api.RunSpec, image string) (string, bool) {
	switch {
	case image != "":
		return image, true
	case run.Docker:
		return o.DindImage, true
	case o.Embedded:
		return "", true
	case run.Python != "":
		return pythonImage(o.PythonImage, run.Python, run.Nvcc)
	case run.Nvcc:
		return o.NvccImage, true
	}
	return "", true
}

// pythonImage fills template with version and the devel suffix; ok is
// false when it lacks {python}, or {devel} for nvcc.
func pythonImage(template, version string, nvcc bool) (string, bool) {
	if !strings.Contains(template, pythonPlaceholder) || nvcc && !strings.Contains(template, develPlaceholder) {
		return "", false
	}
	devel := ""
	if nvcc {
		devel = "-devel"
	}
	return strings.NewReplacer(pythonPlaceholder, version, develPlaceholder, devel).Replace(template), true
}

// applyContainerFields sets what the run says about the job's container
// on js: its image (runImage), Python version, entrypoint and, for
// docker: true, privileges and the start of the job's Docker engine.
func (s *runsAPI) applyContainerFields(js *api.JobSpec, run *api.RunSpec, image string) error {
	img, ok := runImage(&s.opts, run, image)
	if !ok {
		return badField("configuration.python", "the server's --python-image %q has no place for python %q (nvcc: %v)", s.opts.PythonImage, run.Python, run.Nvcc)
	}
	js.Image, js.Python = img, run.Python
	if run.Entrypoint != "" {
		argv, err := splitCommandLine(run.Entrypoint)
		if err != nil {
			return badField("configuration.entrypoint", "%v", err)
		}
		js.Entrypoint = argv
	}
	if run.Docker && image == "" {
		js.Privileged = true // dstack's too: the job's engine needs it
	}
	return nil
}

// dindCommands are a job's commands in dstack's Docker-in-Docker image:
// its engine starts first (start-dockerd), unless an entrypoint takes the
// commands as its arguments.
func dindCommands(run *api.RunSpec, image string, commands []string) []string {
	if !run.Docker || image != "" || run.Entrypoint != "" || len(commands) == 0 {
		return commands
	}
	return append([]string{startDockerd}, commands...)
}

// splitCommandLine splits s into words as a POSIX shell does (dstack
// uses Python's shlex.split): blanks separate words, single quotes keep
// everything, double quotes keep all but \" \\ \$ \`, a backslash
// outside quotes escapes the next character. No expansion happens.
func splitCommandLine(s string) ([]string, error) {
	var out []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated single quote")
			}
			word.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				word.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated double quote")
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("a backslash ends the line")
			}
			i++
			word.WriteByte(s[i])
			inWord = true
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, word.String())
	}
	if len(out) == 0 {
		return nil, errors.New("no program to run")
	}
	return out, nil
}
