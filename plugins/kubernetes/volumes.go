package kubernetes

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// CreateVolume implements plugins.Backend with a PersistentVolumeClaim:
// size, storage_class_name and access_modes (default ReadWriteOnce) make
// a new claim named after the volume; claim_name (or volume_id)
// registers an existing claim, which DeleteVolume then leaves alone (a
// claim gpud made registers only under its own volume's name, so a
// volume never takes over another's). The Volume's ID is the claim's
// name, what a job's volume mounts. The server names a volume
// project/name, so two projects' volumes are two claims.
func (b *Backend) CreateVolume(ctx context.Context, v api.VolumeSpec) (plugins.Volume, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	pvcs := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace)
	if existing := v.ClaimName; existing != "" || v.VolumeID != "" {
		if existing == "" {
			existing = v.VolumeID
		}
		pvc, err := pvcs.Get(ctx, existing, metav1.GetOptions{})
		if err != nil {
			return plugins.Volume{}, fmt.Errorf("kubernetes backend: claim %s/%s: %w", b.cfg.Namespace, existing, err)
		}
		// A claim gpud made is its volume's (another project's, maybe):
		// it is registered again only under that volume's own name.
		if owner := pvc.Annotations[annVolumeID]; pvc.Labels[labelVolume] != "" && owner != v.Name {
			return plugins.Volume{}, fmt.Errorf("kubernetes backend: claim %s/%s is gpud's volume %s: mount that volume by its name instead of registering its claim", b.cfg.Namespace, existing, owner)
		}
		return pvcVolume(pvc), nil
	}
	if v.Name == "" {
		return plugins.Volume{}, errors.New("kubernetes backend: a new volume needs a name")
	}
	if v.Size <= 0 {
		return plugins.Volume{}, fmt.Errorf("kubernetes backend: volume %s: set size to create a claim, or claim_name to use an existing one", v.Name)
	}
	name := dnsLabel("gpud-vol-", v.Name, 63)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace,
			Labels:      map[string]string{labelVolume: labelValue(v.Name), labelServer: b.cfg.ServerID},
			Annotations: map[string]string{annVolumeID: v.Name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(v.Size), resource.BinarySI)}},
		},
	}
	if v.StorageClassName != "" {
		sc := v.StorageClassName
		pvc.Spec.StorageClassName = &sc
	}
	for _, m := range v.AccessModes {
		pvc.Spec.AccessModes = append(pvc.Spec.AccessModes, corev1.PersistentVolumeAccessMode(m))
	}
	if len(pvc.Spec.AccessModes) == 0 {
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	got, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = pvcs.Get(ctx, name, metav1.GetOptions{})
		if err == nil && got.Annotations[annVolumeID] != v.Name {
			return plugins.Volume{}, fmt.Errorf("kubernetes backend: claim %s exists and is not gpud's volume %s", name, v.Name)
		}
	}
	if err != nil {
		return plugins.Volume{}, fmt.Errorf("kubernetes backend: create claim for volume %s: %w", v.Name, err)
	}
	return pvcVolume(got), nil
}

func pvcVolume(p *corev1.PersistentVolumeClaim) plugins.Volume {
	v := plugins.Volume{ID: p.Name, State: string(p.Status.Phase)}
	q := p.Spec.Resources.Requests[corev1.ResourceStorage]
	if c, ok := p.Status.Capacity[corev1.ResourceStorage]; ok {
		q = c
	}
	v.Size = api.Size(q.Value())
	if v.State == "" {
		v.State = string(corev1.ClaimPending)
	}
	return v
}

// DeleteVolume implements plugins.Backend: it deletes a claim this
// server created; a registered claim (not ours) and a missing one are
// left as they are.
func (b *Backend) DeleteVolume(ctx context.Context, id string) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	pvcs := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace)
	pvc, err := pvcs.Get(ctx, id, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes backend: volume %s: %w", id, err)
	}
	if pvc.Labels[labelServer] != b.cfg.ServerID || pvc.Labels[labelVolume] == "" {
		return nil
	}
	uid := pvc.UID
	err = pvcs.Delete(ctx, id, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes backend: delete volume %s: %w", id, err)
	}
	return nil
}
