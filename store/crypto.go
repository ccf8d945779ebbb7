package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"gpud.dev/gpud/internal/atomicfile"
)

// Sealed value envelopes. The first byte says which one follows.
const (
	sealPlain byte = 0 // [0][plaintext] — only with Options.Plaintext
	sealAESv1 byte = 1 // [1][len(keyID)][keyID][12-byte nonce][AES-256-GCM ciphertext+tag]
)

// Keyring holds the AES-256 keys of the state file. The primary key seals
// every new value; every key in the ring opens values sealed with it, so a
// rotation never makes old values unreadable. A Keyring is safe for
// concurrent use.
type Keyring struct {
	mu      sync.RWMutex
	path    string // "" when the key came from the environment
	primary string
	aeads   map[string]cipher.AEAD
	raw     map[string][]byte
}

type keyFile struct {
	Primary string    `json:"primary"`
	Keys    []keyJSON `json:"keys"`
}

type keyJSON struct {
	ID  string `json:"id"`
	Key string `json:"key"` // base64, 32 bytes
}

// LoadKeyring returns the keyring for a state file. If env is not empty it is
// the base64 of a 32-byte key (for example from GPUD_STATE_KEY) and the file
// is not used. Otherwise the key file at path is read, or created with one
// fresh random key and mode 0600 if it does not exist.
func LoadKeyring(path, env string) (*Keyring, error) {
	k := &Keyring{aeads: map[string]cipher.AEAD{}, raw: map[string][]byte{}}
	if env != "" {
		key, err := base64.StdEncoding.DecodeString(env)
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("%w: state key from environment must be the base64 of 32 bytes", ErrInvalid)
		}
		sum := sha256.Sum256(key)
		id := "env" + hex.EncodeToString(sum[:4])
		if err := k.add(id, key); err != nil {
			return nil, err
		}
		k.primary = id
		return k, nil
	}
	k.path = path
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := k.Rotate(); err != nil {
			return nil, err
		}
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	var f keyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	for _, kj := range f.Keys {
		key, err := base64.StdEncoding.DecodeString(kj.Key)
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("key file %s: key %q is not the base64 of 32 bytes", path, kj.ID)
		}
		if err := k.add(kj.ID, key); err != nil {
			return nil, err
		}
	}
	if _, ok := k.aeads[f.Primary]; !ok {
		return nil, fmt.Errorf("key file %s: primary key %q is not in the file", path, f.Primary)
	}
	k.primary = f.Primary
	return k, nil
}

func (k *Keyring) add(id string, key []byte) error {
	block, err := aes.NewCipher(key)
	if err != nil {
		return fmt.Errorf("key %q: %w", id, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return fmt.Errorf("key %q: %w", id, err)
	}
	k.aeads[id] = aead
	k.raw[id] = key
	return nil
}

// Primary returns the id of the key that seals new values.
func (k *Keyring) Primary() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.primary
}

// Rotate adds a fresh random key, makes it primary and rewrites the key file
// (mode 0600, atomically). Older keys stay in the ring to open old values;
// Store.Reencrypt then re-seals everything with the new key.
func (k *Keyring) Rotate() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.path == "" && k.primary != "" {
		return fmt.Errorf("%w: the state key comes from the environment; rotate it there", ErrInvalid)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("new key: %w", err)
	}
	idb := make([]byte, 4)
	if _, err := rand.Read(idb); err != nil {
		return fmt.Errorf("new key id: %w", err)
	}
	id := hex.EncodeToString(idb)
	if err := k.add(id, key); err != nil {
		return err
	}
	prev := k.primary
	k.primary = id
	if err := k.save(); err != nil {
		k.primary = prev
		delete(k.aeads, id)
		delete(k.raw, id)
		return err
	}
	return nil
}

func (k *Keyring) save() error {
	f := keyFile{Primary: k.primary}
	for id, key := range k.raw {
		f.Keys = append(f.Keys, keyJSON{ID: id, Key: base64.StdEncoding.EncodeToString(key)})
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode key file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return fmt.Errorf("key file dir: %w", err)
	}
	if err := atomicfile.WriteFile(k.path, b, 0o600); err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	return nil
}

// seal encrypts plaintext with the primary key, binding it to aad (the
// record's kind and id) so a sealed value cannot be moved to another record.
func (k *Keyring) seal(plaintext, aad []byte) ([]byte, error) {
	k.mu.RLock()
	id, aead := k.primary, k.aeads[k.primary]
	k.mu.RUnlock()
	out := make([]byte, 0, 2+len(id)+aead.NonceSize()+len(plaintext)+aead.Overhead())
	out = append(out, sealAESv1, byte(len(id)))
	out = append(out, id...)
	nonce := out[len(out) : len(out)+aead.NonceSize()]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	out = out[:len(out)+aead.NonceSize()]
	return aead.Seal(out, nonce, plaintext, aad), nil
}

// keyID returns the id of the key that sealed b ("" for plaintext).
func keyID(b []byte) string {
	if len(b) < 2 || b[0] != sealAESv1 || len(b) < 2+int(b[1]) {
		return ""
	}
	return string(b[2 : 2+int(b[1])])
}

// open decrypts a sealed envelope; k may be nil when the store runs in
// plaintext mode, in which case only plaintext envelopes open.
func (k *Keyring) open(b, aad []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty sealed value", ErrInvalid)
	}
	switch b[0] {
	case sealPlain:
		return b[1:], nil
	case sealAESv1:
	default:
		return nil, fmt.Errorf("%w: unknown sealed format %d", ErrInvalid, b[0])
	}
	if k == nil {
		return nil, fmt.Errorf("%w: value is encrypted but the store was opened in plaintext mode", ErrInvalid)
	}
	id := keyID(b)
	if id == "" {
		return nil, fmt.Errorf("%w: truncated sealed value", ErrInvalid)
	}
	k.mu.RLock()
	aead := k.aeads[id]
	k.mu.RUnlock()
	if aead == nil {
		return nil, fmt.Errorf("%w: value sealed with key %q, which is not in the keyring", ErrInvalid, id)
	}
	rest := b[2+len(id):]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: truncated sealed value", ErrInvalid)
	}
	pt, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("%w: sealed value does not open with key %q: %v", ErrInvalid, id, err)
	}
	return pt, nil
}

// sealWith seals with k, or wraps plaintext when k is nil (opt-out).
func sealWith(k *Keyring, plaintext, aad []byte) ([]byte, error) {
	if k == nil {
		return append([]byte{sealPlain}, plaintext...), nil
	}
	return k.seal(plaintext, aad)
}
