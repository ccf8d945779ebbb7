package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// freePort returns a loopback TCP port nothing listens on (now).
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// getThrough sends one HTTP/1.0 GET over conn and returns the response.
func getThrough(conn net.Conn) (string, error) {
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: job\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestPortRelayReachesOnlyTheJobsPublishedPort: the agent relays a
// connection to the port a running job publishes (busybox httpd in a
// container whose host port the engine picked, or a process on the
// host), and refuses, before dialling anything, a port the job does not
// publish — even one that is open on the host (the agent's own API) —,
// an unknown job, and a caller without the agent's token.
func TestPortRelayReachesOnlyTheJobsPublishedPort(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			r := newHost(t, kind).start(t)
			removeAll(t, r.cli)
			ctx := context.Background()
			port, www := 8000, "/www"
			if kind == "process" {
				// Processes share the host's network: a free port, a
				// directory of the test's.
				port, www = freePort(t), filepath.Join(t.TempDir(), "www")
				if err := os.MkdirAll(www, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			s := spec(t, "web", "mkdir -p "+www, "echo hello-from-the-job > "+www+"/index.html", fmt.Sprintf("exec busybox httpd -f -p %d -h %s", port, www))
			s.Ports = []api.JobPort{{Container: port}}
			if _, err := r.cli.Start(ctx, s); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 30*time.Second, func() error {
				if st, err := r.cli.Get(ctx, "web"); err != nil || st.State.Finished() {
					t.Fatalf("the job ended: %+v, %v", st, err)
				}
				// The gateway bounds only the dial with its context: the
				// relayed connection outlives it.
				dctx, cancel := context.WithCancel(ctx)
				conn, err := r.cli.DialPort(dctx, "web", port)
				cancel()
				if err != nil {
					return err
				}
				body, err := getThrough(conn)
				if err != nil {
					return err
				}
				if strings.TrimSpace(body) != "hello-from-the-job" {
					return fmt.Errorf("the relay answered %q", body)
				}
				return nil
			})
			// A deadline that passes ends a stuck read with the usual error.
			conn, err := r.cli.DialPort(ctx, "web", port)
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("a read past its deadline: %v, want os.ErrDeadlineExceeded", err)
			}
			conn.Close()
			agentPort, err := strconv.Atoi(strings.TrimPrefix(r.srv.URL[strings.LastIndex(r.srv.URL, ":"):], ":"))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				job    string
				port   int
				status int
			}{
				{"web", port + 1, http.StatusBadRequest},
				{"web", agentPort, http.StatusBadRequest}, // open on the host, not the job's
				{"web", 0, http.StatusBadRequest},
				{"web", 70000, http.StatusBadRequest},
				{"nope", port, http.StatusNotFound},
			} {
				conn, err := r.cli.DialPort(ctx, c.job, c.port)
				var e *client.Error
				if err == nil {
					conn.Close()
				}
				if !errors.As(err, &e) || e.Status != c.status {
					t.Errorf("relay to job %s port %d: %v, want %d", c.job, c.port, err, c.status)
				}
			}
			wrong, err := client.New(r.srv.URL, "not-the-token", nil)
			if err != nil {
				t.Fatal(err)
			}
			if conn, err := wrong.DialPort(ctx, "web", port); err == nil {
				conn.Close()
				t.Error("a caller without the agent's token was relayed")
			} else if e := (*client.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
				t.Errorf("a caller without the token: %v, want 401", err)
			}
			// A plain GET without the upgrade is refused too.
			req, _ := http.NewRequest("GET", r.srv.URL+"/api/v1/jobs/web/ports/"+url.PathEscape(strconv.Itoa(port)), nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("a GET without Upgrade: %d, want 400", resp.StatusCode)
			}
			// Once the job has stopped, its port is not relayed.
			if _, err := r.cli.Stop(ctx, "web"); err != nil {
				t.Fatal(err)
			}
			if _, err := r.cli.Wait(ctx, "web"); err != nil {
				t.Fatal(err)
			}
			if conn, err := r.cli.DialPort(ctx, "web", port); err == nil {
				conn.Close()
				t.Error("the port of a stopped job was relayed")
			}
		})
	}
}
