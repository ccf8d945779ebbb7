package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLogsAreBoundedAndDropTheOldestFirst(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, filepath.Join(dir, "state.db"), Options{LogLimit: 8 << 10})
	logs := s.Logs()
	var all bytes.Buffer
	for i := range 2000 {
		line := fmt.Appendf(nil, "line %05d\n", i)
		all.Write(line)
		if _, err := logs.Append("job-1", line); err != nil {
			t.Fatal(err)
		}
	}
	data, from, next, err := logs.Read("job-1", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if next != int64(all.Len()) || int64(len(data)) > 8<<10 || len(data) < 7<<10 {
		t.Fatalf("kept %d bytes [%d,%d), want about 8 KiB ending at %d", len(data), from, next, all.Len())
	}
	if !bytes.Equal(data, all.Bytes()[from:]) {
		t.Fatal("kept bytes are not the newest bytes of the log")
	}
	// Reading resumes at any offset and in small pieces.
	part, f2, n2, _ := logs.Read("job-1", next-25, 10)
	if f2 != next-25 || n2 != next-15 || !bytes.Equal(part, all.Bytes()[next-25:next-15]) {
		t.Fatalf("partial read = %q [%d,%d)", part, f2, n2)
	}
	// A reopened store serves the same bytes.
	s.Close()
	s = openAt(t, filepath.Join(dir, "state.db"), Options{LogLimit: 8 << 10})
	again, _, _, _ := s.Logs().Read("job-1", from, 1<<20)
	if !bytes.Equal(again, data) {
		t.Fatal("logs changed across reopen")
	}
	if err := s.Logs().Remove("job-1"); err != nil {
		t.Fatal(err)
	}
	if d, _, _, _ := s.Logs().Read("job-1", 0, 100); len(d) != 0 {
		t.Fatal("logs remain after Remove")
	}
}

func TestLogFollowerWakesOnAppend(t *testing.T) {
	s := openTest(t)
	logs := s.Logs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan []byte, 1)
	go func() {
		if err := logs.Wait(ctx, "job-2", 0); err != nil {
			got <- nil
			return
		}
		d, _, _, _ := logs.Read("job-2", 0, 100)
		got <- d
	}()
	if _, err := logs.Append("job-2", []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if d := <-got; string(d) != "hello\n" {
		t.Fatalf("follower got %q", d)
	}
	short, c2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer c2()
	if err := logs.Wait(short, "job-2", 6); err == nil {
		t.Fatal("Wait returned with nothing new")
	}
	if _, err := logs.Append("../escape", []byte("x")); err == nil {
		t.Fatal("a job id escaped the logs directory")
	}
}

// TestOversizedLogRecordIsRefused: a record the job's limit cannot hold is
// refused whole (the caller replaces it with a marker), where the store
// used to keep its tail: a reader then started inside a record and lost
// it. The log around it is untouched.
func TestOversizedLogRecordIsRefused(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "state.db"), Options{LogLimit: 1000})
	if _, err := s.Logs().Append("j", []byte("before\n")); err != nil {
		t.Fatal(err)
	}
	big := append(bytes.Repeat([]byte("abcdefghij"), 500), '\n') // 5,001 bytes
	if _, err := s.Logs().Append("j", big); !errors.Is(err, ErrLogTooLarge) {
		t.Fatalf("append of %d bytes with a limit of 1000: %v, want ErrLogTooLarge", len(big), err)
	}
	if _, err := s.Logs().Append("j", []byte("no newline")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a record without its newline: %v, want ErrInvalid", err)
	}
	end, err := s.Logs().Append("j", []byte("after\n"))
	if err != nil || end != 13 {
		t.Fatalf("end = %d, %v", end, err)
	}
	d, from, _, _ := s.Logs().Read("j", 0, 1<<20)
	if from != 0 || string(d) != "before\nafter\n" {
		t.Fatalf("kept [%d..] %q", from, d)
	}
}

// TestLogRetentionDropsWholeRecords: records of every size, many larger
// than a segment, are appended to a small log; after each append the
// oldest kept byte starts a record, so a reader never begins inside one.
func TestLogRetentionDropsWholeRecords(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "state.db"), Options{LogLimit: 4 << 10}) // 512-byte segments
	logs := s.Logs()
	rng := rand.New(rand.NewPCG(1, 2))
	starts := map[int64]bool{0: true}
	var end int64
	for i := range 400 {
		rec := append(bytes.Repeat([]byte{'a' + byte(i%26)}, rng.IntN(2000)), '\n')
		var err error
		if end, err = logs.Append("j", rec); err != nil {
			t.Fatal(err)
		}
		starts[end] = true
		d, from, next, err := logs.Read("j", 0, 8<<10)
		if err != nil || next != end {
			t.Fatalf("read: [%d,%d) %v, want to end at %d", from, next, err, end)
		}
		if !starts[from] || end-from > 4<<10 || d[len(d)-1] != '\n' {
			t.Fatalf("after record %d the log keeps [%d,%d): not from a record's start, or over the limit", i, from, end)
		}
	}
}

// TestTornLogRecordIsCutOnReopen: gpud killed inside an Append leaves part
// of a record at the end of the last segment; the next open cuts it off,
// so the next record starts on its own line instead of running into it.
func TestTornLogRecordIsCutOnReopen(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, filepath.Join(dir, "state.db"), Options{})
	if _, err := s.Logs().Append("j", []byte("one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	segs, err := filepath.Glob(filepath.Join(dir, "logs", "j", "*.seg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments of job j: %v %v", segs, err)
	}
	f, err := os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"t":"2026-01-01T00:00:00Z","l":"cut sh`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = openAt(t, filepath.Join(dir, "state.db"), Options{})
	end, err := s.Logs().Append("j", []byte("three\n"))
	if err != nil || end != 14 {
		t.Fatalf("append after reopen: end %d, %v; want 14", end, err)
	}
	d, _, _, _ := s.Logs().Read("j", 0, 1<<20)
	if string(d) != "one\ntwo\nthree\n" {
		t.Fatalf("log after a torn record = %q", d)
	}
}
