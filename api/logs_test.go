package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

// chunkReader returns its data in reads of the given sizes, in turn.
type chunkReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = int(r.sizes[r.i%len(r.sizes)]) + 1
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// TestReadLinesReturnsLongLinesWhole: lines far longer than the reader's
// buffer (and than bufio.Scanner's default 64 KiB, which the log readers
// used to cut at) come back whole, however the reads cut them; a line past
// the bound is an error, not a cut line; a stream cut inside a line is
// io.ErrUnexpectedEOF, not a short last line.
func TestReadLinesReturnsLongLinesWhole(t *testing.T) {
	long := strings.Repeat("é", 3<<20) // 6 MiB of two-byte characters
	input := "a\n\n" + long + "\nb\n"
	var got []string
	err := ReadLines(iotest.HalfReader(strings.NewReader(input)), 8<<20, func(l []byte) error {
		got = append(got, string(l))
		return nil
	})
	if err != nil || len(got) != 4 || got[0] != "a" || got[1] != "" || got[2] != long || got[3] != "b" {
		t.Fatalf("ReadLines: %d lines, %v", len(got), err)
	}
	if err := ReadLines(strings.NewReader(input), 1<<20, func([]byte) error { return nil }); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("a 6 MiB line with a 1 MiB bound: %v, want ErrLineTooLong", err)
	}
	if err := ReadLines(strings.NewReader("whole\ncut"), 100, func([]byte) error { return nil }); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a stream cut inside a line: %v, want io.ErrUnexpectedEOF", err)
	}
}

// FuzzReadLines: for any bytes, any way of cutting them into reads and any
// bound, ReadLines yields exactly the newline-terminated lines of the
// input, in order, until a line passes the bound; then it fails with
// ErrLineTooLong. Unterminated trailing bytes fail with
// io.ErrUnexpectedEOF.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc\n"), []byte{0}, 4)
	f.Add([]byte("no newline"), []byte{2, 7}, 100)
	f.Add(bytes.Repeat([]byte("x"), 70000), []byte{255}, 80000)
	f.Add(append(bytes.Repeat([]byte("y"), 70000), '\n'), []byte{}, 65536)
	f.Fuzz(func(t *testing.T, data, sizes []byte, bound int) {
		bound = max(bound%(1<<17), 0)
		var got [][]byte
		err := ReadLines(&chunkReader{data: data, sizes: sizes}, bound, func(l []byte) error {
			got = append(got, bytes.Clone(l))
			return nil
		})
		want := bytes.Split(data, []byte("\n"))
		tail := want[len(want)-1]
		want = want[:len(want)-1]
		for i, w := range want {
			if len(w) > bound {
				if !errors.Is(err, ErrLineTooLong) || len(got) != i {
					t.Fatalf("line %d of %d bytes, bound %d: got %d lines, %v", i, len(w), bound, len(got), err)
				}
				return
			}
		}
		switch {
		case len(tail) > 0 && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrLineTooLong):
			t.Fatalf("unterminated tail of %d bytes: %v", len(tail), err)
		case len(tail) == 0 && err != nil:
			t.Fatalf("err = %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines, want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}

// TestRunLogsResumesAJobAtTheLastEntrysOffset: following one job, a
// broken stream is resumed with ?offset= equal to the last delivered
// entry's offset, which is where the next entry starts. The client used
// to send offset+1, inside the next record, and that line was lost. The
// fake server serves a log of 4-byte records ("l0\n"...) honestly from
// whatever offset it is given, and a 3 MB line that the old 4 MiB-bounded
// reader would also have had to hold.
func TestRunLogsResumesAJobAtTheLastEntrysOffset(t *testing.T) {
	lines := []string{"l0", "l1", strings.Repeat("z", 3_000_000), "l3", "l4"}
	var offsets []int64 // offset after each line
	var end int64
	for _, l := range lines {
		end += int64(len(l)) + 1
		offsets = append(offsets, end)
	}
	var asked []string
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := conns.Add(1)
		asked = append(asked, r.URL.Query().Get("offset"))
		from := int64(0)
		if v := r.URL.Query().Get("offset"); v != "" {
			from, _ = strconv.ParseInt(v, 10, 64)
		}
		enc := json.NewEncoder(w)
		sent := 0
		for i, l := range lines {
			start := offsets[i] - int64(len(l)) - 1
			if start < from {
				continue // a record that starts before the offset is not sent
			}
			if err := enc.Encode(LogEntry{Job: "j0", Offset: offsets[i], Stream: LogStdout, Line: l}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if sent++; n == 1 && sent == 3 {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
		}
	}))
	defer srv.Close()
	var got []string
	err := fastClient(t, srv.URL, "").RunLogs(context.Background(), "main", "r", LogOptions{Follow: true, Job: "j0"}, func(e LogEntry) error {
		got = append(got, e.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(lines, ",") {
		t.Fatalf("got %d lines %v, want all %d", len(got), sizesOf(got), len(lines))
	}
	if len(asked) != 2 || asked[1] != strconv.FormatInt(offsets[2], 10) {
		t.Fatalf("offsets asked for: %q, want the second connection at %d", asked, offsets[2])
	}
}

func sizesOf(lines []string) []int {
	out := make([]int, len(lines))
	for i, l := range lines {
		out[i] = len(l)
	}
	return out
}
