package store

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// selfSigned returns a PEM certificate for name valid until notAfter.
func selfSigned(t *testing.T, name string, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestCertmagicCleanStorageRunsOnTheKV runs certmagic's own storage
// cleaner on the store's KV: it takes the lock, walks the tree with List,
// loads certificates, deletes the expired one's files and records the run.
func TestCertmagicCleanStorageRunsOnTheKV(t *testing.T) {
	s := openTest(t)
	kv := s.KV()
	ctx := context.Background()
	files := map[string][]byte{
		"certificates/acme.test/expired.test/expired.test.crt":  selfSigned(t, "expired.test", time.Now().Add(-24*time.Hour)),
		"certificates/acme.test/expired.test/expired.test.key":  []byte("expired key"),
		"certificates/acme.test/expired.test/expired.test.json": []byte("{}"),
		"certificates/acme.test/valid.test/valid.test.crt":      selfSigned(t, "valid.test", time.Now().Add(30*24*time.Hour)),
		"certificates/acme.test/valid.test/valid.test.key":      []byte("valid key"),
	}
	for k, v := range files {
		if err := kv.Store(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	err := certmagic.CleanStorage(ctx, kv, certmagic.CleanStorageOptions{ExpiredCerts: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	for k := range files {
		_, err := kv.Load(ctx, k)
		expired := strings.Contains(k, "expired.test")
		switch {
		case expired && !errors.Is(err, fs.ErrNotExist):
			t.Errorf("%s of the expired certificate survived cleaning (err %v)", k, err)
		case !expired && err != nil:
			t.Errorf("%s of the valid certificate was lost: %v", k, err)
		}
	}
	if kv.Exists(ctx, "certificates/acme.test/expired.test") {
		t.Error("expired site directory still listed")
	}
	if _, err := kv.Load(ctx, "last_clean.json"); err != nil {
		t.Errorf("certmagic did not record its run: %v", err)
	}
	if ok, _ := kv.TryLock(ctx, "storage_clean"); !ok {
		t.Error("certmagic's lock was not released")
	}
}
