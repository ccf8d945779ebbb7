// Package plugins owns where hosts come from: backend plugins (offers,
// create, terminate, status, volumes, served over hashicorp/go-plugin) and
// the provisioning of existing machines. Its sub-packages hold the
// transports the server reaches agents through:
//
//   - plugins/sshfleet: SSH fleets — dial hosts with golang.org/x/crypto/ssh
//     (keys, per-host user/port/identity, proxy_jump, host keys pinned on
//     first use), upload gpud, start `gpud agent` on a unix socket, and
//     reach it only through the SSH connection; health checks; blocks.
//
// Bare-metal registration (agents that dial in over TLS with a per-fleet,
// revocable token, multiplexed with yamux) is the other transport; both of
// its ends live in agent/tunnel, as the agent dials it, and
// daemon/hosts_registration.go mounts its Acceptor.
//
// plugins and its sub-packages must not import daemon (the server wires
// them) nor store or sched: persistence is reached through small
// interfaces (HostKeyStore) the server implements.
package plugins
