package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/tabwriter"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// cmdCheckNames audits the registry, and an inventory of planned names.
func cmdCheckNames(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("check-names")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	stale := fs.Duration("stale", admin.DefaultStale, "report active holders not seen for longer than this (0 or negative: do not check)")
	skew := fs.Duration("clock-skew", admin.DefaultClockSkew, "report rows whose times are further ahead of this host's clock than this")
	names := fs.String("names", "", "inventory file of planned node names, one per line (# comments)")
	asJSON := fs.Bool("json", false, jsonHelp)
	if err := c.parse(args); err != nil {
		return err
	}
	if *skew <= 0 {
		return usageError{"--clock-skew must be positive"}
	}
	if *stale <= 0 {
		*stale = -1 // the library's "off"
	}
	cfg := admin.AuditConfig{Now: time.Now(), Stale: *stale, ClockSkew: *skew}
	if *names != "" {
		var err error
		if cfg.Planned, err = readInventory(*names); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, err := c.connect(ctx, &rf, true)
	if err != nil {
		return err
	}
	var rows []registry.Holder
	var repl *cassandra.ReplicationReport
	if reg != nil {
		defer reg.Close()
		if rows, repl, err = c.readRegistryForAudit(ctx, reg, &cfg); err != nil {
			return err
		}
	} else if *names == "" {
		return usageError{"nothing to check: give --cassandra (or SNAPID_CASSANDRA) to audit the registry, or --names FILE to check an inventory"}
	} else if err := c.refuseWithoutRegistry(noRegistryConfigured+" (without one, only the --names file is checked)",
		"stale", "clock-skew", "name", "counter", "timeout"); err != nil {
		return err
	}
	report := admin.Audit(rows, cfg)
	if repl != nil && repl.Status == cassandra.ReplicationAttention {
		report.Problems = append([]admin.Problem{{Kind: cassandra.ProblemFragileReplication,
			Detail: repl.Detail + "; to fix: " + repl.Fix}}, report.Problems...)
	}
	if reg != nil {
		if err := c.auditSequences(ctx, reg, &report); err != nil {
			return err
		}
	}
	return printCheckNames(c, report, repl, *asJSON)
}

// readInventory reads the inventory file of planned names at path.
func readInventory(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, hintError{fmt.Errorf("inventory: %w", err), "check the --names file: one planned node name per line"}
	}
	planned, err := admin.ParseInventory(f)
	f.Close()
	if err != nil {
		return nil, hintError{fmt.Errorf("inventory %s: %w", path, err), "check the --names file: one planned node name per line"}
	}
	return planned, nil
}

// readRegistryForAudit checks the registry's replication, lists its rows,
// and fills in cfg this host's name and owner token and the cluster's
// stride. It returns the rows and the replication report.
func (c *cli) readRegistryForAudit(ctx context.Context, reg *cassandra.Registry, cfg *admin.AuditConfig) ([]registry.Holder, *cassandra.ReplicationReport, error) {
	check := (*cassandra.Registry).CheckReplication
	if c.checkReplication != nil {
		check = c.checkReplication
	}
	rep, err := check(reg, ctx)
	if err != nil {
		return nil, nil, err
	}
	rows, err := reg.List(ctx)
	if err != nil {
		if rep.Status == cassandra.ReplicationAttention {
			// A keyspace whose quorum cannot be reached cannot be listed.
			return nil, nil, fmt.Errorf("%w (probably because %s; to fix: %s)", err, rep.Detail, rep.Fix)
		}
		return nil, nil, err
	}
	if err := c.thisHost(cfg); err != nil {
		return nil, nil, err
	}
	if cfg.Stride, err = reg.Stride(ctx); err != nil {
		return nil, nil, err
	}
	return rows, &rep, nil
}

// auditSequences adds the problems of the registry's sequences to report.
// A registry whose sequences cannot be listed for want of a local data
// centre gets a notice on stderr instead.
func (c *cli) auditSequences(ctx context.Context, reg *cassandra.Registry, report *admin.Report) error {
	seqs, err := reg.ListSequences(ctx)
	switch {
	case errors.Is(err, engine.ErrInvalidOption):
		// A cluster of several data centres without a local one
		// configured: names are still audited.
		fmt.Fprintf(c.stderr, "snapctl: notice: sequences not audited: %s\n", oneLine(err.Error()))
	case err != nil:
		return err
	}
	report.Problems = append(report.Problems, admin.AuditSequences(seqs)...)
	return nil
}

// printCheckNames prints the audit report as JSON or as text; a report with
// problems is errProblems (exit 1).
func printCheckNames(c *cli, report admin.Report, repl *cassandra.ReplicationReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(checkOutput{report, repl}); err != nil {
			return err
		}
	} else if err := printReport(c, report, repl); err != nil {
		return err
	}
	if !report.OK() {
		return errProblems
	}
	return nil
}

// thisHost fills in this host's configured name and owner token, when
// there are any. A machine with neither a name nor a counter configured
// (--name, --counter, SNAPID_NAME, SNAPID_COUNTER) is an administrator's:
// its host name is no node name to check.
func (c *cli) thisHost(cfg *admin.AuditConfig) error {
	name := c.orEnv("name", c.name, "SNAPID_NAME")
	if name == "" && c.orEnv("counter", c.counter, "SNAPID_COUNTER") == "" {
		return nil
	}
	var path string
	var err error
	if name == "" {
		// As status: the name the counter is in use under, else the
		// one derived from the host name.
		if name, path, err = c.auditTarget(); err != nil {
			if _, perr := c.resolveCounter(); perr != nil {
				return perr
			}
			return nil // no configured name to check
		}
	} else if path, err = c.resolveCounter(); err != nil {
		return err
	}
	cfg.ThisName = name
	owner, err := admin.OwnerToken(path)
	switch {
	case err == nil:
		cfg.ThisOwner = owner
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return nil
}

// checkOutput is check-names' JSON: the audit, and with a registry the
// report on its keyspace's replication ("replication"; its "status" is
// "ok", "warning" or "attention", and attention is also a
// fragile_replication problem, so the exit status is 1).
type checkOutput struct {
	admin.Report
	Replication *cassandra.ReplicationReport `json:"replication,omitempty"`
}

// printReport prints the audit report r as text: a warning about the
// registry's replication if there is one, then a table of the problems
// and their count, or that there are none.
func printReport(c *cli, r admin.Report, repl *cassandra.ReplicationReport) error {
	what := plural(r.Rows, "registry row")
	if repl == nil {
		what = "the inventory (no registry configured)"
	} else if repl.Status == cassandra.ReplicationWarning {
		// Not a problem (exit 0), but said every time.
		fmt.Fprintf(c.stdout, "check-names: warning: %s; %s\n", repl.Detail, repl.Fix)
	}
	if repl != nil && len(repl.Sequences) > 1 {
		// Said for every data centre of several: which of them go on
		// leasing sequence numbers while cut off from the others.
		for _, s := range repl.Sequences {
			fmt.Fprintf(c.stdout, "check-names: sequences in data centre %s (%s): %s\n", s.DC, plural(s.Replicas, "replica"), s.Detail)
		}
	}
	if r.OK() {
		_, err := fmt.Fprintf(c.stdout, "check-names: no problems in %s\n", what)
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBLEM\tNAME\tDETAIL")
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Kind, p.Name, p.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "check-names: %s in %s\n", plural(len(r.Problems), "problem"), what)
	return err
}

// plural returns "1 problem", "2 problems".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
