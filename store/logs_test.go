package store

import (
	"bytes"
	"context"
	"fmt"
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

func TestOversizedLogWriteKeepsItsTail(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "state.db"), Options{LogLimit: 1000})
	big := bytes.Repeat([]byte("abcdefghij"), 500) // 5,000 bytes
	end, err := s.Logs().Append("j", big)
	if err != nil || end != 5000 {
		t.Fatalf("end = %d, %v", end, err)
	}
	d, from, _, _ := s.Logs().Read("j", 0, 1<<20)
	if from != 4000 || !bytes.Equal(d, big[4000:]) {
		t.Fatalf("kept [%d..] %d bytes", from, len(d))
	}
}
