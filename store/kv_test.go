package store

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKVHasCertmagicStorageSemantics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openAt(t, path, Options{})
	kv := s.KV()
	ctx := context.Background()
	for _, k := range []string{"certs/a.com/a.com.crt", "certs/a.com/a.com.key", "certs/b.com/b.com.crt", "acme/account.json", "/lead/slash/"} {
		if err := kv.Store(ctx, k, []byte("v:"+k)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = openAt(t, path, Options{}) // everything below must survive a reopen
	kv = s.KV()

	lists := []struct {
		name      string
		dir       string
		recursive bool
		want      string
	}{
		{"direct children of a directory", "certs", false, "certs/a.com,certs/b.com"},
		{"recursive walk lists directories and files", "certs", true, "certs/a.com,certs/a.com/a.com.crt,certs/a.com/a.com.key,certs/b.com,certs/b.com/b.com.crt"},
		{"root lists top-level names", "", false, "acme,certs,lead"},
		{"trailing slash is the same directory", "certs/a.com/", false, "certs/a.com/a.com.crt,certs/a.com/a.com.key"},
	}
	for _, tc := range lists {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kv.List(ctx, tc.dir, tc.recursive)
			if err != nil || strings.Join(got, ",") != tc.want {
				t.Fatalf("List(%q, %v) = %v, %v; want %s", tc.dir, tc.recursive, got, err, tc.want)
			}
		})
	}
	notFound := []struct {
		name string
		call func() error
	}{
		{"Load of a missing key", func() error { _, err := kv.Load(ctx, "certs/c.com/c.crt"); return err }},
		{"Load of a directory", func() error { _, err := kv.Load(ctx, "certs"); return err }},
		{"Stat of a missing key", func() error { _, err := kv.Stat(ctx, "nope"); return err }},
		{"List of a missing directory", func() error { _, err := kv.List(ctx, "nope", true); return err }},
	}
	for _, tc := range notFound {
		t.Run(tc.name+" is fs.ErrNotExist", func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("err = %v, want fs.ErrNotExist", err)
			}
		})
	}
	if v, err := kv.Load(ctx, "lead/slash"); err != nil || string(v) != "v:/lead/slash/" {
		t.Fatalf("normalized key: %q %v", v, err)
	}
	info, err := kv.Stat(ctx, "certs/a.com/a.com.key")
	if err != nil || !info.IsTerminal || info.Size != int64(len("v:certs/a.com/a.com.key")) || time.Since(info.Modified) > time.Minute {
		t.Fatalf("Stat of a key = %+v, %v", info, err)
	}
	if info, err := kv.Stat(ctx, "certs"); err != nil || info.IsTerminal {
		t.Fatalf("Stat of a directory = %+v, %v", info, err)
	}
	if !kv.Exists(ctx, "certs/b.com") || kv.Exists(ctx, "certs/z") {
		t.Fatal("Exists wrong")
	}
	if err := kv.Delete(ctx, "certs/a.com"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "certs/a.com"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if got, _ := kv.List(ctx, "", true); strings.Join(got, ",") != "acme,acme/account.json,certs,certs/b.com,certs/b.com/b.com.crt,lead,lead/slash" {
		t.Fatalf("after Delete of a prefix: %v", got)
	}
	for _, bad := range []string{"a/../b", "a//b", "./a", "a\\b", "a\x00b"} {
		if err := kv.Store(ctx, bad, []byte("x")); !errors.Is(err, ErrInvalid) {
			t.Errorf("Store(%q) err = %v, want ErrInvalid", bad, err)
		}
	}
	noProblems(t, s)
}

func TestKVLockExcludesAndHonorsContext(t *testing.T) {
	s := openTest(t)
	kv := s.KV()
	ctx := context.Background()
	if err := kv.Lock(ctx, "issue_cert_a.com"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := kv.TryLock(ctx, "issue_cert_a.com"); ok {
		t.Fatal("TryLock took a held lock")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := kv.Lock(short, "issue_cert_a.com"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held lock: err = %v, want deadline", err)
	}
	got := make(chan error, 1)
	go func() { got <- kv.Lock(ctx, "issue_cert_a.com") }()
	if err := kv.Unlock(ctx, "issue_cert_a.com"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by Unlock")
	}
	if err := kv.Unlock(ctx, "never-locked"); err == nil {
		t.Fatal("Unlock of a free lock succeeded")
	}
}
