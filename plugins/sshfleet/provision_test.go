package sshfleet

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestProvisionThreeHostsServesEachAgentThroughSSHOnly provisions three
// real sshd hosts — one as root, one as an unprivileged user, one through
// a proxy_jump bastion — and drives each agent's API through the SSH
// connection: host info with the fake GPUs, and a job run to completion.
func TestProvisionThreeHostsServesEachAgentThroughSSHOnly(t *testing.T) {
	f := newFleet(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	root, ops, jumped := f.target(0), f.target(1), f.target(2)
	ops.User = "ops"
	jumped.ProxyJump = &Jump{Hostname: f.hosts[0].IP, User: "root", IdentityFile: f.key.IdentityFile}
	tests := []struct {
		name    string
		target  Target
		wantDir string
	}{
		{"root installs under /var/lib", root, "/var/lib/gpud-agent"},
		{"per-host user installs in its home", ops, "/home/ops/.gpud/agent"},
		{"proxy_jump reaches the host through the bastion", jumped, "/var/lib/gpud-agent"},
	}
	hosts := make([]*Host, len(tests))
	var wg sync.WaitGroup
	for i, tt := range tests {
		wg.Go(func() {
			h, err := Provision(ctx, tt.target, f.options())
			if err != nil {
				t.Errorf("%s: provision: %v", tt.name, err)
				return
			}
			hosts[i] = h
		})
	}
	wg.Wait()
	for _, h := range hosts {
		if h != nil {
			t.Cleanup(func() { h.Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hosts[i]
			if h.Dir != tt.wantDir || h.Supervisor != "process" || h.Arch == "" {
				t.Errorf("dir %q supervisor %q arch %q; want dir %q, process supervisor", h.Dir, h.Supervisor, h.Arch, tt.wantDir)
			}
			c := agentClient(t, h)
			info, err := c.Host(ctx)
			if err != nil {
				t.Fatalf("host info through ssh: %v", err)
			}
			if info.Hostname != f.hosts[i].Name || len(info.Accelerators.Devices) != 4 || info.Runtime != "process" {
				t.Errorf("host info: hostname %q, %d GPUs, runtime %q; want %q, 4 fake GPUs, process",
					info.Hostname, len(info.Accelerators.Devices), info.Runtime, f.hosts[i].Name)
			}
			if _, err := c.Start(ctx, api.JobSpec{ID: "hello", RunName: "hello", Commands: []string{"echo hello from $(hostname)"}}); err != nil {
				t.Fatalf("start job: %v", err)
			}
			st, err := c.Wait(ctx, "hello")
			if err != nil || st.State != api.JobDone || st.ExitCode != 0 {
				t.Fatalf("job: %+v, %v; want done with exit 0", st, err)
			}
		})
	}
	// The bastion forwarded the connection: the jumped host saw it come
	// from the bastion's address, not from this machine's bridge gateway.
	out, err := hosts[2].run(ctx, `echo "$SSH_CLIENT"`, nil)
	if err != nil || !strings.HasPrefix(string(out), f.hosts[0].IP+" ") {
		t.Errorf("SSH_CLIENT on the jumped host = %q, %v; want it to start with the bastion %s", out, err, f.hosts[0].IP)
	}
}

// TestAgentIsUnreachableWithoutTheTransportsAuthentication proves the agent
// a fleet host runs offers no way in but the authenticated SSH transport.
func TestAgentIsUnreachableWithoutTheTransportsAuthentication(t *testing.T) {
	f := newFleet(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := f.provision(t, ctx, f.target(0))
	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"the agent listens on no TCP port", func(t *testing.T) {
			// The agent's socket inodes against the inodes of listening
			// TCP sockets (state 0A in /proc/net/tcp and tcp6).
			agentSockets := f.hosts[0].Exec(t, `for p in /proc/[0-9]*; do
				case "$(tr '\0' ' ' < $p/cmdline)" in *"gpud agent"*) ls -l $p/fd | sed -n 's/.*socket:\[\([0-9]*\)\]/\1/p';; esac
			done`)
			listening := f.hosts[0].Exec(t, `cat /proc/net/tcp /proc/net/tcp6 | awk '$4 == "0A" {print $10}'`)
			if strings.TrimSpace(agentSockets) == "" || strings.TrimSpace(listening) == "" {
				t.Fatalf("found no agent sockets (%q) or no TCP listeners (%q)", agentSockets, listening)
			}
			for _, inode := range strings.Fields(agentSockets) {
				if slices.Contains(strings.Fields(listening), inode) {
					t.Errorf("the agent listens on TCP (socket inode %s)", inode)
				}
			}
		}},
		{"the socket is readable by its owner only", func(t *testing.T) {
			if mode := strings.TrimSpace(f.hosts[0].Exec(t, "stat -c %a "+h.Socket)); mode != "600" {
				t.Errorf("socket mode %s, want 600", mode)
			}
		}},
		{"a call through SSH without the token is refused", func(t *testing.T) {
			c, err := client.New(AgentBaseURL, "not-the-token", h.HTTPClient())
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Host(ctx)
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
				t.Errorf("host info with a wrong token: %v; want 401", err)
			}
		}},
		{"an SSH key the host does not know is refused", func(t *testing.T) {
			tg := f.target(0)
			tg.IdentityFile = testutil.NewClientKey(t, t.TempDir()).IdentityFile
			if c, err := f.dialer.Dial(ctx, tg); err == nil {
				c.Close()
				t.Error("a key not in authorized_keys logged in")
			}
		}},
		{"the token is not on any command line", func(t *testing.T) {
			if ps := f.hosts[0].Exec(t, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"); strings.Contains(ps, h.Token) {
				t.Error("the agent token is visible in a process's command line")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// TestTeardownStopsAndRemovesTheAgent proves `gpud fleet delete`'s host
// step: the supervisor and agent are gone, and so is the directory.
func TestTeardownStopsAndRemovesTheAgent(t *testing.T) {
	f := newFleet(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := f.provision(t, ctx, f.target(0))
	if err := h.Teardown(ctx); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	out := f.hosts[0].Exec(t, "ps -o args; ls -d "+h.Dir+" 2>&1 || true")
	if strings.Contains(out, "gpud agent") || !strings.Contains(out, "No such file") {
		t.Errorf("after teardown the host still has the agent:\n%s", out)
	}
	if _, err := agentClient(t, h).Host(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("host info after teardown: %v; want ErrUnreachable", err)
	}
}

// TestReprovisionKeepsTheBinaryAndRefusesAnotherArchitecture checks the
// upload step: an unchanged binary is not sent again, and a binary built
// for another architecture is refused with the fix.
func TestReprovisionKeepsTheBinaryAndRefusesAnotherArchitecture(t *testing.T) {
	f := newFleet(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := f.provision(t, ctx, f.target(0))
	before := f.hosts[0].Exec(t, "stat -c %Y.%i "+h.Dir+"/gpud")
	again := f.provision(t, ctx, f.target(0))
	if after := f.hosts[0].Exec(t, "stat -c %Y.%i "+again.Dir+"/gpud"); after != before {
		t.Errorf("binary rewritten on re-provision: %s -> %s", before, after)
	}
	if _, err := agentClient(t, again).Host(ctx); err != nil {
		t.Errorf("restarted agent: %v", err)
	}
	o := f.options()
	o.BinaryArch = "riscv64"
	_, err := Provision(ctx, f.target(0), o)
	if !errors.Is(err, ErrArchMismatch) || !strings.Contains(err.Error(), "riscv64") {
		t.Errorf("provision with a riscv64 binary: %v; want ErrArchMismatch naming both architectures", err)
	}
}

// TestBootstrapPutsNoSecretOnACommandLine records every command the
// server has the host's shell run while provisioning (the root login
// shell is replaced by one that logs its arguments: exactly what ps shows
// for each SSH command) and checks that the bootstrap ran through it and
// that none of it holds the agent token, which travels on stdin only.
func TestBootstrapPutsNoSecretOnACommandLine(t *testing.T) {
	f := newFleet(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f.hosts[0].Exec(t, `cat > /bin/logsh <<'SH'
#!/bin/sh
printf '%s\n' "$*" >> /tmp/ssh-commands.log
exec /bin/sh "$@"
SH
chmod 755 /bin/logsh
sed -i 's#^root:x:0:0:root:/root:/bin/sh$#root:x:0:0:root:/root:/bin/logsh#' /etc/passwd
grep -q '^root:.*/bin/logsh$' /etc/passwd`)
	h := f.provision(t, ctx, f.target(0))
	cmds := f.hosts[0].Exec(t, "cat /tmp/ssh-commands.log")
	if !strings.Contains(cmds, "umask 077") || !strings.Contains(cmds, "/data/token") {
		t.Fatalf("the logging shell did not see the bootstrap; it saw:\n%s", cmds)
	}
	if strings.Contains(cmds, h.Token) {
		t.Errorf("a bootstrap command line holds the agent token:\n%s", cmds)
	}
	if ps := f.hosts[0].Exec(t, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"); strings.Contains(ps, h.Token) {
		t.Error("the agent token is visible in a running process's command line")
	}
}
