package daemon

// containerRules are the fields that say what the job runs in and as
// whom: its image, Python, user, working directory, entrypoint, shared
// memory and privileges.
var containerRules = fieldRules{
	"image": {Proof: []string{"daemon.TestUserImagelessRunOnServeRunsInTheDefaultImageNotOnTheHost"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime runs no images", Instead: "run on a host with Docker, or drop image"}}},
	"registry_auth": {Subtree: true, Proof: []string{"daemon.TestUserImagelessRunOnServeRunsInTheDefaultImageNotOnTheHost"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "the process runtime pulls no images", Instead: "run on a host with Docker, or drop registry_auth"}}},
	"python": {All: &refusal{Why: "python does not choose an interpreter or image yet", Instead: "drop python, or set an image with that Python"}},
	"nvcc":   {All: &refusal{Why: "nvcc does not choose an image with the CUDA compiler yet", Instead: "set an image with nvcc, like nvcr.io/nvidia/pytorch"}},
	"docker": {All: &refusal{Why: "Docker-in-Docker runs are not supported yet", Instead: "drop docker"}},
	"dstack": {All: &refusal{Why: "the gpud CLI is not mounted into jobs", Instead: "drop dstack"}},
	"privileged": {Proof: []string{"daemon.TestPrivilegedRunsAreRefusedOnTheServersOwnHost"},
		Refuse: map[fieldTarget]refusal{targetProcess: {Why: "a process job cannot be privileged", Instead: "run on a host with Docker whose admin allows privileged jobs"}}},
	"user":               {All: &refusal{Why: "user is not applied yet", Instead: "drop user, or set USER in the image"}},
	"entrypoint":         {All: &refusal{Why: "entrypoint is not applied yet", Instead: "drop entrypoint and start the program from commands"}},
	"working_dir":        {All: &refusal{Why: "working_dir is not applied yet", Instead: "drop working_dir and `cd` in commands"}},
	"resources.shm_size": {All: &refusal{Why: "shm_size is not applied yet", Instead: "drop shm_size"}},
}
