package e2e

import (
	"bufio"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkRunHelloEmbedded measures what a user waits for with
// `gpud run testdata/hello.yml` and no server: process start, the embedded
// server and local agent starting on the state under GPUD_HOME (kept
// between iterations, as on a user's machine), plan, submit, schedule,
// the process runtime running the task, its logs and exit. It reports the
// time to the task's first output line and to gpud's exit.
func BenchmarkRunHelloEmbedded(b *testing.B) {
	c := newCLI(b)
	ctx := timeout(b, 10*time.Minute)
	var firsts, walls []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		cmd := exec.CommandContext(ctx, gpudBin, "run", "testdata/hello.yml")
		cmd.Dir, cmd.Env = repo, c.env
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var lines []string
		for sc.Scan() {
			if len(lines) == 0 {
				firsts = append(firsts, time.Since(start))
			}
			lines = append(lines, sc.Text())
		}
		if err := cmd.Wait(); err != nil || len(lines) == 0 || !strings.Contains(lines[0], "hello from gpud run hello") {
			b.Fatalf("gpud run: %v, output %q", err, lines)
		}
		walls = append(walls, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(p50(firsts).Milliseconds()), "p50-first-line-ms")
	b.ReportMetric(float64(p50(walls).Milliseconds()), "p50-exit-ms")
	b.ReportMetric(0, "ns/op")
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
