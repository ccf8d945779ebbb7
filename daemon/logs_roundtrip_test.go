package daemon

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// randomLine returns n bytes of valid UTF-8 without a newline, mixing
// what JSON escapes (quotes, backslashes, control bytes, <>&, U+2028)
// with ASCII and two- to four-byte characters.
func randomLine(rng *rand.Rand, n int) string {
	alphabet := []rune{'a', 'z', ' ', '"', '\\', '\t', '\r', 0, 0x1b, '<', '>', '&', 'é', '€', 0x2028, '𝄞', '\uFFFD'}
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		r := alphabet[rng.IntN(len(alphabet))]
		if rng.IntN(4) > 0 {
			r = rune('a' + rng.IntN(26))
		}
		if b.Len()+utf8.RuneLen(r) > n {
			r = 'x'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestLogRoundTripIsByteIdentical is the log round-trip property: lines of
// random length (0 to several MiB) and content, from two streams written
// interleaved in random-sized writes through the agent's LineWriter (with
// pieces cut at 1 MiB so the Partial path is taken), kept by the server's
// own keepLogEntry in the real store, and read back through the real HTTP
// handler, rejoin into exactly the lines written, byte for byte. Resuming
// at the offset of any entry yields exactly the entries after it;
// resuming at any byte offset yields the entries that start at or after
// it. GPUD_LOG_SEED replays a seed.
func TestLogRoundTripIsByteIdentical(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GPUD_LOG_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("GPUD_LOG_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process"})
	job := ts.finishedJob("roundtrip")

	// Lines: mostly short, some medium, a few of several MiB; 16 MiB in all.
	want := map[api.LogStream][]string{}
	pending := map[api.LogStream][]byte{}
	streams := []api.LogStream{api.LogStdout, api.LogStderr}
	for total := 0; total < 16<<20; {
		var n int
		switch r := rng.IntN(100); {
		case r < 3:
			n = 1<<20 + rng.IntN(4<<20)
		case r < 20:
			n = rng.IntN(200 << 10)
		default:
			n = rng.IntN(300)
		}
		s := streams[rng.IntN(2)]
		l := randomLine(rng, n)
		want[s] = append(want[s], l)
		pending[s] = append(append(pending[s], l...), '\n')
		total += n + 1
	}
	writers := map[api.LogStream]*runtime.LineWriter{}
	for _, s := range streams {
		writers[s] = &runtime.LineWriter{Stream: s, Max: 1 << 20, Now: time.Now, Emit: func(e api.JobLogEntry) error {
			return ts.dispatcher.keepLogEntry(job, e)
		}}
	}
	for len(pending[api.LogStdout])+len(pending[api.LogStderr]) > 0 {
		s := streams[rng.IntN(2)]
		n := min(len(pending[s]), 1+rng.IntN(300<<10))
		if _, err := writers[s].Write(pending[s][:n]); err != nil {
			t.Fatal(err)
		}
		pending[s] = pending[s][n:]
	}

	all := ts.getLogs("roundtrip", "job="+job)
	got := joinLines(t, all)
	for _, s := range streams {
		if len(got[s]) != len(want[s]) {
			t.Fatalf("%s: %d lines, want %d", s, len(got[s]), len(want[s]))
		}
		for i := range want[s] {
			if got[s][i] != want[s][i] {
				t.Fatalf("%s line %d: %d bytes back, %d written", s, i, len(got[s][i]), len(want[s][i]))
			}
		}
	}
	if _, end, _, _ := ts.store.Logs().Read(job, 1<<62, 1); all[len(all)-1].Offset != end {
		t.Fatalf("the last entry's offset is %d, the log ends at %d", all[len(all)-1].Offset, end)
	}

	same := func(how string, got, want []api.LogEntry) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d entries, want %d", how, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: entry %d is {%d %s %d bytes}, want {%d %s %d bytes}", how, i,
					got[i].Offset, got[i].Stream, len(got[i].Line), want[i].Offset, want[i].Stream, len(want[i].Line))
			}
		}
	}
	for range 6 {
		k := rng.IntN(len(all))
		same(fmt.Sprintf("resumed after entry %d", k), ts.getLogs("roundtrip", fmt.Sprintf("job=%s&offset=%d", job, all[k].Offset)), all[k+1:])
	}
	for range 6 {
		at := rng.Int64N(all[len(all)-1].Offset + 1)
		first := 0 // the first entry that starts at or after at
		for first < len(all) && (first == 0 && at > 0 || first > 0 && all[first-1].Offset < at) {
			first++
		}
		same(fmt.Sprintf("resumed at byte %d", at), ts.getLogs("roundtrip", fmt.Sprintf("job=%s&offset=%d", job, at)), all[first:])
	}
}
