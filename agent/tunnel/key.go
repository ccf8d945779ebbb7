package tunnel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// KeyFile is the agent's registration key in its data directory: an ECDSA
// P-256 private key (PEM, mode 0600) made on the first registration. It is
// the host's identity: the server binds the host's name in its fleet to
// this key's fingerprint the first time the host registers and refuses the
// name to any other key. Losing the file means registering anew (see
// docs/fleets.md); copying it lets the copy speak as the host.
const KeyFile = "registration-key.pem"

// LoadOrCreateKey returns the agent's registration key from dataDir as a
// self-signed client certificate for the TLS handshake, creating the key
// (mode 0600) on first use. A key file that others may read is refused:
// whoever reads it can register as this host.
func LoadOrCreateKey(dataDir string) (tls.Certificate, error) {
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("registration key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("registration key: %w", err)
		}
		b = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		// O_EXCL: two agents started on one data dir at once must not
		// each keep a different key.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return LoadOrCreateKey(dataDir)
		}
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("registration key: %w", err)
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("registration key %s: %w", path, err)
		}
	case err != nil:
		return tls.Certificate{}, fmt.Errorf("registration key: %w", err)
	default:
		st, err := os.Stat(path)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("registration key: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return tls.Certificate{}, fmt.Errorf("registration key %s has mode %04o: others can read the host's identity; run chmod 600 %s (or delete it to register as a new host)",
				path, st.Mode().Perm(), path)
		}
	}
	return certificateFor(path, b)
}

// certificateFor wraps the PEM private key in a self-signed certificate.
// The certificate carries nothing the server trusts but its public key:
// the TLS handshake's CertificateVerify proves the agent holds the key.
func certificateFor(path string, keyPEM []byte) (tls.Certificate, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return tls.Certificate{}, fmt.Errorf("registration key %s: no PEM block in it", path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("registration key %s: %w", path, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return tls.Certificate{}, fmt.Errorf("registration key %s: %T is not an ECDSA key", path, parsed)
	}
	host, err := os.Hostname()
	if err != nil {
		host = "gpud agent"
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("registration key %s: %w", path, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("registration key %s: %w", path, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Fingerprint names a host key: "SHA256:" and the hex SHA-256 of the
// certificate's public key (SubjectPublicKeyInfo). Both ends compute it
// the same way; the server stores it, never the key.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "SHA256:" + hex.EncodeToString(sum[:])
}
