package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/internal/upload"
)

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// The agent keeps an upload only when it hashes to its name and passes
// the unpacker's rules, and starts no job naming an upload it lacks.
func TestAgentKeepsOnlyCheckedUploads(t *testing.T) {
	h := newHost(t, "process")
	r := h.start(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	var good bytes.Buffer
	a, err := upload.Pack(&good, []upload.Source{{Local: dir, Dest: "."}}, upload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if has, err := r.cli.HasUpload(ctx, a.SHA256); err != nil || has {
		t.Fatalf("HasUpload before the push: %v %v", has, err)
	}
	wrong := strings.Repeat("0", 64)
	if err := r.cli.PutUpload(ctx, wrong, int64(good.Len()), bytes.NewReader(good.Bytes())); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("an upload under another hash: %v, want a refusal naming the SHA-256", err)
	}
	var evil bytes.Buffer
	zw := gzip.NewWriter(&evil)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "../../x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.cli.PutUpload(ctx, sumOf(evil.Bytes()), int64(evil.Len()), bytes.NewReader(evil.Bytes())); err == nil || !strings.Contains(err.Error(), `".." is not allowed`) {
		t.Errorf("an archive with ../: %v, want a refusal", err)
	}
	if has, _ := r.cli.HasUpload(ctx, sumOf(evil.Bytes())); has {
		t.Errorf("the refused archive is kept")
	}
	sp := spec(t, "needs-upload", "ls")
	sp.Upload = a.SHA256
	if _, err := r.cli.Start(ctx, sp); err == nil || !strings.Contains(err.Error(), "not on this host") {
		t.Errorf("start before the push: %v, want a refusal", err)
	}
	if err := r.cli.PutUpload(ctx, a.SHA256, a.Size, bytes.NewReader(good.Bytes())); err != nil {
		t.Fatal(err)
	}
	if has, err := r.cli.HasUpload(ctx, a.SHA256); err != nil || !has {
		t.Fatalf("HasUpload after the push: %v %v", has, err)
	}
	// An archive nobody asked for in an hour goes at the next push.
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(agent.UploadDir(h.dataDir), a.SHA256+".tar.gz"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	var next bytes.Buffer
	b, err := upload.Pack(&next, []upload.Source{{Local: dir, Dest: "."}}, upload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cli.PutUpload(ctx, b.SHA256, b.Size, bytes.NewReader(next.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(agent.UploadDir(h.dataDir), a.SHA256+".tar.gz")); !os.IsNotExist(err) {
		t.Errorf("the unused archive is still there: %v", err)
	}
}
