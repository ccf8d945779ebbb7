package plugins

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// TestDialPortStreamsBytesBothWaysOverThePlugin: the test plugin (a real
// subprocess over go-plugin) dials a port of one of its jobs, a loopback
// echo server here, and the server's side gets a net.Conn whose bytes go
// both ways through the protocol's DialPort stream; closing it closes the
// job's side; a job the engine does not run is refused; and a backend
// without PortDialer answers ErrUnsupported.
func TestDialPortStreamsBytesBothWaysOverThePlugin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer close(closed)
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, strings.ToUpper(line)); err != nil {
				return
			}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	sup, err := startTest(t, buildTestPlugin(t, ""), testConfig(t), SupervisorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := sup.Info(ctx)
	if err != nil || !info.Supports(FeatureService) || !info.Supports(FeaturePorts) || info.Supports(FeaturePrivileged) {
		t.Fatalf("the test plugin's features: %+v %v", info.Features, err)
	}
	if err := sup.StartGang(ctx, Gang{ID: "svc", Project: "default", Jobs: []api.JobSpec{{ID: "job-s"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := DialPort(ctx, sup, "job-none", port); err == nil || !strings.Contains(err.Error(), "no job job-none") {
		t.Fatalf("dial of a job the engine does not run: %v", err)
	}
	conn, err := DialPort(ctx, sup, "job-s", port)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	// A payload larger than one chunk, then small ones.
	big := strings.Repeat("x", 100<<10) + "\n"
	for _, msg := range []string{"hello\n", big, "again\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("echo of %d bytes: %d bytes %v", len(msg), len(got), err)
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("closing the server's end did not close the job's side")
	}
	if _, err := DialPort(ctx, noDialer{}, "j", 1); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a backend without DialPort: %v", err)
	}
	if _, err := DialPort(ctx, sup, "job-s", 70000); err == nil || !strings.Contains(err.Error(), strconv.Itoa(70000)) {
		t.Fatalf("dial of port 70000: %v", err)
	}
}

// noDialer is a Backend without PortDialer.
type noDialer struct{ Backend }
