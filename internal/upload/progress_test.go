package upload

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestUploadProgressRedrawsOnlyOnATerminal: to a file or pipe the upload
// progress is one final line, no carriage-return redraws.
func TestUploadProgressRedrawsOnlyOnATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	for _, w := range []io.Writer{f, &buf} {
		if isTerminal(w) {
			t.Fatalf("%T counts as a terminal", w)
		}
	}
	const size = 3 << 20
	p := &progressReader{r: bytes.NewReader(make([]byte, size)), total: size, w: f, redraw: isTerminal(f)}
	if _, err := io.CopyBuffer(io.Discard, p, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	p.line(true)
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := "uploading: 3.0 MiB / 3.0 MiB (100%)\n"; string(got) != want {
		t.Fatalf("progress to a file: %q, want only %q", got, want)
	}
}
