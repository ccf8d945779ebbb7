package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// gpud ps -w into a file or a pipe once wrote a terminal's clear-screen
// codes before every frame; now frames follow each other under a line
// with their time, and only a terminal gets the codes.
func TestWatchWritesNoTerminalCodesToAFile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	frames := 0
	err := watch(ctx, &out, time.Millisecond, func(_ context.Context, w io.Writer) error {
		frames++
		if frames == 2 {
			cancel()
		}
		_, err := io.WriteString(w, "NAME  STATUS\nr1    running\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Contains(s, "\033") {
		t.Fatalf("terminal codes in a file: %q", s)
	}
	if n := strings.Count(s, "--- "); n != 2 || strings.Count(s, "r1    running") != 2 {
		t.Fatalf("want 2 frames, each under its time line: %q", s)
	}
}
