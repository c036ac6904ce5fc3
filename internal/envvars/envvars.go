// Package envvars is the one list of the SNAPID_ environment variables
// that snapid's programs, scripts and tests read, and the check that finds
// the others in an environment: a misspelt variable is never read, and
// one that names the registry (SNAPID_CASSANDRA) left unread runs a host
// without it. A test greps the repository for every SNAPID_ name and
// fails on one missing here.
package envvars

import (
	"slices"
	"strings"
)

// Prefix starts the name of every variable of snapid's.
const Prefix = "SNAPID_"

// known is every SNAPID_ variable read anywhere in the repository, by
// who reads it. A variable of the scripts or the tests is here too: it may
// be exported where snapctl runs (the test command exports some), and is
// not a misspelling.
var known = []string{
	// snapctl and the library (snapid.Open, admin).
	"SNAPID_NAME", "SNAPID_COUNTER", "SNAPID_BINDING_DIR",
	// The registry's settings (cassandra.ConfigFromEnv).
	"SNAPID_CASSANDRA", "SNAPID_KEYSPACE", "SNAPID_CASSANDRA_USERNAME", "SNAPID_CASSANDRA_PASSWORD",
	"SNAPID_CASSANDRA_TLS_CA", "SNAPID_CASSANDRA_TLS_CERT", "SNAPID_CASSANDRA_TLS_KEY",
	"SNAPID_LOCAL_DC", "SNAPID_CONSISTENCY", "SNAPID_SERIAL_CONSISTENCY", "SNAPID_REPLICATION",
	// scripts/cassandra.sh, scripts/cluster-test.sh, scripts/scale.sh.
	"SNAPID_CACHE", "SNAPID_CASSANDRA_DIR", "SNAPID_CASSANDRA_VERSION", "SNAPID_CASSANDRA_TIMEOUT",
	"SNAPID_CASSANDRA_KEEP", "SNAPID_CASSANDRA_HEAP", "SNAPID_CASSANDRA_AUTH", "SNAPID_PAXOS_VARIANT",
	"SNAPID_CLUSTER_DIR", "SNAPID_CLUSTER_HEAP", "SNAPID_CLUSTER_NODES", "SNAPID_CLUSTER_DCS",
	"SNAPID_CLUSTER_TESTS", "SNAPID_CLUSTER_BENCHTIME",
	// scripts/test.sh, scripts/defects.sh, the Makefile.
	"SNAPID_AUTH_TEST", "SNAPID_OUTAGE_TEST", "SNAPID_REQUIRE_ROOT", "SNAPID_BUSY_LOOPS",
	"SNAPID_LOAD_ROUNDS", "SNAPID_FUZZTIME", "SNAPID_DEFECT_HISTORIES",
	// The simulator (internal/sim).
	"SNAPID_SIM_SEED", "SNAPID_SIM_HISTORIES", "SNAPID_SIM_DURATION", "SNAPID_SIM_SERIAL",
	"SNAPID_SIM_FIRST", "SNAPID_SIM_STEPS", "SNAPID_SIM_STEP_LIMIT", "SNAPID_SIM_SECTOR", "SNAPID_SIM_WORKERS",
	// Tests: the test node, and the child processes tests start.
	"SNAPID_TEST_CASSANDRA", "SNAPID_TEST_CASSANDRA_TLS", "SNAPID_TEST_CHILD", "SNAPID_TEST_AS_NOBODY",
	"SNAPID_TEST_MP_ROLE", "SNAPID_TEST_MP_PATH", "SNAPID_TEST_MP_NAME", "SNAPID_TEST_MP_COUNT",
	"SNAPID_TEST_MP_GOROUTINES", "SNAPID_TEST_MP_SYNC", "SNAPID_TEST_MP_BLOCK", "SNAPID_TEST_MP_SHARDS",
	"SNAPID_TEST_MP_FORM",
	"SNAPID_T_KS", "SNAPID_T_HOSTS", "SNAPID_T_NAME", "SNAPID_T_COUNTER", "SNAPID_T_RECORDS", "SNAPID_T_MACHINE",
	"SNAPID_T_N", "SNAPID_T_GO", "SNAPID_T_G", "SNAPID_T_STEP", "SNAPID_T_HANG", "SNAPID_T_SEQ",
	"SNAPID_T_LEASE", "SNAPID_T_FLOOR", "SNAPID_T_BLOCK", "SNAPID_T_SYNC",
	// The benchmarks (module bench).
	"SNAPID_BENCH_WORKER", "SNAPID_BENCH_MODE", "SNAPID_BENCH_COUNTER", "SNAPID_BENCH_COUNT",
	"SNAPID_BENCH_RECORDS", "SNAPID_BENCH_OUT",
}

// Known returns every SNAPID_ variable snapid reads, sorted.
func Known() []string {
	k := slices.Clone(known)
	slices.Sort(k)
	return k
}

// IsKnown reports whether name is a variable snapid reads.
func IsKnown(name string) bool { return slices.Contains(known, name) }

// Var is a variable of an environment that snapid does not read.
type Var struct {
	Name    string
	Closest string // the known variable it likely misspells; "" if none is close
}

// Unknown returns, sorted by name, the variables of environ (os.Environ's
// form, "KEY=value") whose name starts with SNAPID_ in any case and that
// snapid does not read. Only names are looked at, never values (a
// password may be among them).
func Unknown(environ []string) []Var {
	var out []Var
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if len(name) < len(Prefix) || !strings.EqualFold(name[:len(Prefix)], Prefix) || IsKnown(name) || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, Var{Name: name, Closest: Closest(name)})
	}
	slices.SortFunc(out, func(a, b Var) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Closest returns the known variable that name most likely misspells:
// the same name in another case; else the nearest by edit distance
// (letters left out, added, changed or swapped), if it is close for its
// length; else the longest known variable that name begins with, then
// "_" (SNAPID_CASSANDRA for SNAPID_CASSANDRA_ followed by a word of one's
// own). It returns "" when none fits.
func Closest(name string) string {
	upper := strings.ToUpper(name)
	if upper != name && IsKnown(upper) {
		return upper
	}
	best, bestDist := "", 0
	for _, k := range Known() {
		d := distance(upper, k)
		if best == "" || d < bestDist {
			best, bestDist = k, d
		}
	}
	// Close: at most one edit in a short name (after SNAPID_), two in a
	// longer one.
	limit := 1
	if len(upper)-len(Prefix) > 5 {
		limit = 2
	}
	if best != "" && bestDist <= limit {
		return best
	}
	prefix := ""
	for _, k := range known {
		if strings.HasPrefix(upper, k+"_") && len(k) > len(prefix) {
			prefix = k
		}
	}
	return prefix
}

// distance is the optimal string alignment distance of a and b: the
// fewest letters inserted, deleted, replaced or swapped with their
// neighbour to turn one into the other.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
