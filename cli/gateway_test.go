package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpud.dev/gpud/daemon"
)

// TestServeGatewayFlagsThatWouldNotTakeEffectAreRefused: gpud serve
// refuses certificate flags without a gateway, ACME flags with another
// certificate mode, and an unknown mode, as usage errors before it starts
// anything.
func TestServeGatewayFlagsThatWouldNotTakeEffectAreRefused(t *testing.T) {
	base := []string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--no-local-agent"}
	testCLICases(t, []cliCase{
		{name: "tls without a domain", args: append(base, "--tls", "internal"), code: exitUsage, stderr: "--tls needs the gateway: add --domain"},
		{name: "acme email without a domain", args: append(base, "--acme-email", "a@b.example"), code: exitUsage, stderr: "--acme-email needs the gateway"},
		{name: "acme flags with the internal CA", args: append(base, "--domain", "gpud.test", "--tls", "internal", "--acme-ca", "https://ca.example/dir"), code: exitUsage, stderr: "--acme-ca is for --tls acme"},
		{name: "an unknown mode", args: append(base, "--domain", "gpud.test", "--tls", "selfsigned"), code: exitUsage, stderr: `--tls "selfsigned"`},
		{name: "gateway without a subcommand or --server", args: []string{"gateway"}, code: exitUsage, stderr: "--server URL to run a standalone gateway"},
		{name: "a standalone gateway without a token", args: []string{"gateway", "--server", "http://127.0.0.1:1"}, code: exitUsage, stderr: "GPUD_GATEWAY_TOKEN"},
	})
}

// TestGatewayCommandsApplyListDeleteAndPrintTheCA: gpud gateway apply,
// list (table and --json), ca (--out) and delete against a server that
// runs the gateway with its internal CA.
func TestGatewayCommandsApplyListDeleteAndPrintTheCA(t *testing.T) {
	srv := serveForCLI(t, daemon.Options{NoLocalAgent: true, Domain: "gpud.test", GatewayTLS: daemon.GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.yml")
	writeTestFile(t, file, "type: gateway\nname: apps\ndomain: apps.example.com\ndefault: true\n")
	if out := mustRunCLI(t, "gateway", "apply", file); !strings.Contains(out, "gateway apps: applied") {
		t.Fatalf("apply: %q", out)
	}
	out := mustRunCLI(t, "gateway", "list")
	for _, want := range []string{"apps.example.com", "https://<run>.apps.example.com", "lets-encrypt"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	if out := mustRunCLI(t, "gateway", "list", "--json"); !strings.Contains(out, `"listening": true`) {
		t.Errorf("list --json: %s", out)
	}
	ca := filepath.Join(dir, "ca.pem")
	mustRunCLI(t, "gateway", "ca", "--out", ca)
	b, err := os.ReadFile(ca)
	if err != nil || string(b) != string(srv.GatewayCACertPEM()) {
		t.Fatalf("ca --out wrote %q (%v), want the server's CA", b, err)
	}
	if out := mustRunCLI(t, "gateway", "delete", "apps"); !strings.Contains(out, "gateway apps deleted") {
		t.Fatalf("delete: %q", out)
	}
	if out := mustRunCLI(t, "gateway", "list"); !strings.Contains(out, "no gateways") {
		t.Fatalf("list after delete: %q", out)
	}
	if _, stderr, code := runCLI("gateway", "delete", "apps"); code != exitInvalidInput || !strings.Contains(stderr, "not found") {
		t.Fatalf("delete of a gone gateway: exit %d %q", code, stderr)
	}
}
