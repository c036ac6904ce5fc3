package cli

import (
	"fmt"
	"io"
)

// example is one command line of a command's help, and what it does.
type example struct{ what, line string }

// examples are the examples each command's help ends with ('snapctl help
// next', 'snapctl next -h'), by command ("seq create" for a subcommand of
// seq; 'snapctl help seq' shows those of its subcommands, 'snapctl help'
// help's): every command has some, and every line parses as its
// command's (a test runs each with -h).
var examples = map[string][]example{
	"next": {
		{"three ids, under this host's node name (without a registry, checked on this host only)", "snapctl next -n 3"},
		{"an id of a service's counter, its name claimed in the registry first", "snapctl next --cassandra db1,db2,db3 --name web_1 --counter /var/lib/snapid/web/counter.u64"},
		{"numeric ids without a registry: 7.1, 7.2 (numbers ending in 0 are skipped)", "snapctl next -n 2 --format decimal --node-number 7"},
		{"through a registry outage, from a registered counter", "snapctl next --no-registry --name web_1 --counter /var/lib/snapid/web/counter.u64"},
	},
	"show": {
		{"a service's counter", "snapctl show --counter /var/lib/snapid/web/counter.u64"},
		{"as JSON, for scripts", "snapctl show --json"},
	},
	"init": {
		{"as root, a counter for the service cms, which runs as the user cms", "snapctl init --counter /var/lib/snapid/cms/counter.u64 --owner cms"},
		{"raise the counter so the next number is at least 1000", "snapctl init --start 1000"},
		{"rewrite a corrupt counter above every id it issued (loudly)", "snapctl init --force --start 2000001 --counter /var/lib/snapid/web/counter.u64"},
	},
	"register": {
		{"claim web_1 for this counter", "snapctl register --name web_1 --counter /var/lib/snapid/web/counter.u64"},
		{"take web_1 from a holder gone for good, above every number it issued", "snapctl register --force --start 2000001 --name web_1 --counter /var/lib/snapid/web/counter.u64"},
	},
	"release": {
		{"before handing web_1 to another host (stop its programs first)", "snapctl release --name web_1 --counter /var/lib/snapid/web/counter.u64"},
		{"for a holder gone for good, above every number it issued", "snapctl release --force --start 2000001 --name web_1"},
	},
	"setup": {
		{"once per cluster: two data centres of three replicas each", "snapctl setup --cassandra db1,db2,db3 --local-dc dc1 --replication dc1:3,dc2:3"},
		{"the one-node test node (scripts/cassandra.sh)", "snapctl setup --cassandra 127.0.0.1 --replication 1"},
	},
	"status": {
		{"a service's counter and its registry row (exit 1 if anything needs attention)", "snapctl status --name web_1 --counter /var/lib/snapid/web/counter.u64"},
		{"as JSON, for monitoring", "snapctl status --json"},
	},
	"names": {
		{"every row of the registry", "snapctl names --cassandra db1,db2,db3"},
		{"as JSON, for scripts", "snapctl names --json"},
	},
	"check-names": {
		{"audit the registry (exit 1 if anything could make two hosts issue one id)", "snapctl check-names"},
		{"also an inventory of names planned for new hosts, as JSON", "snapctl check-names --names planned.txt --json"},
		{"report active holders not seen for a day", "snapctl check-names --stale 24h"},
	},
	"seq create": {
		{"order numbers above the 1,000,000 that exist, up to a signed 32-bit column's max", "snapctl seq create orders --start 1000001 --max 2147483647"},
		{"raise the max of orders", "snapctl seq create orders --max 9007199254740991"},
	},
	"seq next": {
		{"three numbers of orders", "snapctl seq next orders -n 3"},
	},
	"seq show": {
		{"where the ranges of orders went, and this host's lease", "snapctl seq show orders"},
		{"as JSON", "snapctl seq show orders --json"},
	},
	"version": {
		{"the module version and the revision built", "snapctl version"},
	},
	"help": {
		{"next's flags and examples", "snapctl help next"},
		{"a subcommand of seq", "snapctl help seq create"},
	},
}

// printExamples prints the examples of the commands names ("seq
// create"), if they have any.
func printExamples(w io.Writer, names ...string) {
	var ex []example
	for _, n := range names {
		ex = append(ex, examples[n]...)
	}
	if len(ex) == 0 {
		return
	}
	fmt.Fprintf(w, "\nexamples:\n")
	for _, e := range ex {
		fmt.Fprintf(w, "  # %s\n  %s\n", e.what, e.line)
	}
}
