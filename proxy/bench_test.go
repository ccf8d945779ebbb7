package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// benchConcurrency is the number of clients of the throughput runs;
// benchSlice the requests each target takes in turn.
const (
	benchConcurrency = 32
	benchSlice       = 500
)

// benchTarget is one way to the backend: direct, or through a proxy.
type benchTarget struct {
	name, url string
	client    *http.Client
	lat       latencies     // latency run
	tput      latencies     // throughput run, every request
	busy      time.Duration // throughput run, wall time
	done      int
}

// BenchmarkGatewayVsNginxCaddy puts the gateway, Debian's nginx and caddy
// side by side, each in its own process as a plain reverse proxy (keep-
// alive to the backend) in front of the same backend process, on
// loopback. The targets take turns within each run, request by request
// (latency) or slice by slice (throughput), so that a machine shared with
// other work slows them alike:
//
//   - latency: one client, b.N sequential requests per target;
//     <target>-p50-µs and -p99-µs, and for the proxies -added-p50-µs and
//     -added-p99-µs over the direct requests of the same run.
//   - throughput: benchConcurrency clients, b.N requests per target;
//     <target>-req/s and its -p50-µs, -p99-µs under that load.
//
// Target "floor" is floorProxy (bench_floor_test.go), the least any Go
// proxy on net/http's server does: gateway − floor is what the
// gateway's own code adds. nginx or caddy missing: it is left out with a
// message. Run it with
// `just bench-gateway`; docs/BENCHMARKS.md has the figures.
// GPUD_PROXY_BENCH_GATEWAY_PROCS sets the gateway process's GOMAXPROCS
// (default: the machine's cores), GPUD_PROXY_BENCH_CPUPROFILE a file for
// its CPU profile.
func BenchmarkGatewayVsNginxCaddy(b *testing.B) {
	backend := startBenchProcess(b, benchBackendEnv+"=1")
	addrs := [][2]string{{"direct", backend}, {"gateway", startBenchProcess(b, benchGatewayEnv+"="+backend)},
		{"floor", startBenchProcess(b, benchFloorEnv+"="+backend)}}
	for _, start := range []struct {
		name string
		fn   func(testing.TB, string) (string, error)
	}{{"nginx", startNginx}, {"caddy", startCaddy}} {
		addr, err := start.fn(b, backend)
		if err != nil {
			b.Logf("%s: left out: %v", start.name, err)
			continue
		}
		addrs = append(addrs, [2]string{start.name, addr})
	}
	targets := func() []*benchTarget {
		var ts []*benchTarget
		for _, a := range addrs {
			ts = append(ts, &benchTarget{name: a[0], url: "http://" + a[1] + "/v1/health", client: benchClient()})
		}
		return ts
	}
	b.Run("latency", func(b *testing.B) {
		ts := targets()
		for _, t := range ts {
			defer t.client.CloseIdleConnections()
			for range 200 { // warm the pools
				benchGet(b, t.client, t.url)
			}
		}
		b.ResetTimer()
		for i := range b.N {
			for k := range ts {
				t := ts[(i+k)%len(ts)] // each target first in turn
				t0 := time.Now()
				benchGet(b, t.client, t.url)
				t.lat = append(t.lat, time.Since(t0))
			}
		}
		b.StopTimer()
		direct := ts[0].lat
		for _, t := range ts {
			b.ReportMetric(micros(t.lat.percentile(50)), t.name+"-p50-µs")
			b.ReportMetric(micros(t.lat.percentile(99)), t.name+"-p99-µs")
			if t != ts[0] {
				b.ReportMetric(micros(t.lat.percentile(50)-direct.percentile(50)), t.name+"-added-p50-µs")
				b.ReportMetric(micros(t.lat.percentile(99)-direct.percentile(99)), t.name+"-added-p99-µs")
			}
		}
	})
	b.Run("throughput", func(b *testing.B) {
		ts := targets()
		for _, t := range ts {
			defer t.client.CloseIdleConnections()
			t.run(b, benchConcurrency) // open the connections
			t.tput, t.busy, t.done = nil, 0, 0
		}
		b.ResetTimer()
		for left := b.N; left > 0; left -= benchSlice {
			for _, t := range ts {
				t.run(b, min(left, benchSlice))
			}
		}
		b.StopTimer()
		for _, t := range ts {
			b.ReportMetric(float64(t.done)/t.busy.Seconds(), t.name+"-req/s")
			b.ReportMetric(micros(t.tput.percentile(50)), t.name+"-p50-µs")
			b.ReportMetric(micros(t.tput.percentile(99)), t.name+"-p99-µs")
		}
	})
}

// run sends n requests to t from benchConcurrency clients at once.
func (t *benchTarget) run(b *testing.B, n int) {
	var next atomic.Int64
	per := make([]latencies, benchConcurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				benchGet(b, t.client, t.url)
				per[w] = append(per[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	t.busy += time.Since(start)
	t.done += n
	t.tput = append(t.tput, slices.Concat(per...)...)
}

type latencies []time.Duration

// percentile sorts l (once) and returns its p-th percentile.
func (l latencies) percentile(p int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	if !slices.IsSorted(l) {
		slices.Sort(l)
	}
	return l[min(len(l)-1, len(l)*p/100)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchConcurrency, DisableCompression: true}}
}

// benchGet sends one GET for the benchmark's host and reads the answer.
func benchGet(b *testing.B, client *http.Client, url string) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Host = benchHost
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != 13 {
		b.Fatalf("GET %s: %d, %d bytes, %v", url, resp.StatusCode, n, err)
	}
}

// startBenchProcess runs the test binary as a benchmark process (see
// TestMain) with env and returns the address it serves.
func startBenchProcess(tb testing.TB, env string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	if p := os.Getenv(benchProcsEnv); p != "" && strings.HasPrefix(env, benchGatewayEnv) {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+p)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// SIGTERM first: a gateway writing a profile finishes it.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("benchmark process %s: %v", env, err)
	}
	return strings.TrimSpace(line)
}

// startNginx runs Debian's nginx as a reverse proxy to backend, with
// keep-alive upstream connections, one worker per core and no access
// log, and returns its address. It sends the backend the X-Forwarded-*
// headers, as the gateway and caddy do, so that the three do the same
// work.
func startNginx(tb testing.TB, backend string) (string, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, serr := os.Stat(bin); serr != nil {
			return "", fmt.Errorf("no nginx binary: %w", err)
		}
	}
	dir := tb.TempDir()
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`daemon off;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream backend { server %[2]s; keepalive 128; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-Proto $scheme;
    }
  }
}
`, dir, backend, addr)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		return "", err
	}
	return addr, startProxyProcess(tb, exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf")), addr)
}

// startCaddy runs Debian's caddy as a reverse proxy to backend and
// returns its address.
func startCaddy(tb testing.TB, backend string) (string, error) {
	bin, err := exec.LookPath("caddy")
	if err != nil {
		return "", fmt.Errorf("no caddy binary: %w", err)
	}
	dir := tb.TempDir()
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system %[1]s/data
	log {
		output discard
	}
}
:%[3]s {
	bind 127.0.0.1
	reverse_proxy %[2]s
}
`, dir, backend, port)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	return addr, startProxyProcess(tb, cmd, addr)
}

// startProxyProcess starts cmd and waits until addr answers for the
// benchmark's host.
func startProxyProcess(tb testing.TB, cmd *exec.Cmd, addr string) error {
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group: nginx's workers go with their master.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	client := benchClient()
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
		if err != nil {
			return err
		}
		req.Host = benchHost
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer on %s within 20s: %s", filepath.Base(cmd.Path), addr, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
