// Package kubetest starts a real, small Kubernetes control plane for
// tests: Debian's etcd, a kube-apiserver built from k8s.io/kubernetes by
// .ci/kube.sh, and KWOK simulating nodes (fake GPU nodes) and pod
// lifecycles, plus a stand-in for kube-scheduler that binds pending pods
// to nodes. Everything listens on loopback and stops with Stop.
//
// It owns only test infrastructure; it must not import daemon, store or
// sched, nor any gpud backend.
package kubetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// K8sVersion is the kube-apiserver release .ci/kube.sh builds (keep the
// two in step, and with k8s.io/client-go's v0.Y.Z in go.mod).
const K8sVersion = "v1.37.2"

// LimitedUser is a user of the cluster in no group; LimitedToken is its
// bearer token.
const (
	LimitedUser  = "gpud-backend"
	LimitedToken = "kubetest-limited-token"
)

// Binaries are the programs a cluster runs.
type Binaries struct {
	Etcd, APIServer, Kwok string
}

// FindBinaries locates etcd (PATH, /usr/bin), kube-apiserver and kwok
// (GPUD_KUBE_BIN, else the cache dir .ci/kube.sh builds them into). The
// error names what is missing and how to build it.
func FindBinaries() (Binaries, error) {
	dir := os.Getenv("GPUD_KUBE_BIN")
	if dir == "" {
		cache := os.Getenv("GPUD_CI_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "gpud-ci")
		}
		dir = filepath.Join(cache, "kube", K8sVersion, "bin")
	}
	var b Binaries
	var missing []string
	if p, err := exec.LookPath("etcd"); err == nil {
		b.Etcd = p
	} else if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		b.Etcd = "/usr/bin/etcd"
	} else {
		missing = append(missing, "etcd (apt-get install etcd-server)")
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"kube-apiserver", &b.APIServer}, {"kwok", &b.Kwok}} {
		p := filepath.Join(dir, f.name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			*f.dst = p
		} else {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("kubetest: missing %s (run bash .ci/kube.sh to build them)", strings.Join(missing, ", "))
	}
	return b, nil
}

// Cluster is a running control plane.
type Cluster struct {
	// Kubeconfig is an admin kubeconfig file (token auth, CA pinned).
	Kubeconfig string
	// LimitedKubeconfig authenticates as LimitedUser, who has no rights
	// until a test binds some (RBAC).
	LimitedKubeconfig string
	// Client is an admin client.
	Client kubernetes.Interface
	// Host is the API server's URL.
	Host string
	dir  string

	mu     sync.Mutex
	procs  []*proc
	cancel context.CancelFunc
	done   chan struct{}
	nodes  []string
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) start(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(c.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// tail is the end of a process's log, for an error message.
func (p *proc) tail() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

// waitHTTP polls url until it answers 200, the process exits or timeout.
func waitHTTP(p *proc, client *http.Client, url, token string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("kubetest: %s exited; its log ends:\n%s", p.name, p.tail())
		default:
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("kubetest: %s did not answer %s within %s (last: %s); its log ends:\n%s", p.name, url, timeout, last, p.tail())
}

// Options shape a cluster.
type Options struct {
	// LogsFile, when set, is a CRI-format log file KWOK serves as every
	// pod's container log (through the pod log API).
	LogsFile string
	// ForwardPort and ForwardTo, when set, make KWOK's port-forward
	// (pods/portforward, as a kubelet serves it) of every pod's port
	// ForwardPort reach the loopback address ForwardTo (host:port): a
	// test's own server stands in for the containers KWOK does not run.
	ForwardPort int
	ForwardTo   string
}

// Start runs etcd, kube-apiserver, KWOK and the binder in a new temp
// directory. Stop ends them and removes it.
func Start(bins Binaries, opts Options) (_ *Cluster, err error) {
	dir, err := os.MkdirTemp("", "gpud-kubetest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, done: make(chan struct{})}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	etcdClient, etcdPeer, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := c.start("etcd", bins.Etcd,
		"--name=kubetest", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL, "--log-level=warn")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(etcd, http.DefaultClient, etcdURL+"/health", "", 60*time.Second); err != nil {
		return nil, err
	}
	p, err := newPKI(dir)
	if err != nil {
		return nil, err
	}
	token := "kubetest-admin-token"
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",admin,admin,system:masters\n"+LimitedToken+","+LimitedUser+","+LimitedUser+"\n"), 0o600); err != nil {
		return nil, err
	}
	c.Host = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	api, err := c.start("kube-apiserver", bins.APIServer,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		// A loopback address cannot be the kubernetes Service's endpoint.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+p.certFile, "--tls-private-key-file="+p.keyFile,
		"--client-ca-file="+p.caFile,
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p.saPubFile, "--service-account-signing-key-file="+p.saKeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No kube-controller-manager makes the default service
		// accounts; the backend's pods mount no token anyway.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		// As kubeadm's clusters do: privileged pods are the backend's
		// choice (its allow_privileged), which the tests exercise.
		"--allow-privileged=true",
		// Debian's etcd 3.4 lacks the watch progress requests streaming
		// lists need; with WatchList off the server tells clients (KWOK)
		// to list and watch, instead of failing each watch while they
		// back off for up to minutes.
		"--feature-gates=WatchList=false",
		"--kubelet-certificate-authority="+p.caFile,
		"--kubelet-client-certificate="+p.clientCert, "--kubelet-client-key="+p.clientKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--profiling=false", "--v=1")
	if err != nil {
		return nil, err
	}
	hc, err := httpsClient(p.caPEM)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(api, hc, c.Host+"/readyz", token, 3*time.Minute); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.Host, p.caPEM, token); err != nil {
		return nil, err
	}
	c.LimitedKubeconfig = filepath.Join(dir, "limited.kubeconfig")
	if err := writeKubeconfig(c.LimitedKubeconfig, c.Host, p.caPEM, LimitedToken); err != nil {
		return nil, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, err
	}
	kwokCfg := filepath.Join(dir, "kwok.yaml")
	if err := writeKwokConfig(kwokCfg, opts); err != nil {
		return nil, err
	}
	kwok, err := c.start("kwok", bins.Kwok,
		"--kubeconfig="+c.Kubeconfig, "--config="+kwokCfg,
		"--manage-nodes-with-annotation-selector="+ManagedAnnotation+"=fake",
		"--node-ip=127.0.0.1", "--node-port="+strconv.Itoa(kwokPort),
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
		"--tls-cert-file="+p.certFile, "--tls-private-key-file="+p.keyFile,
		"--cidr=10.244.0.0/16")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(kwok, hc, "https://127.0.0.1:"+strconv.Itoa(kwokPort)+"/healthz", "", time.Minute); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.bind(ctx)
	}()
	return c, nil
}

// Stop ends the binder, KWOK, the API server and etcd (SIGTERM, then
// SIGKILL after 10s) and removes the cluster's directory.
func (c *Cluster) Stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = os.RemoveAll(c.dir)
}

// Logs returns the end of every component's log, for a failing test.
func (c *Cluster) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", p.name, p.tail())
	}
	return b.String()
}
