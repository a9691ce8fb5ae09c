package network

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// CA is one sandbox's certificate authority for intercepted TLS (ECDSA
// P-256, self-signed, valid for years since parked runs may sleep for
// weeks). The sandbox trusts its certificate; the worker issues a leaf
// for each bound host name it intercepts.
type CA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey

	mu      sync.Mutex
	leafKey *ecdsa.PrivateKey
	leaves  map[string]*tls.Certificate
}

const (
	caValidity   = 20 * 365 * 24 * time.Hour
	leafValidity = 30 * 24 * time.Hour
	// leafRenew: a cached leaf with less validity left is issued anew.
	leafRenew = 24 * time.Hour
	// maxLeaves bounds the cache of issued leaves (each a few hundred
	// bytes); past it the cache starts over.
	maxLeaves = 256
)

// NewCA makes a CA; name goes in its subject ("Helmr sandbox <name>").
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "Helmr sandbox " + name, Organization: []string{"Helmr"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	return &CA{cert: cert, der: der, key: key}, nil
}

// CertPEM is the CA's certificate, for the sandbox's trust stores.
func (c *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der})
}

// MarshalPEM is the CA's certificate and private key (PKCS #8), for a
// sealed checkpoint. It is secret.
func (c *CA) MarshalPEM() []byte {
	key, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		panic(err) // an ECDSA P-256 key always marshals
	}
	return append(c.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})...)
}

// ParseCA reads a CA back from MarshalPEM's output.
func ParseCA(pemBytes []byte) (*CA, error) {
	var certDER, keyDER []byte
	for rest := pemBytes; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			if certDER != nil {
				return nil, errors.New("parse CA: more than one certificate")
			}
			certDER = b.Bytes
		case "PRIVATE KEY":
			keyDER = b.Bytes
		default:
			return nil, fmt.Errorf("parse CA: unexpected PEM block %q", b.Type)
		}
	}
	if certDER == nil || keyDER == nil {
		return nil, errors.New("parse CA: want a PEM certificate and a PEM private key")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("parse CA: the certificate is not a CA's")
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("parse CA: the key is not an ECDSA key")
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("parse CA: the key does not belong to the certificate")
	}
	return &CA{cert: cert, der: certDER, key: key}, nil
}

// leaf returns a server certificate for name issued by the CA, cached.
func (c *CA) leaf(name string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if l, ok := c.leaves[name]; ok && now.Add(leafRenew).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	if c.leafKey == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("leaf key: %w", err)
		}
		c.leafKey = k
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if c.cert.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	if tmpl.NotAfter.Before(now) {
		return nil, errors.New("leaf: the sandbox's CA has expired")
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.der}, PrivateKey: c.leafKey, Leaf: parsed}
	if c.leaves == nil || len(c.leaves) >= maxLeaves {
		c.leaves = map[string]*tls.Certificate{}
	}
	c.leaves[name] = l
	return l, nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
