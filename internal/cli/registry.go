package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid/cassandra"
)

// registryFlags are the flags of commands that can use the registry.
type registryFlags struct {
	cassandra   string
	keyspace    string
	username    string
	tlsCA       string
	tlsCert     string
	tlsKey      string
	timeout     time.Duration
	localDC     string
	consistency string
	serial      string
	// Only for commands that may create the keyspace (addCreateFlags).
	replication  string
	allowFragile bool
}

func (c *cli) addRegistryFlags(r *registryFlags) {
	c.fs.StringVar(&r.cassandra, "cassandra", "", "Cassandra contact points host[:port],… (default $SNAPID_CASSANDRA; none: no registry)")
	c.fs.StringVar(&r.keyspace, "keyspace", "", "registry keyspace (default $SNAPID_KEYSPACE, else snapid)")
	c.fs.StringVar(&r.username, "username", "", "Cassandra user (default $SNAPID_CASSANDRA_USERNAME; the password comes from $SNAPID_CASSANDRA_PASSWORD)")
	c.fs.StringVar(&r.tlsCA, "tls-ca", "", "PEM CA file to verify Cassandra with (default $SNAPID_CASSANDRA_TLS_CA)")
	c.fs.StringVar(&r.tlsCert, "tls-cert", "", "PEM client certificate (default $SNAPID_CASSANDRA_TLS_CERT)")
	c.fs.StringVar(&r.tlsKey, "tls-key", "", "PEM client key (default $SNAPID_CASSANDRA_TLS_KEY)")
	c.fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "time limit for the registry work of this command")
	c.fs.StringVar(&r.localDC, "local-dc", "", "this host's Cassandra data centre, whose nodes are asked first (default $SNAPID_LOCAL_DC; needed by local_quorum)")
	c.fs.StringVar(&r.consistency, "consistency", "", "consistency of the commit of each change and of listings: quorum (default), local_quorum or each_quorum (default $SNAPID_CONSISTENCY)")
	c.fs.StringVar(&r.serial, "serial-consistency", "", "consistency of the Paxos rounds deciding who holds a name: serial, the only one allowed (local_serial is refused: two data centres cut apart could both win one name) (default $SNAPID_SERIAL_CONSISTENCY)")
}

// addCreateFlags adds the flags of the keyspace's creation, for commands
// that create it when it is missing.
func (c *cli) addCreateFlags(r *registryFlags) {
	c.fs.StringVar(&r.replication, "replication", "", "replication if the keyspace is created: dc1:3,dc2:3 (NetworkTopologyStrategy) or 3 (SimpleStrategy) (default $SNAPID_REPLICATION, else 1 replica, which only a one-node cluster accepts)")
	c.fs.BoolVar(&r.allowFragile, "allow-fragile-replication", false, "create the keyspace even with a replication that cannot survive the loss of one node (refused otherwise on a cluster of several nodes)")
}

func (c *cli) orEnv(v, key string) string {
	if v != "" {
		return v
	}
	return c.getenv(key)
}

// registryConfig returns the Cassandra configuration, or ok=false when no
// Cassandra is configured. Values it cannot read are usage errors;
// cassandra.Config.Validate judges the rest before anything connects.
func (c *cli) registryConfig(r *registryFlags) (cfg cassandra.Config, ok bool, err error) {
	hosts := c.orEnv(r.cassandra, "SNAPID_CASSANDRA")
	if strings.TrimSpace(hosts) == "" {
		return cfg, false, nil
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
	cfg.LocalDC = strings.TrimSpace(c.orEnv(r.localDC, "SNAPID_LOCAL_DC"))
	if cfg.Consistency, err = parseConsistency(c.orEnv(r.consistency, "SNAPID_CONSISTENCY")); err != nil {
		return cfg, true, err
	}
	if cfg.SerialConsistency, err = parseSerialConsistency(c.orEnv(r.serial, "SNAPID_SERIAL_CONSISTENCY")); err != nil {
		return cfg, true, err
	}
	if spec := c.orEnv(r.replication, "SNAPID_REPLICATION"); strings.TrimSpace(spec) != "" {
		if cfg.Replication, err = parseReplication(spec); err != nil {
			return cfg, true, err
		}
	}
	cfg.AllowFragileReplication = r.allowFragile
	return cfg, true, nil
}

// parseConsistency reads --consistency: a consistency level's name in
// any case, "-" or "_" between words; "" is the default (QUORUM). Levels
// that are names but not allowed are left to cassandra.Config.Validate,
// which says why.
func parseConsistency(s string) (gocql.Consistency, error) {
	s = strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if s == "" {
		return 0, nil
	}
	cons, err := gocql.ParseConsistencyWrapper(s)
	if err != nil {
		return 0, usageError{fmt.Sprintf("--consistency %q (or SNAPID_CONSISTENCY): want quorum (the default), local_quorum or each_quorum", s)}
	}
	return cons, nil
}

// parseSerialConsistency reads --serial-consistency: serial, or
// local_serial, which cassandra.Config.Validate refuses with the reason.
func parseSerialConsistency(s string) (gocql.SerialConsistency, error) {
	switch strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_")) {
	case "":
		return 0, nil
	case "SERIAL":
		return gocql.Serial, nil
	case "LOCAL_SERIAL":
		return gocql.LocalSerial, nil
	}
	return 0, usageError{fmt.Sprintf("--serial-consistency %q (or SNAPID_SERIAL_CONSISTENCY): the only one is serial", s)}
}

// connect opens the registry, or returns nil when none is configured. A
// read-only command never creates the keyspace or the table (a mistyped
// --keyspace is reported, not created).
func (c *cli) connect(ctx context.Context, r *registryFlags, readOnly bool) (*cassandra.Registry, error) {
	cfg, ok, err := c.registryConfig(r)
	if !ok || err != nil {
		return nil, err
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
