package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"
)

// stdinIsTerminal reports whether questions can be asked on stdin.
func stdinIsTerminal() bool {
	return isatty.IsTerminal(os.Stdin.Fd()) || isatty.IsCygwinTerminal(os.Stdin.Fd())
}

// stderrIsTerminal reports whether a live status line can be redrawn.
func stderrIsTerminal() bool { return isatty.IsTerminal(os.Stderr.Fd()) }

// colorTerminal reports whether output to w may carry ANSI colours: w is
// a terminal and NO_COLOR is unset or empty (no-color.org). A file, a
// pipe or any other writer gets plain text.
func colorTerminal(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" {
		return false
	}
	return isTerminal(w)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// ask prints question [y/n] and reads an answer from stdin.
func ask(w io.Writer, question string) bool {
	fmt.Fprintf(w, "%s [y/n] ", question)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// interrupts delivers SIGINT and SIGTERM until stop is called.
func interrupts() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}
