package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/api"
)

// statusPoll is how often the status line asks the server while a run
// waits to start, runningPoll once it runs without output yet; the polls
// only feed the display, never the run.
const (
	statusPoll  = 200 * time.Millisecond
	runningPoll = time.Second
)

// follow shows the run's status until its output starts, streams its logs
// until it finishes and returns an error carrying its exit code.
func (s *runSession) follow(ctx context.Context, name string) error {
	sigs, stopSigs := interrupts()
	defer stopSigs()
	logCtx, cancelLogs := context.WithCancel(ctx)
	defer cancelLogs()

	line := &statusLine{w: s.errw, tty: stderrIsTerminal(), run: name, since: time.Now()}
	statusCtx, stopStatus := context.WithCancel(ctx)
	statusDone := make(chan struct{})
	go func() { defer close(statusDone); s.watchStatus(statusCtx, name, line) }()
	var once sync.Once
	endStatus := func() { once.Do(func() { stopStatus(); <-statusDone; line.clear() }) }
	defer endStatus()

	logsDone := make(chan error, 1)
	go func() {
		logsDone <- s.followAttempts(logCtx, name, func(e api.LogEntry) error {
			endStatus()
			writeLogLine(s.out, s.errw, e)
			return nil
		})
	}()
	for {
		select {
		case err := <-logsDone:
			endStatus()
			if err != nil {
				return fmt.Errorf("follow the logs of %s: %w", name, err)
			}
			return s.finish(ctx, name)
		case <-sigs:
			endStatus()
			switch s.interrupted(ctx, name, sigs) {
			case leaveNow:
				return exitWith(exitInterrupted, "")
			case detach:
				fmt.Fprintf(s.errw, "detached; run %s keeps running — gpud logs -f %s, gpud stop %s\n", name, name, name)
				return nil
			}
		}
	}
}

// interruptChoice is what the user wants after Ctrl-C.
type interruptChoice int

const (
	keepFollowing interruptChoice = iota // the run is being stopped, or was kept
	detach                               // leave the run running and exit 0
	leaveNow                             // a second Ctrl-C: exit 130 at once
)

// interrupted handles one Ctrl-C: on a terminal it asks whether to stop the
// run; without one it stops the run. A second Ctrl-C leaves at once. The
// embedded server dies with this process, so there "no" keeps following
// instead of detaching.
func (s *runSession) interrupted(ctx context.Context, name string, sigs <-chan os.Signal) interruptChoice {
	stop := true
	if stdinIsTerminal() {
		fmt.Fprintf(s.errw, "\nStop the run %s? [y/n] ", name)
		answer := make(chan string, 1)
		go func() {
			l, _ := bufio.NewReader(os.Stdin).ReadString('\n')
			answer <- strings.ToLower(strings.TrimSpace(l))
		}()
		select {
		case a := <-answer:
			stop = a == "y" || a == "yes"
		case <-sigs:
			return leaveNow
		}
	}
	if !stop {
		if s.embedded {
			fmt.Fprintf(s.errw, "run %s keeps running\n", name)
			return keepFollowing
		}
		return detach
	}
	fmt.Fprintf(s.errw, "stopping run %s (Ctrl-C again to leave without waiting)\n", name)
	done := make(chan error, 1)
	go func() { _, err := s.client.StopRun(ctx, s.project, name, false); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(s.errw, "gpud: stop %s: %v\n", name, err)
		}
		return keepFollowing
	case <-sigs:
		return leaveNow
	}
}

// watchStatus shows the run's status (the first job's, which has pulling)
// and why it waits, until ctx ends or the run finishes.
func (s *runSession) watchStatus(ctx context.Context, name string, line *statusLine) {
	for {
		every := statusPoll
		if run, err := s.client.GetRun(ctx, s.project, name); err == nil {
			status, why := run.Status, run.WhyPending
			if len(run.Jobs) > 0 && !run.Finished() {
				status = run.Jobs[0].Status
				if run.Jobs[0].WhyPending != "" {
					why = run.Jobs[0].WhyPending
				}
			}
			line.show(status, why)
			if run.Finished() {
				return
			}
			if status == "running" {
				every = runningPoll // only the elapsed time still changes
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// finishWait bounds how long gpud run waits for the run's final status
// after its logs ended (the server records it right after the last job).
const finishWait = 30 * time.Second

// finish reads the run's final status and returns its exit code as an
// error for the process (nil for 0).
func (s *runSession) finish(ctx context.Context, name string) error {
	deadline := time.Now().Add(finishWait)
	for {
		run, err := s.client.GetRun(ctx, s.project, name)
		if err != nil {
			return fmt.Errorf("read the status of %s: %w", name, err)
		}
		if code, ok := runExitCode(run); ok {
			if code == 0 {
				return nil
			}
			if code < 0 || code > 255 {
				code = 1 // a job that never started (-1) has no code of its own
			}
			return exitWith(code, fmt.Sprintf("gpud: run %s %s: %s", name, run.Status, orDash(run.Reason)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s: its logs ended but it is still %s", name, run.Status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(statusPoll):
		}
	}
}

// runExitCode returns the code gpud run exits with once the run finished:
// the first job's exit code, else 0 for done and 1 for other ends.
func runExitCode(run api.Run) (int, bool) {
	if !run.Finished() {
		return 0, false
	}
	switch {
	case run.ExitCode != nil:
		return *run.ExitCode, true
	case len(run.Jobs) > 0 && run.Jobs[0].ExitCode != nil:
		return *run.Jobs[0].ExitCode, true
	case run.Status == "done":
		return 0, true
	}
	return 1, true
}

// statusLine shows a run's status while it waits: redrawn in place on a
// terminal, one line per change otherwise.
type statusLine struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	run       string
	since     time.Time
	last      string
	drawnOnce bool
}

func (l *statusLine) show(status, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := status
	if why != "" {
		text += " — " + why
	}
	if l.tty {
		fmt.Fprintf(l.w, "\r\033[K%s: %s (%s)", l.run, text, time.Since(l.since).Truncate(time.Second))
		l.drawnOnce = true
		return
	}
	if text != l.last {
		fmt.Fprintf(l.w, "%s: %s\n", l.run, text)
		l.last = text
	}
}

// clear removes the redrawn line so the job's output starts on a clean line.
func (l *statusLine) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.drawnOnce {
		fmt.Fprint(l.w, "\r\033[K")
	}
}
