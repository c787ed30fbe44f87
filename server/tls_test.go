package server_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// selfSigned makes a certificate for 127.0.0.1 at test time.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "latchd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func dialTLS(t *testing.T, addr string, pool *x509.CertPool) *client {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("tls dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	})
	a, b := dialTLS(t, s.Addr, pool), dialTLS(t, s.Addr, pool)
	tok := grant(t, a.do("l", "k", "0"), "ok")
	b.send("l\nk\n10\nl\nk2\n0\n") // the second request is held behind the first
	b.silent(50 * time.Millisecond)
	if got := a.do("r", "k", tok); got != "ok" {
		t.Fatal(got)
	}
	grant(t, b.line(), "ok")
	grant(t, b.line(), "ok")
	// A protocol violation closes a TLS connection too.
	if got := a.do("x", "k", "1"); got != "error" {
		t.Fatalf("got %q, want error", got)
	}
	a.closed()
	// Disconnect releases.
	c := dialTLS(t, s.Addr, pool)
	grant(t, c.do("l", "d", "0"), "ok")
	_ = c.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return s.TCP.Connections() == 1 }, "close seen")
	grant(t, b.do("l", "d", "0"), "ok")
	// Plain TCP to a TLS port gets nothing useful.
	p := dial(t, s.Addr)
	p.send("l\nk\n0\n")
	_ = p.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, _ := p.br.ReadString('\n'); strings.HasPrefix(line, "ok") {
		t.Fatalf("plain client served on TLS port: %q", line)
	}
}

func TestMaxConnectionsPerIP(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.MaxConnectionsPerIP = 2 })
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "x", "0"), "ok")
	grant(t, b.do("l", "y", "0"), "ok")
	c := dial(t, s.Addr)
	if got := c.line(); got != "error" {
		t.Fatalf("third connection from one IP: got %q, want error", got)
	}
	c.closed()
	if s.TCP.Refused() != 1 {
		t.Errorf("Refused() = %d, want 1", s.TCP.Refused())
	}
	_ = a.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return s.TCP.Connections() == 1 }, "close seen")
	d := dial(t, s.Addr)
	grant(t, d.do("l", "z", "0"), "ok")
}
