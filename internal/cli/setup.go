package cli

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
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
	strideSet := false
	fs.Visit(func(f *flag.Flag) { strideSet = strideSet || f.Name == "stride" })
	if strideSet && (*stride < 2 || *stride > snapid.MaxNodeNumber+1) {
		return usageError{fmt.Sprintf("--stride %d: want 2 to %d (node numbers are 1 to the stride - 1)", *stride, uint64(snapid.MaxNodeNumber)+1)}
	}
	spec := c.orEnv(rf.replication, "SNAPID_REPLICATION")
	if _, err := parseReplication(spec); err != nil {
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
	if err := cfg.Validate(); err != nil { // before connecting
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	created, err := cassandra.CreateSchema(ctx, cfg)
	if err != nil {
		return err
	}
	ks, tbl := cfg.Keyspace, cassandra.DefaultTable
	if ks == "" {
		ks = cassandra.DefaultKeyspace
	}
	if strideSet {
		reg, err := cassandra.NewRegistry(ctx, cfg)
		if err != nil {
			return err
		}
		defer reg.Close()
		if _, err := reg.SetStride(ctx, *stride); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(c.stdout, "stride %d recorded for the cluster's striped ids\n", *stride); err != nil {
			return err
		}
	}
	if !created {
		_, err = fmt.Fprintf(c.stdout, "registry %s.%s already exists; nothing created (an existing keyspace keeps its replication: 'snapctl check-names' says whether it survives the loss of a node)\n", ks, tbl)
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "registry %s.%s created (replication %s)\n", ks, tbl, spec)
	return err
}

// replicationDCRE is the rule for data-centre names in --replication.
var replicationDCRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$`)

// parseReplication turns --replication into the keyspace's replication
// map: "dc1:3,dc2:3" is NetworkTopologyStrategy with a factor per data
// centre, a bare "3" is SimpleStrategy with that factor.
func parseReplication(spec string) (map[string]string, error) {
	const want = "want dc1:3,dc2:3 (NetworkTopologyStrategy, a factor per data centre) or a bare factor such as 3 (SimpleStrategy)"
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, usageError{"setup needs --replication (or SNAPID_REPLICATION): " + want}
	}
	factor := func(s string) (string, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 99 || strconv.Itoa(n) != s {
			return "", usageError{fmt.Sprintf("--replication %q: %q is not a replication factor (a whole number from 1 to 99); %s", spec, s, want)}
		}
		return s, nil
	}
	if !strings.Contains(spec, ":") {
		f, err := factor(spec)
		if err != nil {
			return nil, err
		}
		return map[string]string{"class": "SimpleStrategy", "replication_factor": f}, nil
	}
	m := map[string]string{"class": "NetworkTopologyStrategy"}
	for _, part := range strings.Split(spec, ",") {
		dc, n, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, usageError{fmt.Sprintf("--replication %q: %q has no data centre; %s", spec, part, want)}
		}
		if !replicationDCRE.MatchString(dc) || dc == "class" || dc == "replication_factor" {
			return nil, usageError{fmt.Sprintf("--replication %q: %q is not a data-centre name; %s", spec, dc, want)}
		}
		if _, dup := m[dc]; dup {
			return nil, usageError{fmt.Sprintf("--replication %q: data centre %q given twice", spec, dc)}
		}
		f, err := factor(n)
		if err != nil {
			return nil, err
		}
		m[dc] = f
	}
	return m, nil
}
