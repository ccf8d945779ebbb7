package cli

import (
	"strings"
	"testing"
)

// TestServeFairShareFlags: gpud serve offers the time-based fair share
// settings with their defaults (one week, 24h, 1), and refuses a window
// that is not positive or a negative half-life or k as a usage error
// before it starts anything.
func TestServeFairShareFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--no-local-agent"}
	testCLICases(t, []cliCase{
		{name: "help shows the defaults", args: []string{"serve", "--help"}, code: 0,
			stdout: "--fair-share-window value", check: func(t *testing.T, out string) {
				for _, want := range []string{"(default: 168h0m0s)", "--fair-share-half-life value", "(default: 24h0m0s)", "--fair-share-k value"} {
					if !strings.Contains(out, want) {
						t.Errorf("serve --help lacks %q:\n%s", want, out)
					}
				}
			}},
		{name: "a zero window", args: append(base, "--fair-share-window", "0s"), code: exitUsage, stderr: "--fair-share-window must be positive"},
		{name: "a negative half-life", args: append(base, "--fair-share-half-life", "-1h"), code: exitUsage, stderr: "--fair-share-half-life"},
		{name: "a negative k", args: append(base, "--fair-share-k", "-0.5"), code: exitUsage, stderr: "--fair-share-k"},
	})
}
