package runtime_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// TestRuntimesReturnLongLinesWhole: in both runtimes a 100,000-byte and a
// 3,000,000-byte line come back as single whole entries, each stream's
// lines intact around them. Before, the process runtime cut every 64 KiB
// without a mark and Docker's reader left the engine's timestamp prefix of
// each 16 KiB message inside the line.
func TestRuntimesReturnLongLinesWhole(t *testing.T) {
	mid, big := strings.Repeat("a", 100_000), strings.Repeat("b", 3_000_000)
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rt := tg.open(t, t.TempDir(), fmt.Sprintf("t%d", time.Now().UnixNano()))
			defer rt.Close()
			h := started(t, rt, jobSpec(t,
				`busybox head -c 100000 /dev/zero | busybox tr '\0' a; echo`,
				"echo between >&2",
				`busybox head -c 3000000 /dev/zero | busybox tr '\0' b; echo`,
				"echo end"))
			if e := wait(t, rt, h); e.Code != 0 {
				t.Fatalf("exit %+v", e)
			}
			for _, follow := range []bool{false, true} {
				got := map[api.LogStream][]string{}
				for _, e := range logs(t, rt, h, runtime.LogOptions{Stdout: true, Stderr: true, Follow: follow}) {
					if e.Partial {
						t.Fatalf("a %d-byte piece of a line under api.MaxLogLine", len(e.Line))
					}
					got[e.Stream] = append(got[e.Stream], e.Line)
				}
				out := got[api.LogStdout]
				if len(out) != 3 || out[0] != mid || out[1] != big || out[2] != "end" {
					sizes := make([]int, len(out))
					for i, l := range out {
						sizes[i] = len(l)
					}
					t.Fatalf("follow %v: stdout lines of %v bytes, want [100000 3000000 3]", follow, sizes)
				}
				if e := got[api.LogStderr]; len(e) != 1 || e[0] != "between" {
					t.Fatalf("follow %v: stderr %q", follow, e)
				}
			}
		})
	}
}
