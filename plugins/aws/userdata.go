package aws

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"gpud.dev/gpud/plugins"
)

// The user data of a machine is a cloud-init shell script (run once, as
// root, at first boot) that writes the registration token and the
// server's CA to /etc/gpud (mode 0600), installs gpud when the image has
// none (install_command), and runs `gpud agent --server URL --token-file
// ... --hostname ID` under systemd (or in the background without it), so
// the machine joins its fleet under the name the server made it for.
//
// The token is in the user data, which the account's users with
// ec2:DescribeInstanceAttribute and the machine's own processes (instance
// metadata) can read: it is one token per machine, admits only into that
// fleet, and the server revokes it when the machine goes.

// Paths on the machine.
const (
	tokenPath = "/etc/gpud/registration-token"
	caPath    = "/etc/gpud/server-ca.pem"
)

// AgentArgs are what a machine's `gpud agent` is started with, as the user
// data says them (the tests play the booted machine with them).
type AgentArgs struct {
	Server, Token, CAPEM, Hostname string
}

// UserData is the script of a machine made for gpud instance id.
func UserData(reg plugins.RegistrationSettings, id, install string) (string, error) {
	u, err := url.Parse(reg.ServerURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("aws backend: the server's registration URL %q is not an https:// URL (gpud serve --registration-listen)", reg.ServerURL)
	}
	if strings.ContainsAny(reg.Token, "'\n") || strings.Contains(reg.CAPEM, "GPUD_EOF") {
		return "", errors.New("aws backend: registration settings with quotes or the heredoc marker")
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# gpud: made by the aws backend; joins this machine to its fleet\nset -eu\n")
	b.WriteString("umask 077\nmkdir -p /etc/gpud\n")
	fmt.Fprintf(&b, "GPUD_SERVER=%s\nGPUD_HOSTNAME=%s\n", shq(reg.ServerURL), shq(id))
	fmt.Fprintf(&b, "printf '%%s' %s > %s\n", shq(reg.Token), tokenPath)
	caFlag := ""
	if reg.CAPEM != "" {
		fmt.Fprintf(&b, "cat > %s <<'GPUD_EOF'\n%s\nGPUD_EOF\n", caPath, strings.TrimRight(reg.CAPEM, "\n"))
		caFlag = " --server-ca " + caPath
	}
	b.WriteString("if ! command -v gpud >/dev/null 2>&1; then\n")
	if install != "" {
		fmt.Fprintf(&b, "  sh -c %s\n", shq(install))
	} else {
		b.WriteString("  echo 'gpud: not on this image and no install_command in the aws backend' >&2; exit 1\n")
	}
	b.WriteString("fi\n")
	cmd := `$(command -v gpud) agent --server "$GPUD_SERVER" --token-file ` + tokenPath + caFlag + ` --hostname "$GPUD_HOSTNAME"`
	b.WriteString("if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then\n")
	fmt.Fprintf(&b, "  cat > /etc/systemd/system/gpud-agent.service <<GPUD_EOF\n[Unit]\nDescription=gpud agent\nAfter=network-online.target\n[Service]\nExecStart=%s\nRestart=always\nRestartSec=5\n[Install]\nWantedBy=multi-user.target\nGPUD_EOF\n", cmd)
	b.WriteString("  systemctl daemon-reload\n  systemctl enable --now gpud-agent.service\nelse\n")
	fmt.Fprintf(&b, "  nohup %s >/var/log/gpud-agent.log 2>&1 &\nfi\n", cmd)
	return b.String(), nil
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ParseUserData reads back what UserData wrote: the server, token, CA and
// host name a booted machine's agent starts with.
func ParseUserData(script string) (AgentArgs, error) {
	var a AgentArgs
	sc := bufio.NewScanner(strings.NewReader(script))
	inCA := false
	var ca strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inCA && line == "GPUD_EOF":
			inCA, a.CAPEM = false, ca.String()
		case inCA:
			ca.WriteString(line + "\n")
		case strings.HasPrefix(line, "GPUD_SERVER="):
			a.Server = unq(strings.TrimPrefix(line, "GPUD_SERVER="))
		case strings.HasPrefix(line, "GPUD_HOSTNAME="):
			a.Hostname = unq(strings.TrimPrefix(line, "GPUD_HOSTNAME="))
		case strings.HasPrefix(line, "printf '%s' ") && strings.HasSuffix(line, " > "+tokenPath):
			a.Token = unq(strings.TrimSuffix(strings.TrimPrefix(line, "printf '%s' "), " > "+tokenPath))
		case line == "cat > "+caPath+" <<'GPUD_EOF'":
			inCA = true
		}
	}
	if a.Server == "" || a.Token == "" || a.Hostname == "" {
		return a, errors.New("user data: no gpud agent settings (GPUD_SERVER, GPUD_HOSTNAME, the token)")
	}
	return a, nil
}

func unq(s string) string {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "'"), "'")
	return strings.ReplaceAll(s, `'\''`, "'")
}
