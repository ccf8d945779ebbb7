package slurm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// gangName is the gang's Slurm job name and the name of its output
// directory: "gpud-" and the gang id where it is short and plain, its
// hash otherwise.
func gangName(gang string) string {
	if len(gang) <= 48 && plainID.MatchString(gang) {
		return "gpud-" + gang
	}
	sum := sha256.Sum256([]byte(gang))
	return "gpud-" + hex.EncodeToString(sum[:8])
}

var plainID = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// commentPrefix starts the comment of every job the backend submits; the
// rest is "SERVER GANG JOB0,JOB1,...": List and Status find a gang's
// Slurm job by it.
const commentPrefix = "gpud-gang "

func gangComment(server string, g plugins.Gang) string {
	ids := make([]string, len(g.Jobs))
	for i, j := range g.Jobs {
		ids[i] = j.ID
	}
	return commentPrefix + server + " " + g.ID + " " + strings.Join(ids, ",")
}

// parseComment reads a job's comment back: ok only for this backend's.
func parseComment(c string) (server, gang string, jobs []string, ok bool) {
	rest, found := strings.CutPrefix(c, commentPrefix)
	if !found {
		return "", "", nil, false
	}
	f := strings.Fields(rest)
	if len(f) != 3 {
		return "", "", nil, false
	}
	return f[0], f[1], strings.Split(f[2], ","), true
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// jobGPUs is how many whole GPUs a job asks for on its node.
func jobGPUs(spec api.JobSpec) int {
	if n := len(spec.GPUs.Devices); n > 0 {
		return n
	}
	return max(0, spec.Cluster.GPUsPerNode)
}

// checkJob refuses, naming the field, what a Slurm batch job cannot do.
func (b *Backend) checkJob(spec api.JobSpec) error {
	where := "slurm backend: job " + spec.ID
	switch {
	case spec.ID == "":
		return fmt.Errorf("slurm backend: a job of the gang has no id")
	case spec.Image != "":
		return fmt.Errorf("%s: image %s: a Slurm job runs its commands on the nodes, without a container", where, spec.Image)
	case spec.Privileged:
		return fmt.Errorf("%s: privileged: a Slurm job has no container to make privileged", where)
	case spec.ShmSize > 0:
		return fmt.Errorf("%s: shm_size: a Slurm job has no container of its own /dev/shm", where)
	case len(spec.Ports) > 0:
		return fmt.Errorf("%s: ports: the Slurm backend publishes no ports", where)
	case len(spec.Volumes) > 0:
		return fmt.Errorf("%s: volumes: the Slurm backend mounts no volumes (reach the cluster's shared file systems by path)", where)
	case spec.GPUs.Share > 0 && spec.GPUs.Share < 1:
		return fmt.Errorf("%s: a fraction of a GPU (%.2f): Slurm's gres/gpu gives whole GPUs", where, spec.GPUs.Share)
	case spec.User != "" && spec.User != b.cfg.User:
		return fmt.Errorf("%s: user %q: a Slurm job runs as the backend's user %s (the token's)", where, spec.User, b.cfg.User)
	case len(spec.Commands) == 0 && len(spec.Entrypoint) == 0:
		return fmt.Errorf("%s: commands: required on Slurm (a batch job has no image entrypoint to run)", where)
	case spec.Upload != "" || len(spec.Repos) > 0:
		return fmt.Errorf("%s: files and repos: the Slurm backend has no upload into the job's directory", where)
	}
	for k := range spec.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("%s: env %q: not a shell variable name", where, k)
		}
	}
	return nil
}

// taskScript is what each srun task runs (sh -c): the DSTACK_* cluster
// environment from the allocation, then its job's environment and
// commands chosen by $SLURM_NODEID, its exit code written next to its
// output.
func taskScript(g plugins.Gang, dir string, gpus int) string {
	var s strings.Builder
	s.WriteString("unset GPUD_SLURM_TASK\n")
	s.WriteString("rank=${SLURM_NODEID:-0}\n")
	// The allocation's hosts, as addresses where they resolve.
	s.WriteString(`hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null) || hosts=""
[ -n "$hosts" ] || hosts=$(printf '%s' "${SLURM_JOB_NODELIST:-$(hostname)}" | tr ',' ' ')
ips=""
for h in $hosts; do
  ip=$(getent ahostsv4 "$h" 2>/dev/null | awk 'NR==1{print $1}')
  ips="$ips${ips:+
}${ip:-$h}"
done
master=$(printf '%s\n' "$ips" | head -n 1)
n=${SLURM_JOB_NUM_NODES:-1}
`)
	fmt.Fprintf(&s, "gpus=%d\n", gpus)
	for _, p := range []string{"DSTACK_", "GPUD_"} {
		fmt.Fprintf(&s, "export %[1]sNODE_RANK=\"$rank\" %[1]sNODES_NUM=\"$n\" %[1]sMASTER_NODE_IP=\"$master\" %[1]sNODES_IPS=\"$ips\" %[1]sGPUS_PER_NODE=\"$gpus\" %[1]sGPUS_NUM=$((gpus * n))\n", p)
	}
	s.WriteString("case \"$rank\" in\n")
	for rank, j := range g.Jobs {
		fmt.Fprintf(&s, "%d)\n", rank)
		fmt.Fprintf(&s, "  export DSTACK_RUN_NAME=%s GPUD_RUN_NAME=%s\n", shQuote(j.RunName), shQuote(j.RunName))
		for _, k := range slices.Sorted(mapsKeys(j.Env)) {
			if clusterVar(k) {
				continue // the allocation's, above
			}
			fmt.Fprintf(&s, "  export %s=%s\n", k, shQuote(j.Env[k]))
		}
		if j.WorkingDir != "" {
			fmt.Fprintf(&s, "  cd %s || { code=$?; echo \"gpud: working_dir %s: cannot enter\" >&2; echo $code >%s; exit $code; }\n",
				shQuote(j.WorkingDir), strings.ReplaceAll(j.WorkingDir, "\"", ""), shQuote(dir+"/rank-"+strconv.Itoa(rank)+".exit"))
		}
		fmt.Fprintf(&s, "  set -- %s\n  ;;\n", commandWords(j))
	}
	s.WriteString("*) echo \"gpud: no job for node $rank\" >&2; exit 1 ;;\nesac\n")
	fmt.Fprintf(&s, "\"$@\"\ncode=$?\necho \"$code\" >%s/rank-\"$rank\".exit.tmp && mv %s/rank-\"$rank\".exit.tmp %s/rank-\"$rank\".exit\nexit \"$code\"\n",
		shQuote(dir), shQuote(dir), shQuote(dir))
	return s.String()
}

// clusterVar: the variables the task computes from the allocation.
func clusterVar(k string) bool {
	for _, p := range []string{"DSTACK_", "GPUD_"} {
		switch strings.TrimPrefix(k, p) {
		case "NODE_RANK", "NODES_NUM", "MASTER_NODE_IP", "NODES_IPS", "GPUS_PER_NODE", "GPUS_NUM":
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}

// commandWords is the job's command as quoted words: the entrypoint
// with the commands as its arguments, or its shell running the commands
// joined by " && " (as the agent's process runtime does).
func commandWords(j api.JobSpec) string {
	var words []string
	if len(j.Entrypoint) > 0 {
		words = append(append(words, j.Entrypoint...), j.Commands...)
	} else {
		shell := j.Shell
		if shell == "" {
			shell = "/bin/sh"
		}
		words = []string{shell, "-c", strings.Join(j.Commands, " && ")}
	}
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shQuote(w)
	}
	return strings.Join(q, " ")
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// batchScript is the gang's batch script: one srun step with a task per
// node, each task's output merged (stdout and stderr) into
// DIR/rank-<node>.out.
func batchScript(g plugins.Gang, dir string, gpus int) string {
	n := len(g.Jobs)
	ids := make([]string, n)
	for i, j := range g.Jobs {
		ids[i] = shQuote(j.ID)
	}
	return fmt.Sprintf(`#!/bin/sh
# gpud gang %s: %d job(s), one srun task per node.
umask 022
mkdir -p %s || exit 1
printf '%%s\n' %s >%s/jobs
date +%%s >%s/started
export GPUD_SLURM_TASK=%s
srun --nodes=%d --ntasks=%d --ntasks-per-node=1 --output=%s/rank-%%n.out /bin/sh -c "$GPUD_SLURM_TASK"
`, g.ID, n, shQuote(dir), strings.Join(ids, " "), shQuote(dir), shQuote(dir), shQuote(taskScript(g, dir, gpus)), n, n, shQuote(dir))
}

// jobDesc is slurmrestd's job description (the fields the backend sets).
type jobDesc struct {
	Name          string            `json:"name"`
	Comment       string            `json:"comment"`
	Partition     string            `json:"partition,omitempty"`
	Account       string            `json:"account,omitempty"`
	QOS           string            `json:"qos,omitempty"`
	Environment   map[string]string `json:"environment"`
	Cwd           string            `json:"current_working_directory"`
	StdOut        string            `json:"standard_output"`
	StdErr        string            `json:"standard_error"`
	Nodes         []int             `json:"nodes"`
	Tasks         int               `json:"tasks"`
	TasksPerNode  int               `json:"tasks_per_node"`
	Gres          string            `json:"gres,omitempty"`
	CPUsPerTask   int               `json:"cpus_per_task,omitempty"`
	MemoryPerNode int64             `json:"memory_per_node,omitempty"`
	TimeLimit     int               `json:"time_limit,omitempty"`
	Requeue       bool              `json:"requeue"`
}

// submission builds the gang's job description and script.
func (b *Backend) submission(g plugins.Gang, partitions []string) (jobDesc, string, error) {
	if len(g.Jobs) == 0 {
		return jobDesc{}, "", fmt.Errorf("slurm backend: gang %s has no jobs", g.ID)
	}
	if g.Service {
		return jobDesc{}, "", fmt.Errorf("slurm backend: gang %s is a service: the Slurm backend publishes no services", g.ID)
	}
	gpus, cpus, mem := 0, 0.0, api.Size(0)
	for _, j := range g.Jobs {
		if err := b.checkJob(j); err != nil {
			return jobDesc{}, "", err
		}
		gpus, cpus, mem = max(gpus, jobGPUs(j)), max(cpus, j.CPUs), max(mem, j.Memory)
	}
	name := gangName(g.ID)
	dir := b.cfg.OutputDir + "/" + name
	n := len(g.Jobs)
	d := jobDesc{
		Name: name, Comment: gangComment(b.cfg.ServerID, g),
		Partition: strings.Join(partitions, ","), Account: b.cfg.Account, QOS: b.cfg.QOS,
		// The tasks' own environments are set by the script; this is the
		// batch script's.
		Environment: map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GPUD_GANG": g.ID},
		Cwd:         b.cfg.OutputDir, StdOut: dir + ".out", StdErr: dir + ".out",
		Nodes: []int{n, n}, Tasks: n, TasksPerNode: 1,
		TimeLimit: b.cfg.TimeLimitMinutes,
		// gpud retries a run itself (retry:); Slurm must not run it again.
		Requeue: false,
	}
	if gpus > 0 {
		d.Gres = "gpu:" + strconv.Itoa(gpus)
	}
	if cpus > 0 {
		d.CPUsPerTask = int(math.Ceil(cpus))
	}
	if mem > 0 {
		d.MemoryPerNode = int64((mem + api.MB - 1) / api.MB)
	}
	return d, batchScript(g, dir, gpus), nil
}
