// Package slurm is the Slurm backend (issue 18): a job backend that runs
// each of gpud's gangs as one Slurm batch job, submitted through
// slurmrestd's REST API (JWT authentication, the X-SLURM-USER-NAME and
// X-SLURM-USER-TOKEN headers) with net/http and small structs of its own
// for the endpoints it uses (ping, nodes, partitions, jobs, job submit,
// job cancel): no generated client.
//
// A gang of N jobs is one batch job with --nodes=N and --gres=gpu:G per
// node, whose script runs one srun step with a task per node; each task
// takes its job's environment and commands by $SLURM_NODEID and the
// DSTACK_* cluster environment from the allocation (SLURM_JOB_NODELIST,
// SLURM_NODEID, SLURM_JOB_NUM_NODES). Output goes to files in a directory
// the plugin reads (shared with the nodes), which stream into the job's
// logs; each task writes its exit code next to its output. Slurm's job
// states map to gpud's job states, a pending job's reason included.
// Offers are the nodes of the configured partitions with their GRES.
//
// It implements plugins.Backend and must not import daemon, store or sched.
package slurm
