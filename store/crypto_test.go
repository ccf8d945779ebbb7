package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"
)

// sensitive are values that must never reach the disk in plaintext.
var sensitive = map[string]Record{
	"secret value":        {Kind: KindSecret, ID: "main/db-password", Project: "main", Sealed: []byte("s3cr3t-db-password-7f3a")},
	"registry credential": {Kind: KindRun, ID: "r-private-image", Sealed: []byte(`{"username":"bot","password":"registry-pass-91c2"}`)},
	"ssh private key":     {Kind: KindFleet, ID: "ssh-fleet", Sealed: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA-unique-4d1e\n")},
	"backend credential":  {Kind: KindBackend, ID: "aws", Sealed: []byte("AKIAEXAMPLEKEY0042:wJalrXUtnFEMI/K7MDENG")},
}

func TestSecretsNeverReachTheFileInPlaintext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openAt(t, path, Options{})
	for _, r := range sensitive {
		mustApply(t, s, Put(r))
	}
	// Write each twice so old pages (freelist) hold earlier versions too.
	for _, r := range sensitive {
		r.Name = "updated"
		mustApply(t, s, Put(r))
	}
	tlsKey := []byte("-----BEGIN EC PRIVATE KEY-----tls-key-material-88aa")
	if err := s.KV().Store(context.Background(), "certificates/acme/example.com/example.com.key", tlsKey); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if _, err := s.Backup(context.Background(), &backup); err != nil {
		t.Fatal(err)
	}
	s.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range sensitive {
		for label, b := range map[string][]byte{"state file": raw, "backup": backup.Bytes()} {
			if bytes.Contains(b, r.Sealed) || bytes.Contains(b, r.Sealed[:12]) {
				t.Errorf("%s found in plaintext in the %s", name, label)
			}
		}
	}
	if bytes.Contains(raw, tlsKey[len(tlsKey)-20:]) {
		t.Error("TLS private key found in plaintext in the state file")
	}
	// And they read back through the store.
	s = openAt(t, path, Options{})
	for name, r := range sensitive {
		got, err := s.Collection(r.Kind).Get(r.ID)
		if err != nil || !bytes.Equal(got.Sealed, r.Sealed) {
			t.Errorf("%s did not read back: %q %v", name, got.Sealed, err)
		}
	}
}

func TestKeyFileIsCreatedPrivate(t *testing.T) {
	dir := t.TempDir()
	openAt(t, filepath.Join(dir, "state.db"), Options{})
	fi, err := os.Stat(filepath.Join(dir, "state.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestRotationKeepsOldValuesReadableAndReencryptMovesThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openAt(t, path, Options{})
	seed(t, s)
	r := sensitive["secret value"]
	mustApply(t, s, Put(r))
	mustApply(t, s, KVPut("acme/account.key", []byte("account-key")))
	oldID := s.Keyring().Primary()
	if err := s.Keyring().Rotate(); err != nil {
		t.Fatal(err)
	}
	newID := s.Keyring().Primary()
	if newID == oldID {
		t.Fatal("rotate kept the primary key")
	}
	s.Close()

	s = openAt(t, path, Options{}) // the key file now holds both keys
	if got, err := s.Secrets().Get(r.ID); err != nil || !bytes.Equal(got.Sealed, r.Sealed) {
		t.Fatalf("value sealed with the old key unreadable after rotation: %v", err)
	}
	if ids := sealedKeyIDs(t, s); ids[oldID] != 2 {
		t.Fatalf("before reencrypt: key ids %v, want 2 values under %s", ids, oldID)
	}
	n, err := s.Reencrypt(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("reencrypt = %d, %v; want 2", n, err)
	}
	if ids := sealedKeyIDs(t, s); ids[newID] != 2 || ids[oldID] != 0 {
		t.Fatalf("after reencrypt: key ids %v, want all under %s", ids, newID)
	}
	noProblems(t, s)
}

// sealedKeyIDs counts live sealed values in the file by the key id in
// their envelope.
func sealedKeyIDs(t *testing.T, s *Store) map[string]int {
	t.Helper()
	ids := map[string]int{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		for _, k := range Kinds() {
			tx.Bucket([]byte(k)).ForEach(func(_, v []byte) error {
				if r, err := decodeRecord(k, v); err == nil && len(r.Sealed) > 0 {
					ids[keyID(r.Sealed)]++
				}
				return nil
			})
		}
		return tx.Bucket([]byte(KindKV)).ForEach(func(_, v []byte) error {
			ids[keyID(v[8:])]++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestOpenFailsClearlyWithoutTheRightKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Put(sensitive["secret value"]))
	s.Close()
	other := make([]byte, 32)
	rand.Read(other)
	tests := []struct {
		name string
		opts Options
	}{
		{"another key from the environment", Options{KeyEnv: base64.StdEncoding.EncodeToString(other)}},
		{"plaintext mode", Options{Plaintext: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(path, tc.opts)
			if err == nil {
				s.Close()
				t.Fatal("opened encrypted values without their key")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestPlaintextOptOutAndEnvironmentKey(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, filepath.Join(dir, "plain.db"), Options{Plaintext: true})
	mustApply(t, s, Put(sensitive["secret value"]))
	s.Close()
	raw, _ := os.ReadFile(filepath.Join(dir, "plain.db"))
	if !bytes.Contains(raw, sensitive["secret value"].Sealed) {
		t.Fatal("plaintext opt-out did not store plaintext")
	}
	if _, err := os.Stat(filepath.Join(dir, "state.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("plaintext mode created a key file")
	}
	key := make([]byte, 32)
	rand.Read(key)
	env := base64.StdEncoding.EncodeToString(key)
	s = openAt(t, filepath.Join(dir, "env.db"), Options{KeyEnv: env})
	mustApply(t, s, Put(sensitive["secret value"]))
	s.Close()
	s = openAt(t, filepath.Join(dir, "env.db"), Options{KeyEnv: env})
	if got, err := s.Secrets().Get("main/db-password"); err != nil || !bytes.Equal(got.Sealed, sensitive["secret value"].Sealed) {
		t.Fatalf("env key did not reopen: %v", err)
	}
	if err := s.Keyring().Rotate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rotating an environment key: err = %v, want ErrInvalid", err)
	}
}

func TestSealedValueIsBoundToItsRecord(t *testing.T) {
	k, err := LoadKeyring(filepath.Join(t.TempDir(), "k"), "")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := k.seal([]byte("value"), recordAAD(KindSecret, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.open(sealed, recordAAD(KindSecret, "b")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a sealed value opened under another record: %v", err)
	}
	if keyID(sealed) != k.Primary() {
		t.Fatalf("envelope key id %q, want %q", keyID(sealed), k.Primary())
	}
}
