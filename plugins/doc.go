// Package plugins owns where hosts come from: backend plugins (offers,
// create, terminate, status, volumes, served over hashicorp/go-plugin) and
// the provisioning of existing machines. Its sub-packages hold the
// transports the server reaches agents through:
//
//   - plugins/sshfleet: SSH fleets — dial hosts with golang.org/x/crypto/ssh
//     (keys, per-host user/port/identity, proxy_jump, host keys pinned on
//     first use), upload gpud, start `gpud agent` on a unix socket, and
//     reach it only through the SSH connection; health checks; blocks.
//   - plugins/registration: bare-metal registration — accept agents that
//     dial in over TLS with a per-fleet, revocable token, multiplexed with
//     yamux (the agent side is agent/tunnel).
//
// plugins and its sub-packages must not import daemon (the server wires
// them) nor store or sched: persistence is reached through small
// interfaces (HostKeyStore, TokenChecker) the server implements.
package plugins
