package api

import (
	"bytes"
	"errors"
	"io"
	"strings"
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
