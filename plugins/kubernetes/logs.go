package kubernetes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
)

// maxLine is where a long line is cut into Partial pieces.
const maxLine = 64 << 10

// Logs implements plugins.Backend from the pod log API (with the
// kubelet's timestamps); Kubernetes merges a container's stdout and
// stderr, so every entry says stdout. With follow it waits for a pending
// pod to start and streams until the container ends or ctx does.
func (b *Backend) Logs(ctx context.Context, job string, follow bool, emit func(api.JobLogEntry) error) error {
	ns := b.cfg.Namespace
	var pod *corev1.Pod
	for {
		lctx, cancel := b.callCtx(ctx)
		pods, err := b.cs.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: labelJob + "=" + labelValue(job) + "," + labelServer + "=" + b.cfg.ServerID})
		cancel()
		if err != nil {
			return fmt.Errorf("kubernetes backend: logs of job %s: %w", job, err)
		}
		for i := range pods.Items {
			if pods.Items[i].Annotations[annJobID] == job {
				pod = &pods.Items[i]
			}
		}
		if pod == nil {
			return fmt.Errorf("kubernetes backend: logs of job %s: no pod", job)
		}
		if pod.Status.Phase != corev1.PodPending || !follow {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	rc, err := b.cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: containerName, Follow: follow, Timestamps: true}).Stream(ctx)
	if err != nil {
		return fmt.Errorf("kubernetes backend: logs of job %s (pod %s): %w", job, pod.Name, err)
	}
	defer rc.Close()
	return readLogs(rc, emit)
}

// readLogs turns "RFC3339Nano line" records into entries.
func readLogs(r io.Reader, emit func(api.JobLogEntry) error) error {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if e := emitLine(strings.TrimSuffix(line, "\n"), emit); e != nil {
				return e
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func emitLine(line string, emit func(api.JobLogEntry) error) error {
	ts := time.Now().UTC()
	if stamp, rest, ok := strings.Cut(line, " "); ok {
		if t, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
			ts, line = t, rest
		}
	}
	for len(line) > maxLine {
		if err := emit(api.JobLogEntry{Time: ts, Stream: api.LogStdout, Line: line[:maxLine], Partial: true}); err != nil {
			return err
		}
		line = line[maxLine:]
	}
	return emit(api.JobLogEntry{Time: ts, Stream: api.LogStdout, Line: line})
}
