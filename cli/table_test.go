package cli

import (
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

func TestTableCellsStayShortAndReadable(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"bytes in MB", humanSize(64 * api.MB), "64MB"},
		{"host memory keeps 4 digits", humanSize(api.Size(25275973632)), "23.54GB"},
		{"disk in GB", humanSize(api.Size(270553174016)), "252GB"},
		{"terabytes", humanSize(2 * api.TB), "2TB"},
		{"zero", humanSize(0), "0"},
		{"queue amounts with no limit", amounts(api.QueueAmounts{GPU: 2, CPU: -1, Memory: float64(32 * api.GB)}), "2/∞/32GB"},
		{"waiting status carries the reason", statusText("pending", "", "no node has 2 GPUs free"), "pending — no node has 2 GPUs free"},
		{"ended status carries why", statusText("failed", "job 0 exited with code 1", ""), "failed (job 0 exited with code 1)"},
		{"running shows no stale reason", statusText("running", "running on local-vm", ""), "running"},
		{"fractional GPU job", jobResources(api.JobRequest{GPU: 0.5, GPUName: "H100", CPU: 4, Memory: 16 * api.GB}), "0.5×H100 4cpu 16GB"},
		{"unnamed GPU job", jobResources(api.JobRequest{GPU: 1, CPU: 2}), "1×GPU 2cpu"},
		{"GPU memory range", jobResources(api.JobRequest{GPU: 1, GPUMemory: 16 * api.GB, GPUMemoryMax: 24 * api.GB}), "1×GPU:16GB..24GB"},
		{"GPU names", jobResources(api.JobRequest{GPU: 2, GPUName: "H100,A100", GPUMemory: 40 * api.GB}), "2×H100|A100:40GB"},
		{"host with GPUs", instanceResources(api.InstanceResources{GPUs: 8, GPUName: "H100", GPUMemory: 80 * api.GB, CPUs: 224, Memory: 2 * api.TB}), "8×H100:80GB 224cpu 2TB"},
		{"seconds ago", ago(time.Unix(100, 0), time.Unix(58, 0)), "42s ago"},
		{"never", ago(time.Now(), time.Time{}), "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}
