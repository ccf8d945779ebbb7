// Package sshd is the agent's SSH server into its jobs: one SSH connection
// per relayed stream (the server's /runs/{run}/ssh endpoint, relayed to
// the agent's /jobs/{id}/ssh), authenticated by the one public key the
// server vouches for on that stream, and whose sessions are commands run
// inside the one job the server named (runtime.Execer): a shell, a
// command, or the SFTP subsystem (scp and sftp) when the job's image has
// an sftp-server. No port is opened on the host: the stream arrives over
// the agent's existing link to the server.
//
// sshd must not import daemon, store, sched, plugins or proxy.
package sshd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/agent/runtime"
)

// Config is one connection's: who may log in and what a session runs.
type Config struct {
	// HostKey identifies the agent (NewHostKey). Clients reach it only
	// through the server, which authenticated the agent's link.
	HostKey ssh.Signer
	// AuthorizedKey is the only key accepted.
	AuthorizedKey ssh.PublicKey
	// Exec runs a session's command in the job (agent.Exec bound to it).
	Exec func(ctx context.Context, req runtime.ExecRequest) (int, error)
	// Dial connects to a port on the job's own loopback (agent.DialJob
	// bound to it), for port forwarding (ssh -L, an IDE's server).
	Dial func(ctx context.Context, port int) (net.Conn, error)
	// Touch records input from the client (inactivity policies).
	Touch func()
	Log   zerolog.Logger
}

// NewHostKey makes an ed25519 host key for the agent's process lifetime.
func NewHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// ParseAuthorizedKey reads one authorized_keys line.
func ParseAuthorizedKey(line string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("authorized key: %w", err)
	}
	return k, nil
}

// Serve speaks SSH on conn until the client leaves or ctx ends, and
// closes conn.
func Serve(ctx context.Context, conn net.Conn, cfg Config) error {
	defer conn.Close()
	want := cfg.AuthorizedKey.Marshal()
	sc := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), want) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("not the key registered for this user (run `gpud ssh-config RUN` to register yours)")
		},
		ServerVersion: "SSH-2.0-gpud",
	}
	sc.AddHostKey(cfg.HostKey)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	sconn, chans, reqs, err := ssh.NewServerConn(conn, sc)
	if err != nil {
		return fmt.Errorf("ssh handshake: %w", err)
	}
	defer sconn.Close()
	go ssh.DiscardRequests(reqs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for nc := range chans {
		if nc.ChannelType() == "direct-tcpip" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				forward(ctx, nc, cfg)
			}()
			continue
		}
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions and forwards to the job's localhost are served")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			cfg.Log.Debug().Err(err).Msg("ssh: accept session")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveSession(ctx, ch, creqs, cfg)
		}()
	}
	cancel()
	wg.Wait()
	return nil
}

// sftpServer runs the image's own sftp-server, wherever its distribution
// puts it.
const sftpServer = `for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/sftp-server /usr/lib/sftp-server; do [ -x "$p" ] && exec "$p"; done; echo "gpud: no sftp-server in this job's image: use scp -O (the legacy protocol needs scp in the image)" >&2; exit 127`

// serveSession handles one session channel: its terminal and environment
// requests, then the one command it runs.
func serveSession(ctx context.Context, ch ssh.Channel, reqs <-chan *ssh.Request, cfg Config) {
	defer ch.Close()
	// A client that closed the channel is gone: its command is killed.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		req     = runtime.ExecRequest{Stdin: touchReader{ch, cfg.Touch}, Stdout: ch, Stderr: ch.Stderr()}
		resize  = make(chan runtime.WindowSize, 8)
		started bool
		ended   = make(chan struct{})
	)
	req.Resize = resize
	defer close(resize)
	start := func(command string) {
		started = true
		req.Command = command
		go func() {
			defer close(ended)
			code, err := cfg.Exec(ctx, req)
			if err != nil {
				fmt.Fprintf(ch.Stderr(), "gpud: %v\r\n", err)
				code = 255
			}
			status := struct{ Code uint32 }{uint32(code)}
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(&status)) // the client may be gone
			_ = ch.Close()
		}()
	}
	for r := range reqs {
		ok := false
		switch r.Type {
		case "pty-req":
			var p struct {
				Term               string
				Cols, Rows, Wp, Hp uint32
				Modes              string
			}
			if ssh.Unmarshal(r.Payload, &p) == nil && !started {
				req.TTY, req.Term, req.Size = true, p.Term, size(p.Cols, p.Rows)
				ok = true
			}
		case "window-change":
			var p struct{ Cols, Rows, Wp, Hp uint32 }
			if ssh.Unmarshal(r.Payload, &p) == nil {
				ok = true
				if !started {
					req.Size = size(p.Cols, p.Rows)
				} else {
					select {
					case resize <- size(p.Cols, p.Rows):
					default: // a burst of changes: the next one wins
					}
				}
			}
		case "env":
			var p struct{ Name, Value string }
			if ssh.Unmarshal(r.Payload, &p) == nil && !started {
				req.Env = append(req.Env, p.Name+"="+p.Value)
				ok = true
			}
		case "shell":
			if !started {
				start("")
				ok = true
			}
		case "exec":
			var p struct{ Command string }
			if ssh.Unmarshal(r.Payload, &p) == nil && !started {
				start(p.Command)
				ok = true
			}
		case "subsystem":
			var p struct{ Name string }
			if ssh.Unmarshal(r.Payload, &p) == nil && !started && p.Name == "sftp" {
				start(sftpServer)
				ok = true
			}
		}
		if r.WantReply {
			_ = r.Reply(ok, nil) // the client may be gone
		}
	}
	cancel()
	if started {
		<-ended
	}
}

func size(cols, rows uint32) runtime.WindowSize {
	return runtime.WindowSize{Rows: uint16(min(rows, 1<<16-1)), Cols: uint16(min(cols, 1<<16-1))}
}

// touchReader calls touch on each read of client input.
type touchReader struct {
	r     io.Reader
	touch func()
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 && t.touch != nil {
		t.touch()
	}
	return n, err
}

// forward serves a direct-tcpip channel (ssh -L, an IDE reaching its
// server): only to the job's own loopback, never to another address, so
// a forward reaches what the job reaches at localhost and nothing else.
func forward(ctx context.Context, nc ssh.NewChannel, cfg Config) {
	var p struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "malformed forward request")
		return
	}
	if !loopback(p.Host) || p.Port == 0 || p.Port > 65535 {
		_ = nc.Reject(ssh.Prohibited, fmt.Sprintf("forwards reach only the job's own localhost, not %s:%d", p.Host, p.Port))
		return
	}
	if cfg.Dial == nil {
		_ = nc.Reject(ssh.Prohibited, "port forwarding is not served for this job")
		return
	}
	conn, err := cfg.Dial(ctx, int(p.Port))
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	defer conn.Close()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	stop := context.AfterFunc(ctx, func() { conn.Close(); ch.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(conn, touchReader{ch, cfg.Touch}) // ends when either side closes
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(ch, conn)
	_ = ch.CloseWrite()
	<-done
}

// loopback reports whether host names the loopback ("localhost",
// 127.0.0.0/8, ::1).
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
