package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins"
)

// TestTheDocumentedRBACSuffices binds docs/backends.md's ClusterRole to a
// user with no other rights and drives every call of the backend as
// that user; before the binding, Check fails naming the refusal.
func TestTheDocumentedRBACSuffices(t *testing.T) {
	c := kubetest.Need(t)
	ctx := context.Background()
	ns := dnsLabel("t-rbac-", strings.ToLower(t.Name()), 40) + "x"
	b, err := New(Config{Kubeconfig: c.LimitedKubeconfig, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(ctx); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Check without rights: %v", err)
	}
	core := []string{""}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gpud-backend"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: core, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}},
		{APIGroups: core, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}},
		{APIGroups: core, Resources: []string{"pods", "services", "configmaps", "secrets", "persistentvolumeclaims"}, Verbs: []string{"create", "get", "list", "delete", "deletecollection"}},
		{APIGroups: core, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: core, Resources: []string{"pods/portforward"}, Verbs: []string{"create"}},
	}}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpud-backend"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "gpud-backend"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: kubetest.LimitedUser}}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "gpud-backend", metav1.DeleteOptions{})
		_ = c.Client.RbacV1().ClusterRoles().Delete(ctx, "gpud-backend", metav1.DeleteOptions{})
	})
	// RBAC reads its bindings through an informer: allow it a moment.
	testutil.Eventually(t, 30*time.Second, func() error { return b.Check(ctx) })
	offers, err := b.Offers(ctx, plugins.OfferQuery{})
	if err != nil || len(offers) == 0 {
		t.Fatalf("offers: %v %v", offers, err)
	}
	j := job("rbac-0", 1, "sleep infinity")
	j.RegistryAuth = &api.JobRegistryAuth{Username: "u", Password: "p"}
	j.Ports = []api.JobPort{{Container: 80}}
	g := plugins.Gang{ID: "rbac", Service: true, Jobs: []api.JobSpec{j}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitStates(t, b, g.ID, 1, api.JobRunning)
	if err := b.Logs(ctx, "rbac-0", false, func(api.JobLogEntry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if gangs, err := b.List(ctx); err != nil || len(gangs) != 1 {
		t.Fatalf("list: %v %v", gangs, err)
	}
	if err := b.Stop(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, g.ID)
	v, err := b.CreateVolume(ctx, api.VolumeSpec{Name: "v", Backend: "kubernetes", Size: api.SizeSpec(api.GB)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
}
