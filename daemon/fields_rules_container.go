package daemon

import (
	"slices"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// containerRules are the fields that say what the job runs in and as
// whom: its image, Python, user, working directory, entrypoint, shared
// memory and privileges. container_image.go applies them to the JobSpec.
var containerRules = fieldRules{
	"image": {Proof: []string{"daemon.TestImageRunsSeeTheirImagesFiles"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime runs no images", Instead: "run on a host with Docker, or drop image"},
			targetBackend: {Why: "a job backend that runs commands on its nodes without a container (Slurm) runs no images", Instead: "run on a host with Docker or a backend that runs images (Kubernetes), or drop image", Unless: plugins.FeatureImage}}},
	"registry_auth": {Subtree: true, Proof: []string{"daemon.TestRegistryAuthReachesThePullAndNoFileOrLog"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime pulls no images", Instead: "run on a host with Docker, or drop registry_auth"},
			targetBackend: {Why: "a job backend without containers (Slurm) pulls no images", Instead: "run on a host with Docker or a backend that runs images, or drop registry_auth", Unless: plugins.FeatureImage}}},
	"python": {Proof: []string{"daemon.TestPythonPicksTheServersImageForThatVersion", "daemon.TestPythonOnTheProcessRuntimeIsTheHostsInterpreter"},
		Check:  checkPython,
		Refuse: map[fieldTarget]refusal{targetBackend: {Why: "python picks the server's image for that version, and a job backend without containers (Slurm) runs no images", Instead: "run on a host or a backend that runs images, or drop python and use the nodes' own interpreter", Unless: plugins.FeatureImage}}},
	"nvcc": {Proof: []string{"daemon.TestNvccPicksTheServersDevelImage"}, Check: checkNvcc,
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime has no image with the CUDA compiler", Instead: "run on a host with Docker, or install nvcc on the host and drop nvcc"},
			targetBackend: {Why: "nvcc picks the server's devel image, and a job backend without containers (Slurm) runs no images", Instead: "run on a host with Docker or a backend that runs images, or drop nvcc", Unless: plugins.FeatureImage}}},
	"docker": {Proof: []string{"daemon.TestDockerInDockerRunsPrivilegedInTheServersDindImage"}, Check: checkDocker,
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "Docker-in-Docker needs a privileged container", Instead: "run on a host with Docker whose admin allows privileged jobs"},
			targetBackend: {Why: "Docker-in-Docker needs a privileged container, and gpud does not make a job backend's workloads privileged", Instead: "run on a host with Docker whose admin allows privileged jobs"}}},
	"dstack": {All: &refusal{Why: "the gpud CLI is not mounted into jobs", Instead: "drop dstack"}},
	"privileged": {Proof: []string{"daemon.TestPrivilegedRunsOnlyWhereTheHostsAdminAllowsIt", "daemon.TestRegisteredHostsRunPrivilegedJobsOnlyWithAllowPrivileged", "daemon.TestKubernetesBackendHonoursShmSizeAndPrivilegedWhereAdvertised"}, Check: checkPrivileged,
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "a process job cannot be privileged", Instead: "run on a host with Docker whose admin allows privileged jobs"},
			targetBackend: {Why: "a job backend runs privileged workloads only where it advertises privileged (Kubernetes: allow_privileged: true in the backend's configuration)", Instead: "run on a host with Docker whose admin allows privileged jobs, or on a backend that allows them", Unless: plugins.FeaturePrivileged}}},
	"user": {Proof: []string{"daemon.TestDockerJobsRunAsTheirUserInTheirWorkingDirWithTheirShm"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime runs every job as the user its admin chose", Instead: "run on a host with Docker, or drop user"}}},
	"entrypoint": {Proof: []string{"daemon.TestEntrypointTakesTheCommandsAsItsArguments"}, Check: checkEntrypoint,
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime runs commands in a shell, with no image entrypoint", Instead: "run on a host with Docker, or drop entrypoint and start the program from commands"}}},
	"dev-environment:entrypoint": {All: &refusal{Why: "a dev environment runs its IDE and init, not an entrypoint (as on dstack)", Instead: "drop entrypoint and use init"}},
	"working_dir": {Proof: []string{"daemon.TestDockerJobsRunAsTheirUserInTheirWorkingDirWithTheirShm", "daemon.TestProcessJobsWorkingDirIsMadeInsideTheirOwnDirectory"},
		Check: checkWorkingDir},
	"resources.shm_size": {Proof: []string{"daemon.TestDockerJobsRunAsTheirUserInTheirWorkingDirWithTheirShm", "daemon.TestKubernetesBackendHonoursShmSizeAndPrivilegedWhereAdvertised"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "processes share the host's /dev/shm", Instead: "run on a host with Docker, or drop shm_size"},
			targetBackend: {Why: "a job backend sizes /dev/shm only where it advertises shm_size (Kubernetes does: an emptyDir of medium Memory at /dev/shm)", Instead: "run on a host with Docker or a backend that sizes /dev/shm, or drop shm_size", Unless: plugins.FeatureShmSize}}},
}

// anyHost reports whether yes holds for a host the run may use (given
// the runtime its jobs would run in there), or whether there is no host
// yet: then nothing can be told at plan time, and the run waits for one.
func (fc *fieldCheck) anyHost(yes func(h candidateHost, rt fieldTarget) bool) bool {
	if len(fc.hosts) == 0 {
		return true
	}
	return slices.ContainsFunc(fc.hosts, func(h candidateHost) bool { return yes(h, runtimeOf(h.runtime, fc.image)) })
}

// checkPython refuses a Python version that no host the run may use can
// give it: a Docker host can on a server (its image is the server's
// Python image), a process-runtime host when its agent found python3.X
// on its PATH.
func checkPython(fc *fieldCheck, _ string) *refusal {
	v := fc.run.Python
	if fc.run.Docker {
		return &refusal{Why: "docker: true runs in the Docker-in-Docker image, which brings its own Python", Instead: "drop python"}
	}
	if groupImage(fc) {
		return &refusal{Why: "a group with an image of its own runs that image's Python", Instead: "drop python, or the groups' images"}
	}
	if !fc.srv.opts.Embedded && !strings.Contains(fc.srv.opts.PythonImage, pythonPlaceholder) {
		return &refusal{Why: "this server's Python image (" + fc.srv.opts.PythonImage + ") has one Python, not a choice of " + pythonPlaceholder,
			Instead: "drop python, or have the admin set --python-image with " + pythonPlaceholder}
	}
	if fc.anyHost(func(h candidateHost, rt fieldTarget) bool {
		if rt == targetDocker {
			return !fc.srv.opts.Embedded // the embedded mode picks no image for it
		}
		return slices.Contains(h.info.Pythons, v)
	}) {
		return nil
	}
	return &refusal{Why: "no host this run may use has python" + v + " on its agent's PATH, and none runs Docker",
		Instead: "install Python " + v + " on a host (its agent lists it at start), run on a host with Docker, or drop python"}
}

// checkNvcc refuses nvcc beside groups with images of their own, and
// with a Python version when the server's Python image has no devel
// variant ({devel}).
func checkNvcc(fc *fieldCheck, _ string) *refusal {
	if groupImage(fc) {
		return &refusal{Why: "a group with an image of its own runs that image, with or without nvcc", Instead: "drop nvcc, or the groups' images"}
	}
	if fc.srv.opts.Embedded || fc.run.Python == "" || strings.Contains(fc.srv.opts.PythonImage, develPlaceholder) {
		return nil
	}
	return &refusal{Why: "this server's Python image (" + fc.srv.opts.PythonImage + ") has no devel variant with the CUDA compiler (" + develPlaceholder + ")",
		Instead: "drop python to get the server's nvcc image, or have the admin set --python-image with " + develPlaceholder}
}

// checkDocker refuses docker: true beside groups with images of their
// own, which would not run in the Docker-in-Docker image, and where
// privileged jobs are not allowed (checkPrivileged).
func checkDocker(fc *fieldCheck, path string) *refusal {
	if groupImage(fc) {
		return &refusal{Why: "a group with an image of its own runs that image, not the Docker-in-Docker one", Instead: "drop docker, or the groups' images"}
	}
	return checkPrivileged(fc, path)
}

// checkPrivileged refuses privileged (and docker: true) when no host the
// run may use allows privileged jobs: their agents refuse them unless the
// host's admin started it with --allow-privileged.
func checkPrivileged(fc *fieldCheck, _ string) *refusal {
	if fc.backendSupports(plugins.FeaturePrivileged) || fc.anyHost(func(h candidateHost, rt fieldTarget) bool { return rt == targetDocker && h.info.AllowPrivileged }) {
		return nil
	}
	return &refusal{Why: "a privileged container is root on its host, and no Docker host this run may use allows privileged jobs",
		Instead: "run on a host whose admin started gpud agent --allow-privileged (gpud serve --allow-privileged for the server's own host), or drop it"}
}

// checkEntrypoint refuses an entrypoint that does not split into words.
func checkEntrypoint(fc *fieldCheck, _ string) *refusal {
	if _, err := splitCommandLine(fc.run.Entrypoint); err != nil {
		return &refusal{Why: "entrypoint does not split into words as a shell would: " + err.Error(), Instead: "close its quotes"}
	}
	return nil
}

// checkWorkingDir refuses an absolute working_dir when every host the run
// may use runs it as a process: a process job starts in a fresh directory
// of its own, and a relative working_dir is made inside it.
func checkWorkingDir(fc *fieldCheck, _ string) *refusal {
	if !strings.HasPrefix(fc.run.WorkingDir, "/") ||
		fc.anyHost(func(_ candidateHost, rt fieldTarget) bool { return rt == targetDocker }) {
		return nil
	}
	return &refusal{Why: "the process runtime starts each job in a fresh directory of its own, not at an absolute path",
		Instead: "give a relative working_dir (made inside the job's directory), or run on a host with Docker"}
}

// groupImage reports whether a task group or a service's replica group
// names its own image.
func groupImage(fc *fieldCheck) bool {
	if t := fc.cfg.Task; t != nil && slices.ContainsFunc(t.Groups, func(g api.TaskGroup) bool { return g.Image != "" }) {
		return true
	}
	s := fc.cfg.Service
	return s != nil && slices.ContainsFunc(s.Replicas.Groups, func(g api.ReplicaGroup) bool { return g.Image != "" })
}
