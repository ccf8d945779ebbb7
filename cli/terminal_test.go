package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// warnArgs make gpud log one warning (a token on the command line) and
// stop with a usage error before it starts anything.
var warnArgs = []string{"gpud", "agent", "--token", "secret", "--data-dir", "unused", "--job-retention", "0s"}

const warning = "--token on the command line is visible"

// TestLogColoursOnlyOnATerminal runs gpud's real logger setup with stderr
// a file, a terminal (a pty), and a terminal with NO_COLOR set: only the
// terminal without NO_COLOR gets ANSI colour codes.
func TestLogColoursOnlyOnATerminal(t *testing.T) {
	t.Setenv("GPUD_AGENT_TOKEN", "")
	t.Run("file", func(t *testing.T) {
		t.Setenv("NO_COLOR", "")
		f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if code := run(warnArgs, io.Discard, f); code != exitUsage {
			t.Fatalf("exit %d, want %d", code, exitUsage)
		}
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), warning) || bytes.Contains(b, []byte("\x1b[")) {
			t.Fatalf("stderr to a file: %q, want the warning without escape codes", b)
		}
	})
	for _, tt := range []struct {
		name, noColor string
		colours       bool
	}{{"terminal", "", true}, {"terminal with NO_COLOR", "1", false}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", tt.noColor)
			out := onTerminal(t, func(tty *os.File) {
				if code := run(warnArgs, io.Discard, tty); code != exitUsage {
					t.Errorf("exit %d, want %d", code, exitUsage)
				}
			})
			if !strings.Contains(out, warning) || strings.Contains(out, "\x1b[") != tt.colours {
				t.Fatalf("stderr on a terminal (NO_COLOR=%q): %q; want the warning, colours %v", tt.noColor, out, tt.colours)
			}
		})
	}
}

// onTerminal calls f with a pty's terminal end and returns what f wrote.
func onTerminal(t *testing.T, f func(tty *os.File)) string {
	t.Helper()
	ptm, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptm.Close()
	var out bytes.Buffer
	read := make(chan struct{})
	go func() { defer close(read); _, _ = io.Copy(&out, ptm) }() // ends with EIO once tty closes
	f(tty)
	tty.Close()
	<-read
	return out.String()
}
