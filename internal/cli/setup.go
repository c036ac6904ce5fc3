package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/registry"
)

// cmdSetup creates the registry's keyspace and tables once, with the
// replication given, as a production cluster should (rather than from the
// first start of every host at once).
func cmdSetup(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("setup")
	stride := decimalFlag(fs, "stride", 0, "record the cluster's stride of striped ids (2 to 2147483648; once for the cluster)")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	c.addCreateFlags(&rf)
	if err := c.parse(args); err != nil {
		return err
	}
	strideSet, err := strideGiven(fs, *stride)
	if err != nil {
		return err
	}
	if c.inproc != nil && c.inproc.Registry != nil {
		return c.setupInProcess(ctx, *stride, strideSet)
	}
	cfg, ok, err := c.registryConfig(&rf)
	if err != nil {
		return err
	}
	if !ok {
		return usageError{"setup needs a registry: give --cassandra host[:port],… or set SNAPID_CASSANDRA"}
	}
	asked := cfg.Replication
	// Without a replication, setup works on a keyspace that exists (its
	// missing tables, --stride) and refuses to create one.
	cfg.NoCreateKeyspace = len(asked) == 0
	if err := cfg.Validate(); err != nil { // before connecting
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	rep, err := c.setUpSchema(ctx, cfg)
	if err != nil {
		return setupFailed(c, rep, err, rf.timeout)
	}
	printSetup(c, rep, asked)
	if strideSet {
		if err := c.setupStride(ctx, cfg, *stride); err != nil {
			if errors.Is(err, registry.ErrRegistry) {
				return hintError{err, fmt.Sprintf("%s; the schema is set up (above), the stride was not recorded: run 'snapctl setup --stride %d' again",
					registryHint(err), *stride)}
			}
			return err
		}
	}
	return nil
}

// setupStride records stride as the cluster's, on a registry of cfg.
func (c *cli) setupStride(ctx context.Context, cfg cassandra.Config, stride uint64) error {
	reg, err := cassandra.NewRegistry(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	return c.recordStride(ctx, reg, stride)
}

// setupFailed is setup's error err after the set-up reported rep: what
// was created before it (on stdout, as when it succeeds), and that setup
// can be run again. timeout is the --timeout the work had.
func setupFailed(c *cli, rep cassandra.SchemaReport, err error, timeout time.Duration) error {
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	made := rep.KeyspaceCreated || len(rep.TablesCreated) > 0
	if made {
		printSetupMade(c, rep)
	}
	again := "run 'snapctl setup' again: it is safe (it waits for the nodes to agree on the schema, then creates only what is missing, and says what)"
	switch {
	case errors.Is(err, cassandra.ErrSchemaAgreement):
		done := "nothing was created"
		if made {
			done = setupMadeSummary(rep) + ", and stay"
		}
		return hintError{err, fmt.Sprintf("--timeout %v bounds the wait ('nodetool describecluster' shows each node's schema version; "+
			"a node down since the schema changed agrees only once it is back); %s; %s", timeout, done, again)}
	case made:
		return hintError{err, fmt.Sprintf("%s; %s, and stay; %s", registryHint(err), setupMadeSummary(rep), again)}
	}
	return err
}

// printSetupMade prints what a setup that failed created (rep) before it
// failed.
func printSetupMade(c *cli, rep cassandra.SchemaReport) {
	if rep.KeyspaceCreated {
		fmt.Fprintf(c.stdout, "keyspace %s created (replication %s)\n", rep.Keyspace, replicationSpec(rep.Replication))
	}
	if len(rep.TablesCreated) > 0 {
		fmt.Fprintf(c.stdout, "tables created: %s\n", strings.Join(rep.TablesCreated, ", "))
	}
}

// setupMadeSummary says in a few words what rep created: "keyspace ks and
// table node_names were created".
func setupMadeSummary(rep cassandra.SchemaReport) string {
	var parts []string
	if rep.KeyspaceCreated {
		parts = append(parts, "keyspace "+rep.Keyspace)
	}
	switch len(rep.TablesCreated) {
	case 0:
	case 1:
		parts = append(parts, "table "+rep.TablesCreated[0])
	default:
		parts = append(parts, "tables "+strings.Join(rep.TablesCreated, ", "))
	}
	verb := "was"
	if len(parts) > 1 || len(rep.TablesCreated) > 1 {
		verb = "were"
	}
	return strings.Join(parts, " and ") + " " + verb + " created"
}

// strideGiven reports whether --stride was given, refusing a stride out
// of its range.
func strideGiven(fs *flag.FlagSet, stride uint64) (bool, error) {
	strideSet := false
	fs.Visit(func(f *flag.Flag) { strideSet = strideSet || f.Name == "stride" })
	if strideSet && (stride < 2 || stride > registry.MaxNodeNumber+1) {
		return false, usageError{fmt.Sprintf("--stride %d: want 2 to %d (node numbers are 1 to the stride - 1)", stride, uint64(registry.MaxNodeNumber)+1)}
	}
	return strideSet, nil
}

// setUpSchema is cassandra.SetUpSchema (or the environment's), with a
// missing keyspace that setup may not create explained as a usage error.
func (c *cli) setUpSchema(ctx context.Context, cfg cassandra.Config) (cassandra.SchemaReport, error) {
	set := c.env.setUpSchema
	if set == nil {
		set = cassandra.SetUpSchema
	}
	rep, err := set(ctx, cfg)
	if errors.Is(err, cassandra.ErrNoKeyspace) {
		return rep, usageError{fmt.Sprintf("%s; setup needs --replication (or SNAPID_REPLICATION) to create it: "+
			"dc1:3,dc2:3 (NetworkTopologyStrategy, a factor per data centre) or a bare factor such as 3 (SimpleStrategy); "+
			"or check --keyspace (SNAPID_KEYSPACE)", strings.TrimPrefix(err.Error(), "snapid: "))}
	}
	return rep, err
}

// recordStride records the cluster's stride in the registry and says so.
func (c *cli) recordStride(ctx context.Context, reg *cassandra.Registry, stride uint64) error {
	if _, err := reg.SetStride(ctx, stride); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "stride %d recorded for the cluster's striped ids\n", stride)
	return err
}

// printSetup says what setup created or found (rep), with a warning when
// an existing keyspace's replication is not the one asked for.
func printSetup(c *cli, rep cassandra.SchemaReport, asked map[string]string) {
	have := replicationSpec(rep.Replication)
	if rep.KeyspaceCreated {
		fmt.Fprintf(c.stdout, "keyspace %s created (replication %s)\n", rep.Keyspace, have)
	} else {
		fmt.Fprintf(c.stdout, "keyspace %s exists: left as it was (replication %s)\n", rep.Keyspace, have)
	}
	if len(rep.TablesCreated) > 0 {
		fmt.Fprintf(c.stdout, "tables created: %s\n", strings.Join(rep.TablesCreated, ", "))
	} else {
		fmt.Fprintf(c.stdout, "tables: all existed; nothing created\n")
	}
	if len(asked) > 0 && !rep.KeyspaceCreated && replicationSpec(asked) != have {
		fmt.Fprintf(c.stderr, "snapctl: warning: keyspace %s keeps its replication %s, not the %s asked for: setup never changes an existing keyspace "+
			"('snapctl check-names' says whether it survives the loss of a node, and how to change it)\n", rep.Keyspace, have, replicationSpec(asked))
	}
}

// replicationSpec renders a replication map as --replication takes it:
// dc1:3,dc2:3 for NetworkTopologyStrategy, a bare factor for
// SimpleStrategy, else the map as the cluster stores it.
func replicationSpec(m map[string]string) string {
	switch strings.TrimPrefix(m["class"], "org.apache.cassandra.locator.") {
	case "SimpleStrategy":
		if len(m) == 2 && m["replication_factor"] != "" {
			return m["replication_factor"]
		}
	case "NetworkTopologyStrategy":
		var parts []string
		for k, v := range m {
			if k != "class" {
				parts = append(parts, k+":"+v)
			}
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(m)
}
