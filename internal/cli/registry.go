package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

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
	timeLimitVar(c.fs, &r.timeout, "timeout", 30*time.Second, "time limit for the registry work of this command (positive)")
	c.fs.StringVar(&r.localDC, "local-dc", "", "this host's Cassandra data centre, whose nodes are asked first (default $SNAPID_LOCAL_DC; needed by local_quorum)")
	c.fs.StringVar(&r.consistency, "consistency", "", "consistency of the commit of each change and of listings: quorum (default), local_quorum or each_quorum (default $SNAPID_CONSISTENCY)")
	c.fs.StringVar(&r.serial, "serial-consistency", "", "consistency of the Paxos rounds deciding who holds a name: serial, the only one allowed (local_serial is refused: two data centres cut apart could both win one name) (default $SNAPID_SERIAL_CONSISTENCY)")
}

// addCreateFlags adds the flags of the keyspace's creation, for commands
// that create it when it is missing.
func (c *cli) addCreateFlags(r *registryFlags) {
	c.fs.StringVar(&r.replication, "replication", "", "replication if the keyspace is created (by setup; other commands create only the default keyspace): dc1:3,dc2:3 (NetworkTopologyStrategy) or 3 (SimpleStrategy) (default $SNAPID_REPLICATION, else 1 replica, which only a one-node cluster accepts)")
	c.fs.BoolVar(&r.allowFragile, "allow-fragile-replication", false, "create the keyspace even with a replication that cannot survive the loss of one node (refused otherwise on a cluster of several nodes)")
}

// orEnv returns the flag's value v when the flag was given on the command
// line (even empty: a flag beats the environment), else the variable key.
func (c *cli) orEnv(flagName, v, key string) string {
	if c.flagGiven(flagName) {
		return v
	}
	return c.getenv(key)
}

// flagGiven reports whether the flag name was given on the command line.
func (c *cli) flagGiven(name string) bool {
	given := false
	c.fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// envFlags maps the variables cassandra.ConfigFromEnv reads to the flags
// that override them.
var envFlags = map[string]string{
	cassandra.EnvHosts:             "cassandra",
	cassandra.EnvKeyspace:          "keyspace",
	cassandra.EnvUsername:          "username",
	cassandra.EnvTLSCA:             "tls-ca",
	cassandra.EnvTLSCert:           "tls-cert",
	cassandra.EnvTLSKey:            "tls-key",
	cassandra.EnvLocalDC:           "local-dc",
	cassandra.EnvConsistency:       "consistency",
	cassandra.EnvSerialConsistency: "serial-consistency",
	cassandra.EnvReplication:       "replication",
}

// lookup reads a registry setting: the flag that overrides variable key
// when it was given (even empty), else the environment.
func (c *cli) lookup(key string) string {
	if name, ok := envFlags[key]; ok && c.flagGiven(name) {
		return c.fs.Lookup(name).Value.String()
	}
	return c.getenv(key)
}

// registryConfig returns the Cassandra configuration, or ok=false when no
// Cassandra is configured. It is cassandra.ConfigFromEnv (the variables
// every program embedding the registry reads) with the flags given on the
// command line put before the environment. Values it cannot read are
// usage errors naming the flag and the variable; cassandra.Config.Validate
// judges the rest before anything connects.
func (c *cli) registryConfig(r *registryFlags) (cfg cassandra.Config, ok bool, err error) {
	cfg, ok, err = cassandra.ConfigFromEnv(c.lookup)
	var ee *cassandra.EnvError
	if errors.As(err, &ee) {
		if name, has := envFlags[ee.Key]; has {
			return cfg, ok, usageError{fmt.Sprintf("--%s %q (or %s): %s", name, ee.Value, ee.Key, ee.Want)}
		}
		if ee.Key == cassandra.EnvPassword {
			return cfg, ok, usageError{fmt.Sprintf("--username %q (or %s) is given but %s is not set: export the user's password in %s (it is never a flag)",
				cfg.Username, cassandra.EnvUsername, cassandra.EnvPassword, cassandra.EnvPassword)}
		}
		return cfg, ok, usageError{ee.Error()}
	}
	if err != nil || !ok {
		return cfg, ok, err
	}
	cfg.AllowFragileReplication = r.allowFragile
	return cfg, true, nil
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
	// Only the default keyspace is created by a command that is not
	// setup (the trial on one node, with no configuration): a keyspace
	// named with --keyspace or SNAPID_KEYSPACE is made by setup, so that
	// a misspelt name is refused, naming the registries that exist.
	cfg.NoCreateKeyspace = refuseNewKeyspace(cfg)
	reg, err := cassandra.NewRegistry(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

// refuseNewKeyspace reports whether a command other than setup must refuse
// to create cfg's keyspace: any but the default one.
func refuseNewKeyspace(cfg cassandra.Config) bool {
	return cfg.Keyspace != "" && cfg.Keyspace != cassandra.DefaultKeyspace
}

// registryOnlyFlags are the registry's flags that matter only with a
// registry (not --cassandra, which makes one, nor --timeout, which also
// bounds the wait for the counter's lock).
var registryOnlyFlags = []string{"keyspace", "username", "tls-ca", "tls-cert", "tls-key", "local-dc",
	"consistency", "serial-consistency", "replication", "allow-fragile-replication"}

// refuseWithoutRegistry refuses, on a command that works without a
// registry, the flags given on the command line that would do nothing
// without one: registryOnlyFlags and the command's own (more). why says
// why there is none.
func (c *cli) refuseWithoutRegistry(why string, more ...string) error {
	for _, name := range append(append([]string{}, registryOnlyFlags...), more...) {
		if c.fs.Lookup(name) != nil && c.flagGiven(name) {
			return usageError{fmt.Sprintf("%s applies only with a registry, and %s", flagForm(name), why)}
		}
	}
	return nil
}

// noRegistryConfigured is why there is no registry when none is
// configured, for refuseWithoutRegistry.
const noRegistryConfigured = "none is configured: give --cassandra host[:port],… or set SNAPID_CASSANDRA, or drop the flag"

// needRegistry is connect for commands that cannot work without one.
func (c *cli) needRegistry(ctx context.Context, r *registryFlags, cmd string) (*cassandra.Registry, error) {
	reg, err := c.connect(ctx, r, false)
	if err == nil && reg == nil {
		err = usageError{fmt.Sprintf("%s needs a registry: give --cassandra host[:port],… or set SNAPID_CASSANDRA", cmd)}
	}
	return reg, err
}
