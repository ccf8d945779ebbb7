package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"gpud.dev/gpud/plugins"
)

// StartGang implements plugins.Backend. It builds every object first (a
// job the backend cannot express fails before anything exists), then
// creates the gang's ConfigMap, which owns the rest, its pull Secret, its
// headless Service, its Service when asked, and its pods; if any creation
// fails it deletes what it made. A gang already started is completed, not
// repeated (a retry after a plugin restart).
func (b *Backend) StartGang(ctx context.Context, g plugins.Gang) error {
	if g.ID == "" || len(g.Jobs) == 0 {
		return errors.New("kubernetes backend: a gang needs an id and at least one job")
	}
	base := gangBase(g.ID)
	secret, err := b.pullSecret(g, base)
	if err != nil {
		return err
	}
	secretName := ""
	if secret != nil {
		secretName = secret.Name
	}
	pods := make([]*corev1.Pod, len(g.Jobs))
	for i := range g.Jobs {
		if pods[i], err = b.pod(g, i, base, secretName); err != nil {
			return err
		}
	}
	var svc *corev1.Service
	if g.Service {
		if svc, err = b.service(g, base, pods); err != nil {
			return err
		}
	}
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	ns := b.cfg.Namespace
	ids := make([]string, len(g.Jobs))
	for i, j := range g.Jobs {
		ids[i] = j.ID
	}
	root, err := b.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: base, Namespace: ns, Labels: b.gangLabels(g), Annotations: map[string]string{annGangID: g.ID}},
		Data:       map[string]string{"jobs": strings.Join(ids, "\n")},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		root, err = b.cs.CoreV1().ConfigMaps(ns).Get(ctx, base, metav1.GetOptions{})
		if err == nil && root.Annotations[annGangID] != g.ID {
			return fmt.Errorf("kubernetes backend: ConfigMap %s/%s belongs to gang %q, not %q", ns, base, root.Annotations[annGangID], g.ID)
		}
	}
	if err != nil {
		return fmt.Errorf("kubernetes backend: create gang %s: %w", g.ID, err)
	}
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: root.Name, UID: root.UID}}
	fail := func(what string, err error) error {
		// All or nothing: remove what this gang has, with a fresh
		// context in case ctx is what ran out.
		cctx, ccancel := b.callCtx(context.WithoutCancel(ctx))
		defer ccancel()
		if cerr := b.deleteGang(cctx, g.ID, 0); cerr != nil {
			return fmt.Errorf("kubernetes backend: create %s of gang %s: %w (and removing the rest failed: %v)", what, g.ID, err, cerr)
		}
		return fmt.Errorf("kubernetes backend: create %s of gang %s: %w; removed the gang's other objects", what, g.ID, err)
	}
	if secret != nil {
		secret.OwnerReferences = owner
		if _, err := b.cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fail("secret "+secret.Name, err)
		}
	}
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: base, Namespace: ns, Labels: b.gangLabels(g), OwnerReferences: owner},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{labelGang: labelValue(g.ID), labelServer: b.cfg.ServerID},
			PublishNotReadyAddresses: true,
		},
	}
	if _, err := b.cs.CoreV1().Services(ns).Create(ctx, headless, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail("headless service "+base, err)
	}
	if svc != nil {
		svc.OwnerReferences = owner
		if _, err := b.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fail("service "+svc.Name, err)
		}
	}
	for _, p := range pods {
		p.OwnerReferences = owner
		if _, err := b.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fail("pod "+p.Name, err)
		}
	}
	return nil
}

// service publishes the jobs' ports under the gang's name.
func (b *Backend) service(g plugins.Gang, base string, pods []*corev1.Pod) (*corev1.Service, error) {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: base + "-svc", Namespace: b.cfg.Namespace, Labels: b.gangLabels(g)},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{labelGang: labelValue(g.ID), labelServer: b.cfg.ServerID}},
	}
	seen := map[string]bool{}
	for _, p := range pods {
		for _, cp := range p.Spec.Containers[0].Ports {
			key := fmt.Sprintf("%s/%d", cp.Protocol, cp.ContainerPort)
			if seen[key] {
				continue
			}
			seen[key] = true
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{
				Name:       strings.ToLower(fmt.Sprintf("%s-%d", cp.Protocol, cp.ContainerPort)),
				Port:       cp.ContainerPort,
				TargetPort: intstr.FromInt32(cp.ContainerPort),
				Protocol:   cp.Protocol,
			})
		}
	}
	if len(s.Spec.Ports) == 0 {
		return nil, fmt.Errorf("kubernetes backend: gang %s is a service but its jobs publish no port", g.ID)
	}
	return s, nil
}

// gangSelector selects every object of gang on this server.
func (b *Backend) gangSelector(gang string) string {
	return labelGang + "=" + labelValue(gang) + "," + labelServer + "=" + b.cfg.ServerID
}

// Stop implements plugins.Backend: it deletes the gang's pods with grace
// (the kubelet sends SIGTERM, then SIGKILL after it) and every other
// object of the gang, by label, so nothing is left even where no
// garbage collector follows the owner references. Stopping a gang that
// is gone is no error.
func (b *Backend) Stop(ctx context.Context, gang string, grace time.Duration) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	return b.deleteGang(ctx, gang, grace)
}

func (b *Backend) deleteGang(ctx context.Context, gang string, grace time.Duration) error {
	ns := b.cfg.Namespace
	sel := metav1.ListOptions{LabelSelector: b.gangSelector(gang)}
	secs := int64((grace + time.Second - 1) / time.Second)
	var errs []error
	if err := b.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &secs}, sel); err != nil {
		errs = append(errs, fmt.Errorf("pods: %w", err))
	}
	svcs, err := b.cs.CoreV1().Services(ns).List(ctx, sel)
	if err != nil {
		errs = append(errs, fmt.Errorf("services: %w", err))
	} else {
		for _, s := range svcs.Items {
			if err := b.cs.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("service %s: %w", s.Name, err))
			}
		}
	}
	if err := b.cs.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, fmt.Errorf("secrets: %w", err))
	}
	// The root last: with a garbage collector it would take the rest.
	if err := b.cs.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, fmt.Errorf("configmaps: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("kubernetes backend: delete gang %s: %w", gang, errors.Join(errs...))
	}
	return nil
}

// List implements plugins.Backend: the gangs whose root ConfigMap this
// server made.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	cms, err := b.cs.CoreV1().ConfigMaps(b.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelGang + "," + labelServer + "=" + b.cfg.ServerID})
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: list gangs: %w", err)
	}
	var out []string
	for _, cm := range cms.Items {
		if id := cm.Annotations[annGangID]; id != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}
