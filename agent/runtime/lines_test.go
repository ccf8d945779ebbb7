package runtime

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"gpud.dev/gpud/api"
)

// collect runs input through a LineWriter that cuts entries at max bytes,
// written in pieces of the given sizes, and returns its entries.
func collect(t testing.TB, input []byte, sizes []byte, max int) []api.JobLogEntry {
	var got []api.JobLogEntry
	w := &LineWriter{Stream: api.LogStdout, Max: max, Now: time.Now, Emit: func(e api.JobLogEntry) error {
		got = append(got, e)
		return nil
	}}
	for i := 0; len(input) > 0; i++ {
		n := len(input)
		if len(sizes) > 0 {
			n = min(n, int(sizes[i%len(sizes)])+1)
		}
		if k, err := w.Write(input[:n]); k != n || err != nil {
			t.Fatalf("Write = %d, %v", k, err)
		}
		input = input[n:]
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

// join turns entries back into lines: pieces join up to the entry without
// Partial.
func join(t testing.TB, es []api.JobLogEntry) []string {
	var lines []string
	var cur strings.Builder
	for i, e := range es {
		cur.WriteString(e.Line)
		if !e.Partial {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if i == len(es)-1 && e.Partial {
			t.Fatalf("the last entry is Partial: a line was left without its end")
		}
	}
	return lines
}

// TestLineWriterKeepsLongLinesWhole: a 3 MB line (and a 100 KB one, past
// the 64 KiB where the writer used to cut without a mark) comes out as one
// entry; a line longer than the bound comes out as marked pieces that join
// back byte for byte, cut between characters, never inside one.
func TestLineWriterKeepsLongLinesWhole(t *testing.T) {
	big := strings.Repeat("y", 3_000_000)
	mid := strings.Repeat("€", 100_000/3)
	got := collect(t, []byte("a\n"+mid+"\n"+big+"\nlast"), []byte{255, 3}, 0)
	if len(got) != 4 || got[1].Line != mid || got[2].Line != big || got[3].Line != "last" {
		t.Fatalf("%d entries, want 4 whole lines", len(got))
	}
	for _, e := range got {
		if e.Partial {
			t.Fatalf("a line under api.MaxLogLine was cut")
		}
	}
	euro := strings.Repeat("€", 1000) // 3,000 bytes
	pieces := collect(t, []byte(euro+"\n"), []byte{200}, 1000)
	if lines := join(t, pieces); len(lines) != 1 || lines[0] != euro || len(pieces) < 3 {
		t.Fatalf("%d pieces joining to %d lines, want one 3,000-byte line in 3+ pieces", len(pieces), len(lines))
	}
	for _, p := range pieces {
		if !utf8.ValidString(p.Line) || len(p.Line) > 1000 {
			t.Fatalf("piece of %d bytes is not whole characters under the bound", len(p.Line))
		}
	}
}

// FuzzLineWriter: any bytes written in any sizes, with any bound, come out
// as entries of at most the bound that join (by Partial) into exactly the
// input's lines; a valid UTF-8 input yields only valid UTF-8 entries, so
// JSON carries them unchanged.
func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), []byte{0}, 2)
	f.Add([]byte("€€€€\n€"), []byte{1, 4}, 4)
	f.Add([]byte(strings.Repeat("x", 300)+"\n"), []byte{}, 100)
	f.Add([]byte("\xe2\x82"), []byte{0}, 1)
	f.Fuzz(func(t *testing.T, input, sizes []byte, max int) {
		max = 4 + (max&0xfff)%512 // at least one character of UTF-8
		got := collect(t, input, sizes, max)
		want := strings.Split(string(input), "\n")
		if want[len(want)-1] == "" {
			want = want[:len(want)-1] // the input ended with its newline
		}
		lines := join(t, got)
		if len(lines) != len(want) {
			t.Fatalf("%d lines, want %d", len(lines), len(want))
		}
		for i := range want {
			if lines[i] != want[i] {
				t.Fatalf("line %d = %q, want %q", i, lines[i], want[i])
			}
		}
		for _, e := range got {
			if len(e.Line) > max {
				t.Fatalf("entry of %d bytes, bound %d", len(e.Line), max)
			}
			if utf8.Valid(input) && !utf8.ValidString(e.Line) {
				t.Fatalf("entry %q of valid input is not valid UTF-8", e.Line)
			}
			if bytes.ContainsRune([]byte(e.Line), '\n') {
				t.Fatalf("entry holds a newline")
			}
		}
	})
}
