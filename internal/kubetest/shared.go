package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Shared-cluster nodes: two KWOK nodes with 8 GPUs each.
var SharedNodes = []GPUNode{{Name: "kwok-gpu-0", GPUs: 8}, {Name: "kwok-gpu-1", GPUs: 8}}

// SharedLogLines are what every pod's log says (KWOK serves them through
// the pod log API).
var SharedLogLines = []string{"hello from kwok", "second line"}

var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
	missing bool
	logsDir string
}

// Need returns the package's shared cluster, starting it on first use
// (with SharedNodes). Without the binaries the test is skipped, naming
// what is missing, unless CI is set: then it fails. Call StopShared from
// TestMain.
func Need(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		bins, err := FindBinaries()
		if err != nil {
			shared.err, shared.missing = err, true
			return
		}
		dir, err := os.MkdirTemp("", "gpud-kubetest-logs-")
		if err != nil {
			shared.err = err
			return
		}
		shared.logsDir = dir
		logs, err := writeLogsFile(dir)
		if err != nil {
			shared.err = err
			return
		}
		c, err := Start(bins, Options{LogsFile: logs})
		if err != nil {
			shared.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, n := range SharedNodes {
			if err := c.AddGPUNode(ctx, n); err != nil {
				shared.err = fmt.Errorf("%w\n%s", err, c.Logs())
				c.Stop()
				return
			}
		}
		shared.cluster = c
	})
	if shared.missing && os.Getenv("CI") == "" {
		t.Skipf("no Kubernetes test cluster: %v", shared.err)
	}
	if shared.err != nil {
		t.Fatalf("Kubernetes test cluster: %v", shared.err)
	}
	return shared.cluster
}

// StopShared stops the shared cluster if one was started.
func StopShared() {
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
	if shared.logsDir != "" {
		_ = os.RemoveAll(shared.logsDir)
	}
}

// StartT starts a cluster of the test's own with nodes (SharedNodes when
// none are given), stopped when the test ends; the skip and fail rules
// are Need's.
func StartT(t testing.TB, nodes ...GPUNode) *Cluster {
	t.Helper()
	return StartWithT(t, Options{}, nodes...)
}

// StartWithT is StartT with options (a port-forward target); the pod
// logs file is always set.
func StartWithT(t testing.TB, opts Options, nodes ...GPUNode) *Cluster {
	t.Helper()
	bins, err := FindBinaries()
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no Kubernetes test cluster: %v", err)
		}
		t.Fatalf("Kubernetes test cluster: %v", err)
	}
	logs, err := writeLogsFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts.LogsFile = logs
	c, err := Start(bins, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if len(nodes) == 0 {
		nodes = SharedNodes
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range nodes {
		if err := c.AddGPUNode(ctx, n); err != nil {
			t.Fatalf("%v\n%s", err, c.Logs())
		}
	}
	return c
}

// writeLogsFile writes SharedLogLines as a CRI log file in dir.
func writeLogsFile(dir string) (string, error) {
	logs := filepath.Join(dir, "pod.log")
	var data []byte
	for _, l := range SharedLogLines {
		data = fmt.Appendf(data, "%s stdout F %s\n", time.Now().UTC().Format(time.RFC3339Nano), l)
	}
	return logs, os.WriteFile(logs, data, 0o644)
}
