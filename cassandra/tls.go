package cassandra

import (
	"crypto/tls"
	"crypto/x509"
	"os"
)

// tlsConfig builds the TLS configuration from cfg, reading the PEM files
// now so that a wrong path is reported before connecting.
func (cfg *Config) tlsConfig() (*tls.Config, error) {
	if cfg.TLS == nil && cfg.TLSCAFile == "" && cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil, nil
	}
	var c *tls.Config
	if cfg.TLS != nil {
		c = cfg.TLS.Clone()
	} else {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, invalidConfig("TLS CA file: %v", err)
		}
		if c.RootCAs == nil {
			c.RootCAs = x509.NewCertPool()
		}
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, invalidConfig("TLS CA file %s holds no PEM certificate", cfg.TLSCAFile)
		}
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, invalidConfig("TLS client certificate and key: give both files or neither")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, invalidConfig("TLS client certificate: %v", err)
		}
		c.Certificates = append(c.Certificates, cert)
	}
	return c, nil
}
