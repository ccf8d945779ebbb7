// Package plugins owns where hosts come from: backend plugins (offers,
// create, terminate, status, volumes, served over hashicorp/go-plugin) and
// the provisioning of existing machines.
//
// The backend protocol (docs/backends.md): backend.go is the interface
// (the contract); protocol.go the go-plugin handshake and the gRPC service,
// written by hand with a JSON codec (no protoc where gpud builds); serve.go
// a plugin's side (Serve, Factory), client.go the server's side (a Backend
// over the connection); supervisor.go runs one plugin as a subprocess,
// restarts it with backoff and re-reads its gangs; registry.go the
// built-ins' table and the external plugin directory with its trust
// checks; logging.go adapts go-plugin's hclog to zerolog both ways.
// Built-in backends live in sub-packages (plugins/kubernetes).
//
// Its other sub-packages hold the transports the server reaches agents
// through:
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
