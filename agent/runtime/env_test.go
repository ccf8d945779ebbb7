package runtime

import (
	"slices"
	"testing"

	"gpud.dev/gpud/api"
)

func TestEnvironment(t *testing.T) {
	tests := []struct {
		name string
		spec api.JobSpec
		want []string
		not  []string
	}{
		{"a single node defaults to rank 0 of 1 on loopback with its devices",
			api.JobSpec{RunName: "r", GPUs: api.JobGPUs{Devices: []string{"0", "1", "2"}}},
			[]string{"DSTACK_NODE_RANK=0", "DSTACK_NODES_NUM=1", "DSTACK_MASTER_NODE_IP=127.0.0.1", "GPUD_GPUS_PER_NODE=3", "DSTACK_GPUS_NUM=3", "CUDA_VISIBLE_DEVICES=0,1,2"},
			[]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"}},
		{"a job without GPUs sees none",
			api.JobSpec{RunName: "r"},
			[]string{"NVIDIA_VISIBLE_DEVICES=void", "DSTACK_GPUS_NUM=0"},
			[]string{"CUDA_VISIBLE_DEVICES="}},
		{"a gang spreads GPUS_NUM over its nodes",
			api.JobSpec{Cluster: api.JobCluster{NodeRank: 2, NodesNum: 4, NodesIPs: []string{"a", "b", "c", "d"}, GPUsPerNode: 8}},
			[]string{"DSTACK_NODE_RANK=2", "DSTACK_GPUS_NUM=32", "DSTACK_MASTER_NODE_IP=a", "DSTACK_NODES_IPS=a\nb\nc\nd"}, nil},
		{"fractional shares and MPS memory limits go through MPS variables",
			api.JobSpec{GPUs: api.JobGPUs{Devices: []string{"GPU-x", "GPU-y"}, Share: 0.25, MemoryLimit: 20 * api.GB, MPSPipeDir: "/tmp/mps"}},
			[]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M,1=20480M", "CUDA_MPS_PIPE_DIRECTORY=/tmp/mps", "NVIDIA_VISIBLE_DEVICES=GPU-x,GPU-y"}, nil},
		{"variables set in the spec win over computed ones",
			api.JobSpec{RunName: "r", Env: map[string]string{"DSTACK_RUN_NAME": "mine", "NVIDIA_VISIBLE_DEVICES": "all"}},
			[]string{"DSTACK_RUN_NAME=mine", "GPUD_RUN_NAME=r", "NVIDIA_VISIBLE_DEVICES=all"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := Environment(tt.spec, "/gpud/mpi_hostfile")
			if !slices.IsSorted(env) {
				t.Errorf("environment not sorted: %q", env)
			}
			for _, w := range tt.want {
				if !slices.Contains(env, w) {
					t.Errorf("lacks %q in %q", w, env)
				}
			}
			for _, n := range tt.not {
				if slices.ContainsFunc(env, func(s string) bool { return len(s) >= len(n) && s[:len(n)] == n }) {
					t.Errorf("has %q in %q", n, env)
				}
			}
		})
	}
}

func TestShellCommandJoinsCommandsWithAnd(t *testing.T) {
	got := ShellCommand(api.JobSpec{Commands: []string{"a", "b c"}, Shell: "/bin/bash"})
	if want := []string{"/bin/bash", "-c", "a && b c"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if ShellCommand(api.JobSpec{}) != nil {
		t.Fatal("no commands must keep the image's entrypoint")
	}
}
