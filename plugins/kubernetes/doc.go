// Package kubernetes is the Kubernetes backend (issue 17): a job backend
// that runs each of gpud's jobs as a pod in one namespace of an existing
// cluster, through k8s.io/client-go. A gang (a multi-node task's nodes, or
// one job) is a ConfigMap that roots it (every pod and Service it makes is
// owned by that ConfigMap, so deleting it lets the cluster's garbage
// collector remove the rest), a headless Service giving each pod a stable
// DNS name (pod.<gang>.<namespace>.svc) for the DSTACK_* cluster
// environment, the pods, and, for a service, a Service publishing the
// jobs' ports. Everything it creates carries the labels gpud.dev/gang,
// gpud.dev/job, gpud.dev/project and gpud.dev/server, so Stop and List
// work by label even where no garbage collector runs. Volumes are
// PersistentVolumeClaims; offers come from the nodes' allocatable
// resources less what pods already request.
//
// gpud's own scheduler judges queues and fair share; the cluster's
// scheduler (kube-scheduler, or KAI Scheduler with its queue label,
// pod-group and GPU-fraction annotations) places the pods.
//
// It implements plugins.Backend and must not import daemon, store or sched.
package kubernetes
