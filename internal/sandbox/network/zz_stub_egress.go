package network

// TEMPORARY: compile-time stand-in for the egress engine being built on
// branch egress-engine; removed when it merges.

import (
	"crypto/x509"
	"errors"
)

type CA struct{ name string }

func NewCA(name string) (*CA, error)        { return &CA{name: name}, nil }
func (c *CA) CertPEM() []byte                { return []byte("-----BEGIN CERTIFICATE-----\nstub\n-----END CERTIFICATE-----\n") }
func (c *CA) MarshalPEM() []byte             { return []byte(c.name) }
func ParseCA(pemBytes []byte) (*CA, error)   { return &CA{name: string(pemBytes)}, nil }
func NewPlaceholder(value string) (string, error) {
	if value == "" {
		return "", errors.New("empty")
	}
	return "PLACEHOLDER" + value[:0], nil
}
func ValidHost(pattern string) string { return "" }

type Credential struct {
	Name        string
	Placeholder string
	Value       string
	Hosts       []string
	Body        bool
}

type Notice struct{ Secret, Host, Kind, Message string }

type Injector struct{ ca *CA }

func (c *Config) Injector(sandboxID string, ca *CA) *Injector { return &Injector{ca: ca} }
func (c *Config) DropInjector(sandboxID string)               {}
func (inj *Injector) CA() *CA                                 { return inj.ca }
func (inj *Injector) Add(creds ...Credential) (remove func()) { return func() {} }

var _ = x509.NewCertPool
