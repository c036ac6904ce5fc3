package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/snapid/snapid/cassandra"
)

// registryFlags are the flags of commands that can use the registry.
type registryFlags struct {
	cassandra string
	keyspace  string
	username  string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	timeout   time.Duration
}

func (c *cli) addRegistryFlags(r *registryFlags) {
	c.fs.StringVar(&r.cassandra, "cassandra", "", "Cassandra contact points host[:port],… (default $SNAPID_CASSANDRA; none: no registry)")
	c.fs.StringVar(&r.keyspace, "keyspace", "", "registry keyspace (default $SNAPID_KEYSPACE, else snapid)")
	c.fs.StringVar(&r.username, "username", "", "Cassandra user (default $SNAPID_CASSANDRA_USERNAME; the password comes from $SNAPID_CASSANDRA_PASSWORD)")
	c.fs.StringVar(&r.tlsCA, "tls-ca", "", "PEM CA file to verify Cassandra with (default $SNAPID_CASSANDRA_TLS_CA)")
	c.fs.StringVar(&r.tlsCert, "tls-cert", "", "PEM client certificate (default $SNAPID_CASSANDRA_TLS_CERT)")
	c.fs.StringVar(&r.tlsKey, "tls-key", "", "PEM client key (default $SNAPID_CASSANDRA_TLS_KEY)")
	c.fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "time limit for the registry work of this command")
}

func (c *cli) orEnv(v, key string) string {
	if v != "" {
		return v
	}
	return c.getenv(key)
}

// registryConfig returns the Cassandra configuration, or ok=false when no
// Cassandra is configured.
func (c *cli) registryConfig(r *registryFlags) (cfg cassandra.Config, ok bool) {
	hosts := c.orEnv(r.cassandra, "SNAPID_CASSANDRA")
	if strings.TrimSpace(hosts) == "" {
		return cfg, false
	}
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.Hosts = append(cfg.Hosts, h)
		}
	}
	cfg.Keyspace = c.orEnv(r.keyspace, "SNAPID_KEYSPACE")
	cfg.Username = c.orEnv(r.username, "SNAPID_CASSANDRA_USERNAME")
	cfg.Password = c.getenv("SNAPID_CASSANDRA_PASSWORD")
	cfg.TLSCAFile = c.orEnv(r.tlsCA, "SNAPID_CASSANDRA_TLS_CA")
	cfg.TLSCertFile = c.orEnv(r.tlsCert, "SNAPID_CASSANDRA_TLS_CERT")
	cfg.TLSKeyFile = c.orEnv(r.tlsKey, "SNAPID_CASSANDRA_TLS_KEY")
	return cfg, true
}

// connect opens the registry, or returns nil when none is configured. A
// read-only command never creates the keyspace or the table (a mistyped
// --keyspace is reported, not created).
func (c *cli) connect(ctx context.Context, r *registryFlags, readOnly bool) (*cassandra.Registry, error) {
	cfg, ok := c.registryConfig(r)
	if !ok {
		return nil, nil
	}
	cfg.NoCreate = readOnly
	reg, err := cassandra.NewRegistry(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

// needRegistry is connect for commands that cannot work without one.
func (c *cli) needRegistry(ctx context.Context, r *registryFlags, cmd string) (*cassandra.Registry, error) {
	reg, err := c.connect(ctx, r, false)
	if err == nil && reg == nil {
		err = usageError{fmt.Sprintf("%s needs a registry: give --cassandra host[:port],… or set SNAPID_CASSANDRA", cmd)}
	}
	return reg, err
}
