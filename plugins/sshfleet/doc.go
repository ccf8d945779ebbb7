// Package sshfleet turns existing machines reachable over SSH into agent
// hosts: it dials them with golang.org/x/crypto/ssh (identity files,
// per-host user and port, proxy_jump), pins each host key on first use
// through a HostKeyStore and refuses a changed key, uploads the running
// gpud binary when the host's architecture matches, starts `gpud agent` on
// a unix socket (a systemd unit where systemd runs, else a supervised
// background process with a pid file), and hands the server an
// *http.Client whose connections go only through the SSH connection.
// A Monitor marks a host unreachable after a bounded silence and reconnects
// when it answers again. SplitBlocks divides a host's GPUs into blocks.
//
// sshfleet must not import daemon, store or sched; the server backs
// HostKeyStore with its store and translates Host state into instances.
package sshfleet
