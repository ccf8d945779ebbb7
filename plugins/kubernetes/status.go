package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
)

// Status implements plugins.Backend: one JobStatus per job of the gang,
// from its pod's phase and container state; a job whose pod is gone
// while the gang's ConfigMap remains (evicted, deleted by hand) is
// failed with reason lost. A gang the backend does not know has none.
func (b *Backend) Status(ctx context.Context, gang string) ([]api.JobStatus, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	ns := b.cfg.Namespace
	pods, err := b.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: b.gangSelector(gang)})
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: status of gang %s: %w", gang, err)
	}
	byJob := map[string]api.JobStatus{}
	for i := range pods.Items {
		st := podStatus(&pods.Items[i])
		byJob[st.ID] = st
	}
	root, err := b.cs.CoreV1().ConfigMaps(ns).Get(ctx, gangBase(gang), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kubernetes backend: status of gang %s: %w", gang, err)
	}
	var out []api.JobStatus
	if err == nil && root.Annotations[annGangID] == gang {
		for _, id := range strings.Split(root.Data["jobs"], "\n") {
			if id == "" {
				continue
			}
			st, ok := byJob[id]
			if !ok {
				st = api.JobStatus{ID: id, Runtime: RuntimeName, State: api.JobFailed, Reason: api.ExitLost,
					ExitCode: -1, Message: "its pod is gone (deleted or evicted)", CreatedAt: root.CreationTimestamp.Time}
			}
			delete(byJob, id)
			out = append(out, st)
		}
	}
	for _, st := range byJob {
		out = append(out, st)
	}
	slices.SortStableFunc(out, func(a, b api.JobStatus) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// podStatus maps a pod to the agent's job states.
func podStatus(p *corev1.Pod) api.JobStatus {
	st := api.JobStatus{
		ID:        p.Annotations[annJobID],
		Runtime:   RuntimeName,
		Handle:    "pod:" + p.Namespace + "/" + p.Name,
		CreatedAt: p.CreationTimestamp.Time,
	}
	if st.ID == "" {
		st.ID = p.Labels[labelJob]
	}
	var cs *corev1.ContainerStatus
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == containerName {
			cs = &p.Status.ContainerStatuses[i]
		}
	}
	if cs != nil {
		if r := cs.State.Running; r != nil {
			st.StartedAt = r.StartedAt.Time
		}
		if t := cs.State.Terminated; t != nil {
			st.StartedAt, st.FinishedAt = t.StartedAt.Time, t.FinishedAt.Time
			st.ExitCode = int(t.ExitCode)
			st.Message = t.Message
			st.Reason = api.ExitExited
			if t.Reason == "OOMKilled" {
				st.Reason = api.ExitOOMKilled
			}
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		st.State = api.JobDone
		if st.Reason == "" {
			st.Reason = api.ExitExited
		}
	case corev1.PodFailed:
		st.State = api.JobFailed
		if st.Reason == "" {
			// Failed with no container that ran: evicted, or never
			// started (the pod's reason says which).
			st.Reason, st.ExitCode = api.ExitStartFailed, -1
			st.Message = strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message)
		}
	case corev1.PodRunning:
		st.State = api.JobRunning
	default: // Pending, Unknown
		st.State = api.JobPulling
		st.Message = pendingMessage(p, cs)
		if cs != nil && cs.State.Waiting != nil && startFailed(cs.State.Waiting.Reason) {
			st.State, st.Reason, st.ExitCode = api.JobFailed, api.ExitStartFailed, -1
		}
	}
	if p.DeletionTimestamp != nil && !st.State.Finished() {
		st.State = api.JobTerminating
	}
	return st
}

// startFailed reports container waiting reasons that no retry fixes.
func startFailed(reason string) bool {
	switch reason {
	case "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
		return true
	}
	return false
}

// pendingMessage says why a pod waits: unschedulable, pulling, ...
func pendingMessage(p *corev1.Pod, cs *corev1.ContainerStatus) string {
	if cs != nil && cs.State.Waiting != nil {
		return strings.TrimSpace(cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	if p.Spec.NodeName == "" {
		return "waiting for the cluster's scheduler"
	}
	return ""
}
