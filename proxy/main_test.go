package proxy

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"
)

// Environment variables that make the test binary a process of the
// benchmark (bench_test.go) instead of running tests: the replica it
// proxies to, or a gateway in front of it, each in its own process like
// nginx and caddy.
const (
	benchBackendEnv = "GPUD_PROXY_BENCH_BACKEND" // any value: serve the backend
	benchGatewayEnv = "GPUD_PROXY_BENCH_GATEWAY" // host:port of the backend: serve a gateway to it
	// benchProfileEnv, set for the benchmark, makes its gateway process
	// write a CPU profile to that file (go tool pprof reads it).
	benchProfileEnv = "GPUD_PROXY_BENCH_CPUPROFILE"
	// benchProcsEnv, set for the benchmark, is its gateway process's
	// GOMAXPROCS.
	benchProcsEnv = "GPUD_PROXY_BENCH_GATEWAY_PROCS"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(benchBackendEnv) != "":
		os.Exit(serveBench(benchBackend()))
	case os.Getenv(benchFloorEnv) != "":
		os.Exit(serveBench(floorProxy(os.Getenv(benchFloorEnv))))
	case os.Getenv(benchGatewayEnv) != "":
		h, err := New(newResolver(&Service{Project: "bench", Run: "svc", Hosts: []string{benchHost}, MinReplicas: 1,
			Replicas: []Replica{{ID: "backend", Addr: os.Getenv(benchGatewayEnv)}}}), Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if path := os.Getenv(benchProfileEnv); path != "" {
			stop, err := profileUntilTerm(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			go func() { stop(); os.Exit(0) }()
		}
		os.Exit(serveBenchFront(h))
	}
	os.Exit(m.Run())
}

// benchHost is the host the benchmark's requests name.
const benchHost = "svc.bench.test"

// benchBackend answers every request with 13 bytes, as a small JSON
// answer of a model server's health or a short completion chunk.
func benchBackend() http.Handler {
	body := []byte("hello, world\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "13")
		_, _ = w.Write(body)
	})
}

// serveBench serves h on a free loopback port, printing the address on
// the first line of stdout, until the process is killed.
func serveBench(h http.Handler) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, srv.Serve(ln))
	return 1
}

// serveBenchFront serves h as the gateway's listeners do, on a Front
// (front.go) with gpud serve's server settings.
func serveBenchFront(h http.Handler) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	f := NewFront(&http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute})
	fmt.Fprintln(os.Stderr, f.Serve(ln))
	return 1
}

// profileUntilTerm starts a CPU profile into path; the returned function
// waits for SIGTERM and then writes the profile out.
func profileUntilTerm(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	return func() {
		<-term
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}, nil
}
