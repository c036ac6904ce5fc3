package cassandra

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of Config's TLS against the real node of
// scripts/cassandra.sh, which takes plain and TLS clients on one port and
// requires TLS clients to present a certificate from its test CA.

// selfSigned writes a new self-signed certificate and its key as PEM files
// in dir and returns their paths: a CA the test node does not trust.
func selfSigned(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(tb, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(tb, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(tb, err)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	require.NoError(tb, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(tb, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

// certRequired is how the node refuses a TLS client without a certificate
// it trusts.
const certRequired = "tls: certificate required"

// assertNoClientCert checks that msg is the refusal of a TLS client without
// a trusted certificate. With TLS 1.3 the client finishes its handshake
// before the server checks the certificate, so the driver reports either
// the server's alert or, when its start-up request lost the race with the
// alert, a start-up without response. (Without TLS the node would have
// answered.)
func assertNoClientCert(tb testing.TB, msg string) {
	tb.Helper()
	if !strings.Contains(msg, certRequired) && !strings.Contains(msg, "no response to connection startup") {
		tb.Errorf("want the refusal of a client without a certificate, got: %s", msg)
	}
}

func TestCassandraTLS(t *testing.T) {
	k := newTestKeyspace(t)
	f := testcluster.RequireTLS(t)
	dir := t.TempDir()
	otherCA, _ := selfSigned(t, dir, "other-ca")
	strangerCert, strangerKey := selfSigned(t, dir, "stranger")

	// Every failure is a connection refused before anything is written:
	// the keyspace is never created.
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"server certificate from an untrusted CA", func(c *Config) {
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = otherCA, f.Cert, f.Key
		}, "certificate signed by unknown authority"},
		{"server name not in the certificate", func(c *Config) {
			c.TLS = &tls.Config{ServerName: "db.example", MinVersion: tls.VersionTLS12}
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = f.CA, f.Cert, f.Key
		}, "db.example"},
		{"no client certificate", func(c *Config) {
			c.TLSCAFile = f.CA
		}, certRequired},
		{"tls.Config without a client certificate", func(c *Config) {
			pool := x509.NewCertPool()
			caPEM, err := os.ReadFile(f.CA)
			require.NoError(t, err)
			require.True(t, pool.AppendCertsFromPEM(caPEM))
			c.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}, certRequired},
		{"client certificate from an untrusted CA", func(c *Config) {
			// The server names the CAs it accepts, so the client does not
			// even offer this certificate.
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = f.CA, strangerCert, strangerKey
		}, certRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := k.config()
			cfg.ConnectTimeout = 5 * time.Second
			tc.mod(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := NewRegistry(ctx, cfg)
			if err == nil {
				r.Close()
			}
			require.ErrorIs(t, err, snapid.ErrRegistry)
			if tc.want == certRequired {
				assertNoClientCert(t, err.Error())
			} else {
				assert.Contains(t, err.Error(), tc.want)
			}
			assert.False(t, k.keyspaceExists(t, k.Name), "a refused connection creates nothing")
		})
	}

	t.Run("mutual TLS from PEM files", func(t *testing.T) {
		r := k.registry(t, func(c *Config) {
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = f.CA, f.Cert, f.Key
		})
		g, err := snapid.Open(filepath.Join(t.TempDir(), "counter.u64"), "tls_host", snapid.Config{
			Registry:   &snapid.RegistryConfig{Registry: r},
			NoSync:     true,
			BindingDir: hostRecords(t, "host"),
		})
		require.NoError(t, err)
		defer g.Close()
		id, err := g.NextID()
		require.NoError(t, err)
		assert.Equal(t, snapid.ID{Name: "tls_host", Number: 1}, id)
		h, err := r.Get(testCtx(t), "tls_host")
		require.NoError(t, err)
		assert.Equal(t, registry.StateActive, h.State)
	})

	t.Run("mutual TLS from a tls.Config", func(t *testing.T) {
		pool := x509.NewCertPool()
		caPEM, err := os.ReadFile(f.CA)
		require.NoError(t, err)
		require.True(t, pool.AppendCertsFromPEM(caPEM))
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		require.NoError(t, err)
		r := k.registry(t, func(c *Config) {
			c.TLS = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		})
		h, err := r.Get(testCtx(t), "tls_host")
		require.NoError(t, err, "the row written over the other TLS connection is visible")
		assert.Equal(t, registry.StateActive, h.State)
	})
}
