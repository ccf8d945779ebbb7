package sshfleet

import (
	"reflect"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

func hostWithGPUs(n, cpus int, mem api.Size) api.HostInfo {
	h := api.HostInfo{CPUs: cpus, Memory: mem}
	for i := range n {
		h.Accelerators.Devices = append(h.Accelerators.Devices, api.Accelerator{Index: i, Name: "H100"})
	}
	return h
}

// TestSplitBlocksDividesGPUsCPUsAndMemory is the `blocks` table: equal
// shares of consecutive GPUs, CPUs and memory, or an error with the fix.
func TestSplitBlocksDividesGPUsCPUsAndMemory(t *testing.T) {
	const gib = api.Size(1 << 30)
	tests := []struct {
		name    string
		host    api.HostInfo
		blocks  api.Blocks
		want    []Block
		wantErr string
	}{
		{"unset keeps the whole host", hostWithGPUs(8, 64, 512*gib), api.Blocks{},
			[]Block{{0, []int{0, 1, 2, 3, 4, 5, 6, 7}, 64, 512 * gib}}, ""},
		{"two blocks of four neighbouring GPUs", hostWithGPUs(8, 64, 512*gib), api.Blocks{N: 2},
			[]Block{{0, []int{0, 1, 2, 3}, 32, 256 * gib}, {1, []int{4, 5, 6, 7}, 32, 256 * gib}}, ""},
		{"auto makes one block per GPU", hostWithGPUs(2, 10, 10*gib), api.Blocks{Auto: true},
			[]Block{{0, []int{0}, 5, 5 * gib}, {1, []int{1}, 5, 5 * gib}}, ""},
		{"auto on a CPU-only host is one block", hostWithGPUs(0, 4, 8*gib), api.Blocks{Auto: true},
			[]Block{{0, []int{}, 4, 8 * gib}}, ""},
		{"CPU remainder stays unassigned", hostWithGPUs(2, 7, 8*gib), api.Blocks{N: 2},
			[]Block{{0, []int{0}, 3, 4 * gib}, {1, []int{1}, 3, 4 * gib}}, ""},
		{"a count that does not divide the GPUs is refused", hostWithGPUs(8, 64, 512*gib), api.Blocks{N: 3}, nil,
			"3 does not divide the host's 8 GPUs"},
		{"more blocks than CPUs is refused", hostWithGPUs(0, 2, 8*gib), api.Blocks{N: 4}, nil,
			"need at least 4 CPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SplitBlocks(tt.host, tt.blocks)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

// TestTargetsInheritTheFleetsSSHConfig resolves per-host settings.
func TestTargetsInheritTheFleetsSSHConfig(t *testing.T) {
	cfg := &api.SSHConfig{User: "ubuntu", Port: 2222, IdentityFile: "~/.ssh/fleet",
		ProxyJump: &api.SSHProxyJump{Hostname: "bastion", Port: 22},
		Hosts: []api.SSHHost{
			{Hostname: "a"},
			{Hostname: "b", User: "root", Port: 22, IdentityFile: "/keys/b", ProxyJump: &api.SSHProxyJump{Hostname: "jb", User: "jump"}},
		}}
	got := Targets(cfg)
	want := []Target{
		{Name: "a", Hostname: "a", Port: 2222, User: "ubuntu", IdentityFile: "~/.ssh/fleet",
			ProxyJump: &Jump{Hostname: "bastion", Port: 22, User: "ubuntu", IdentityFile: "~/.ssh/fleet"}},
		{Name: "b", Hostname: "b", Port: 22, User: "root", IdentityFile: "/keys/b",
			ProxyJump: &Jump{Hostname: "jb", User: "jump", IdentityFile: "/keys/b"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got[0].Addr() != "a:2222" {
		t.Errorf("Addr %q", got[0].Addr())
	}
}
