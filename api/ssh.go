package api

import (
	"net/url"
	"strings"
	"time"
)

// SSH into runs: the CLI's `ssh-proxy` upgrades the server's
// /runs/{run}/ssh endpoint to a raw byte stream (SSHProtocol) and speaks
// SSH over it; the server checks that the caller may use the run, and
// relays the stream to the agent of the job's host, passing the caller's
// registered public key (HeaderSSHAuthorizedKey) and name (HeaderSSHUser)
// in the agent request's preamble. The agent serves SSH itself and accepts
// only that key: a client never names the key or the job it gets.
const (
	// SSHProtocol is the Upgrade token of both hops.
	SSHProtocol = "gpud-ssh/1"
	// HeaderSSHAuthorizedKey is the authorized_keys line the agent
	// accepts for this one connection (server to agent only).
	HeaderSSHAuthorizedKey = "Gpud-Ssh-Authorized-Key"
	// HeaderSSHUser is the gpud user connecting (server to agent only).
	HeaderSSHUser = "Gpud-Ssh-User"
)

// JobSessions is a job's interactive sessions as its agent sees them.
type JobSessions struct {
	// Active counts sessions open now.
	Active int `json:"active"`
	// LastActivity is when a session last opened, closed or had input.
	LastActivity time.Time `json:"last_activity,omitzero"`
}

// SSHKey is a user's public key for SSH into runs, in authorized_keys
// format ("ssh-ed25519 AAAA… comment").
type SSHKey struct {
	PublicKey string `json:"public_key"`
}

// IDELink is the link that opens a dev environment in ide (vscode,
// cursor or windsurf) over SSH to host, the Host entry `gpud ssh-config`
// writes, as dstack's links do: "vscode://vscode-remote/ssh-remote+HOST"
// followed by the absolute folder to open, if known. "" for other IDEs.
func IDELink(ide, host, dir string) string {
	switch ide {
	case "vscode", "cursor", "windsurf":
	default:
		return ""
	}
	if !strings.HasPrefix(dir, "/") {
		dir = ""
	}
	return ide + "://vscode-remote/ssh-remote+" + url.PathEscape(host) + dir
}
