package proxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"time"

	"github.com/caddyserver/certmagic"
)

// The internal CA lives in the certificate storage under these keys: it is
// generated once and reused by every later start, so clients that trust
// its certificate keep trusting the gateway.
const (
	internalCACertKey = "gpud/internal-ca/ca.crt"
	internalCAKeyKey  = "gpud/internal-ca/ca.key"
	internalCALock    = "gpud-internal-ca"
	// internalLeafLifetime is how long a leaf certificate is valid;
	// certmagic renews it when a third of that is left.
	internalLeafLifetime = 30 * 24 * time.Hour
	internalCALifetime   = 10 * 365 * 24 * time.Hour
)

// internalCA is a certmagic.Issuer that signs the gateway's leaf
// certificates with a CA of gpud's own, for sites no public CA reaches.
type internalCA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

var _ certmagic.Issuer = (*internalCA)(nil)

// loadOrCreateCA reads the internal CA from storage, generating and
// storing it under the storage's lock on first use.
func loadOrCreateCA(ctx context.Context, st certmagic.Storage) (*internalCA, error) {
	if err := st.Lock(ctx, internalCALock); err != nil {
		return nil, fmt.Errorf("internal CA: lock: %w", err)
	}
	defer func() { _ = st.Unlock(context.WithoutCancel(ctx), internalCALock) }()
	certPEM, err := st.Load(ctx, internalCACertKey)
	if err == nil {
		keyPEM, kerr := st.Load(ctx, internalCAKeyKey)
		if kerr != nil {
			return nil, fmt.Errorf("internal CA: its certificate is stored but not its key: %w", kerr)
		}
		return parseCA(certPEM, keyPEM)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("internal CA: load: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("internal CA: key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("internal CA: public key: %w", err)
	}
	ski := sha256.Sum256(pubDER)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"gpud"}, CommonName: "gpud internal CA " + hex.EncodeToString(ski[:4])},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(internalCALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("internal CA: certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("internal CA: key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	// The key first: a certificate without its key would stop every later
	// start, a key without its certificate is replaced.
	if err := st.Store(ctx, internalCAKeyKey, keyPEM); err != nil {
		return nil, fmt.Errorf("internal CA: store key: %w", err)
	}
	if err := st.Store(ctx, internalCACertKey, certPEM); err != nil {
		return nil, fmt.Errorf("internal CA: store certificate: %w", err)
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*internalCA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("internal CA: stored certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("internal CA: certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("internal CA: key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("internal CA: key of type %T cannot sign", k)
	}
	return &internalCA{cert: cert, key: signer, certPEM: certPEM}, nil
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	return n, nil
}

// IssuerKey names this issuer in the storage's certificate paths.
func (ca *internalCA) IssuerKey() string { return "gpud-internal" }

// Issue signs a leaf certificate for the CSR's DNS names (server
// authentication only). certmagic asks only for names the on-demand
// decision allowed.
func (ca *internalCA) Issue(_ context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("internal CA: CSR signature: %w", err)
	}
	if len(csr.DNSNames) == 0 && len(csr.IPAddresses) == 0 {
		return nil, errors.New("internal CA: CSR names no host")
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(internalLeafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	subject := pkix.Name{}
	if len(csr.DNSNames) > 0 {
		subject.CommonName = csr.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        subject,
		DNSNames:       csr.DNSNames,
		IPAddresses:    csr.IPAddresses,
		NotBefore:      now.Add(-5 * time.Minute),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("internal CA: sign: %w", err)
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, ca.certPEM...)
	return &certmagic.IssuedCertificate{Certificate: chain}, nil
}
