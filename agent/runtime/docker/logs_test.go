package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// frame encodes one engine log frame: stream, timestamp prefix, payload.
func frame(stream byte, ts time.Time, payload string) []byte {
	body := ts.UTC().Format(time.RFC3339Nano) + " " + payload
	hdr := make([]byte, 8, 8+len(body))
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(body)))
	return append(hdr, body...)
}

// demuxed runs demuxLogs over a stream and returns the lines of each
// stream, pieces joined by Partial.
func demuxed(t *testing.T, r io.Reader) (map[api.LogStream][]string, error) {
	got := map[api.LogStream][]string{}
	open := map[api.LogStream]*strings.Builder{}
	err := demuxLogs(r, time.Time{}, time.Now, func(e api.JobLogEntry) error {
		b := open[e.Stream]
		if b == nil {
			b = &strings.Builder{}
			open[e.Stream] = b
		}
		b.WriteString(e.Line)
		if !e.Partial {
			got[e.Stream] = append(got[e.Stream], b.String())
			b.Reset()
		}
		return nil
	})
	return got, err
}

// TestEngineMessagesOfALongLineJoinWithoutTheirTimestamps: the engine
// keeps a line over 16 KiB as several messages, each framed with its own
// timestamp prefix; the line comes back whole and without the timestamps
// the old reader left inside it, while a stderr line between its messages
// stays a line of its own.
func TestEngineMessagesOfALongLineJoinWithoutTheirTimestamps(t *testing.T) {
	ts := time.Date(2026, 12, 3, 8, 0, 0, 123456789, time.UTC)
	long := strings.Repeat("a", 40000)
	var stream []byte
	stream = append(stream, frame(1, ts, long[:16384])...)
	stream = append(stream, frame(2, ts.Add(time.Millisecond), "an error\n")...)
	stream = append(stream, frame(1, ts, long[16384:32768])...)
	stream = append(stream, frame(1, ts, long[32768:]+"\n")...)
	stream = append(stream, frame(1, ts.Add(time.Second), "short\n")...)
	got, err := demuxed(t, bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if o := got[api.LogStdout]; len(o) != 2 || o[0] != long || o[1] != "short" {
		t.Fatalf("stdout: %d lines (first %d bytes), want the 40,000-byte line and short", len(o), len(o[0]))
	}
	if e := got[api.LogStderr]; len(e) != 1 || e[0] != "an error" {
		t.Fatalf("stderr: %q", e)
	}
	if _, err := demuxed(t, bytes.NewReader(stream[:len(stream)-3])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a stream cut inside a frame: %v, want io.ErrUnexpectedEOF", err)
	}
}

// FuzzDemuxLogs: lines of any bytes, cut into engine messages of any sizes
// and spread over stdout and stderr, come back as exactly those lines per
// stream; arbitrary bytes as a stream never panic.
func FuzzDemuxLogs(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc\n"), []byte{3, 1}, []byte{1, 2})
	f.Add([]byte(strings.Repeat("x", 500)+"\ny\n"), []byte{100}, []byte{1})
	f.Add([]byte("2026-01-01T00:00:00Z not a frame"), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, text, cuts, streams []byte) {
		// Arbitrary bytes as an engine stream: an error or entries, never a panic.
		if _, err := demuxed(t, bytes.NewReader(text)); err != nil && len(text) == 0 {
			t.Fatalf("empty stream: %v", err)
		}
		if len(text) == 0 || text[len(text)-1] != '\n' {
			text = append(text, '\n')
		}
		lines := strings.SplitAfter(string(text[:len(text)-1]), "\n")
		lines[len(lines)-1] += "\n"
		want := map[api.LogStream][]string{}
		var stream []byte
		ts := time.Unix(1700000000, 0)
		for i, l := range lines {
			s, name := byte(1), api.LogStdout
			if len(streams) > 0 && streams[i%len(streams)]%2 == 0 {
				s, name = 2, api.LogStderr
			}
			want[name] = append(want[name], strings.TrimSuffix(l, "\n"))
			for j := 0; len(l) > 0; j++ {
				n := len(l)
				if len(cuts) > 0 {
					n = min(n, int(cuts[(i+j)%len(cuts)])+1)
				}
				stream = append(stream, frame(s, ts, l[:n])...)
				l = l[n:]
			}
			ts = ts.Add(time.Microsecond)
		}
		got, err := demuxed(t, bytes.NewReader(stream))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []api.LogStream{api.LogStdout, api.LogStderr} {
			if strings.Join(got[name], "\n") != strings.Join(want[name], "\n") || len(got[name]) != len(want[name]) {
				t.Fatalf("%s: %q, want %q", name, got[name], want[name])
			}
		}
	})
}
