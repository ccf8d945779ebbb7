package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// handshakeFD is the descriptor on which the shim tells the agent that the
// job started (a child record) and then closes.
const handshakeFD = 3

// RunShim is the shim's main: it runs the job described by the launch the
// agent writes to its standard input, writes its output to dir/output.log
// and its exit to dir/exit.json, deletes the job's working directory once
// the job has ended, and returns the shim's own exit code. `gpud agent shim DIR` calls it; it is
// exported so test binaries can act as the shim too.
func RunShim(dir string) int {
	// Signals for the job reach its process group directly; the shim must
	// outlive them to record the exit. Notify (unlike Ignore) does not leak
	// into the child across exec.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()
	// The job must not inherit the handshake pipe (exec keeps descriptors
	// not marked close-on-exec).
	unix.CloseOnExec(handshakeFD)
	handshake := os.NewFile(handshakeFD, "handshake")
	exit, err := supervise(dir, os.Stdin, handshake)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpud shim %s: %v\n", dir, err)
		if handshake != nil {
			json.NewEncoder(handshake).Encode(child{Error: err.Error()})
			handshake.Close()
		}
		return 1
	}
	if err := writeJSON(filepath.Join(dir, fileExit), exit); err != nil {
		fmt.Fprintf(os.Stderr, "gpud shim %s: %v\n", dir, err)
		return 1
	}
	return 0
}

// supervise reads the launch from in, starts the job, reports it on the
// handshake, copies its output and waits for it.
func supervise(dir string, in io.Reader, handshake *os.File) (runtime.Exit, error) {
	var l launch
	if err := json.NewDecoder(in).Decode(&l); err != nil {
		return runtime.Exit{}, fmt.Errorf("read the launch from standard input: %w", err)
	}
	if l.WorkDir != "" {
		// The job's files go with it, whatever happens to the shim's run.
		defer func() {
			if err := os.RemoveAll(l.WorkDir); err != nil {
				fmt.Fprintf(os.Stderr, "gpud shim %s: remove working directory: %v\n", dir, err)
			}
		}()
	}
	out, err := os.OpenFile(filepath.Join(dir, fileOutput), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return runtime.Exit{}, err
	}
	defer out.Close()
	cg, err := newCgroup(l)
	if err != nil {
		return runtime.Exit{}, err
	}
	defer cg.remove()
	log := &outputLog{enc: json.NewEncoder(out)}
	cmd := exec.Command(l.Argv[0], l.Argv[1:]...)
	if p, err := lookPath(l.Argv[0], l.Env); err == nil {
		cmd.Path = p
	}
	cmd.Env, cmd.Dir = l.Env, l.Dir
	cmd.Stdout = &runtime.LineWriter{Stream: api.LogStdout, Emit: log.write, Now: time.Now}
	cmd.Stderr = &runtime.LineWriter{Stream: api.LogStderr, Emit: log.write, Now: time.Now}
	// Grandchildren that keep the output open do not hold up the exit.
	cmd.WaitDelay = time.Second
	attr := &syscall.SysProcAttr{Setpgid: true}
	if l.UID != nil {
		attr.Credential = &syscall.Credential{Uid: *l.UID, Gid: *l.UID}
		if l.GID != nil {
			attr.Credential.Gid = *l.GID
		}
	}
	cmd.SysProcAttr = attr
	if err := cg.start(cmd); err != nil {
		return runtime.Exit{}, fmt.Errorf("start %s: %w", l.Argv[0], err)
	}
	self, _ := readProcStat(os.Getpid())
	c := child{ShimPID: os.Getpid(), ShimStartTicks: self.startTicks, PID: cmd.Process.Pid, StartedAt: time.Now(), MemoryLimit: l.Memory}
	if err := writeJSON(filepath.Join(dir, fileChild), c); err != nil {
		cmd.Process.Kill()
		return runtime.Exit{}, err
	}
	if handshake != nil {
		json.NewEncoder(handshake).Encode(c)
		handshake.Close()
	}
	err = cmd.Wait()
	cmd.Stdout.(*runtime.LineWriter).Flush()
	cmd.Stderr.(*runtime.LineWriter).Flush()
	exit := runtime.Exit{FinishedAt: time.Now()}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return runtime.Exit{}, fmt.Errorf("wait: %w", err)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		exit.Code = 128 + int(ws.Signal())
		exit.Signal = unix.SignalName(ws.Signal())
	default:
		exit.Code = ws.ExitStatus()
	}
	exit.OOMKilled = cg.oomKilled()
	return exit, nil
}

// outputLog serialises both streams into one file, so lines keep the order
// in which the shim read them.
type outputLog struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *outputLog) write(e api.JobLogEntry) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.enc.Encode(e)
}

// lookPath resolves a command name against the job's PATH, not the shim's.
func lookPath(name string, env []string) (string, error) {
	if filepath.IsAbs(name) || filepath.Base(name) != name {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
