package sshfleet

import (
	"fmt"
	"strings"
)

// unitName is the systemd unit of the agent on hosts where systemd runs.
const unitName = "gpud-agent.service"

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// agentCommandLine is the agent's argv, quoted for a shell or a unit.
func agentCommandLine(dir string, extra []string) string {
	args := []string{dir + "/gpud", "agent", "--data-dir", dir + "/data", "--listen", "unix://" + dir + "/agent.sock"}
	args = append(args, extra...)
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// unitFile is the systemd unit: restart on exit; KillMode=process so the
// process runtime's job shims (own sessions anyway) outlive agent restarts.
func unitFile(dir string, extra []string) string {
	return fmt.Sprintf(`[Unit]
Description=gpud agent (installed by the gpud server over SSH)
After=network-online.target

[Service]
ExecStart=/bin/sh -c %s
Restart=always
RestartSec=1
KillMode=process

[Install]
WantedBy=multi-user.target
`, shellQuote("exec "+agentCommandLine(dir, extra)))
}

// startScript (re)starts the agent. Its stdin is the token, written to
// the data directory's token file (mode 0600), where `gpud agent` reads it.
// The process supervisor is a restart loop in its own session (setsid,
// nohup) whose pid is the pid file; stopping kills its process group.
func startScript(dir, supervisor string, extra []string) string {
	d := shellQuote(dir)
	var b strings.Builder
	fmt.Fprintf(&b, "set -e; umask 077; mkdir -p %[1]s/data; cat > %[1]s/data/token\n", d)
	b.WriteString(stopScript(dir, supervisor, false))
	if supervisor == "systemd" {
		fmt.Fprintf(&b, "cat > /etc/systemd/system/%s <<'GPUD_UNIT'\n%sGPUD_UNIT\n", unitName, unitFile(dir, extra))
		fmt.Fprintf(&b, "systemctl daemon-reload; systemctl enable %[1]s >/dev/null 2>&1; systemctl restart %[1]s\n", unitName)
		return b.String()
	}
	loop := "trap '' HUP; while :; do " + agentCommandLine(dir, extra) + " >>" + shellQuote(dir+"/agent.log") + " 2>&1; sleep 1; done"
	fmt.Fprintf(&b, "cd %[1]s; [ -f agent.log ] && mv -f agent.log agent.log.1\n", d)
	// nohup where it exists (minimal images lack it); the loop ignores
	// SIGHUP itself, and setsid leaves the SSH session's process group.
	b.WriteString("nohup=; command -v nohup >/dev/null && nohup=nohup\n")
	fmt.Fprintf(&b, "setsid $nohup /bin/sh -c %s </dev/null >/dev/null 2>&1 &\n", shellQuote(loop))
	fmt.Fprintf(&b, "echo $! > %s/agent.pid\n", d)
	return b.String()
}

// stopScript stops a running agent (either supervisor) and waits up to 5 s
// for it to exit before killing it; with remove it also deletes the unit
// and the whole directory.
func stopScript(dir, supervisor string, remove bool) string {
	d := shellQuote(dir)
	var b strings.Builder
	if supervisor == "systemd" {
		fmt.Fprintf(&b, "systemctl stop %s 2>/dev/null || true\n", unitName)
		if remove {
			fmt.Fprintf(&b, "systemctl disable %[1]s >/dev/null 2>&1 || true; rm -f /etc/systemd/system/%[1]s; systemctl daemon-reload\n", unitName)
		}
	}
	fmt.Fprintf(&b, `if [ -f %[1]s/agent.pid ]; then
  p=$(cat %[1]s/agent.pid)
  kill -TERM -"$p" 2>/dev/null || true
  i=0; while kill -0 -"$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -"$p" 2>/dev/null || true
  rm -f %[1]s/agent.pid
fi
`, d)
	if remove {
		fmt.Fprintf(&b, "rm -rf %s\n", d)
	}
	return b.String()
}
