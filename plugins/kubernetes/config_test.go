package kubernetes

import (
	"strings"
	"testing"
)

// TestInlineKubeconfigCannotActOnTheServersHost attacks kubeconfig_data,
// which a project admin may give: an exec plugin would run a command as
// the server, a file path would read the server's files.
func TestInlineKubeconfigCannotActOnTheServersHost(t *testing.T) {
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
	for _, c := range []struct{ name, body, want string }{
		{"exec", "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch /tmp/pwned']}\n", "exec credential plugin (/bin/sh)"},
		{"auth provider", "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user:\n    auth-provider: {name: oidc}\n", "auth provider"},
		{"token file", "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {tokenFile: /var/lib/gpud/secret}\n", "names files on the server's host"},
		{"client key", "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {client-certificate: /etc/ssl/a.crt, client-key: /etc/ssl/a.key}\n", "names files on the server's host"},
		{"ca file", "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443', certificate-authority: /etc/shadow}\nusers:\n- name: u\n  user: {token: t}\n", "certificate-authority-data"},
	} {
		_, err := New(Config{KubeconfigData: head + c.body})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	ok := head + "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\n"
	if _, err := New(Config{KubeconfigData: ok}); err != nil {
		t.Fatalf("an inline kubeconfig with a token: %v", err)
	}
}
