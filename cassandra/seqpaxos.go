package cassandra

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// SequenceLocalReplicas is the fewest replicas of the registry keyspace a
// data centre must hold (NetworkTopologyStrategy) for its sequence ranges
// and leases to be kept at LOCAL_SERIAL, among its own replicas.
//
// A commit at LOCAL_QUORUM then reaches at least two of them, so that one
// replica that loses its data (a lost disk, the last seconds of a periodic
// commit log) or is restored from an older snapshot leaves another with
// every commit, which a serial read (a quorum) sees; the data centre goes
// on leasing with one of its nodes down, and while cut off from the
// others.
//
// A data centre with fewer would keep its sequence state on one node
// (whose loss would make numbers it leased be leased again), or stop
// leasing whenever one of its two nodes is down, as in every rolling
// restart. Its partition is read and written at SERIAL instead, with
// commits at QUORUM among all the keyspace's replicas: it survives the
// loss of any one replica and, with three or more in all, one node down,
// but it leases only while it reaches a quorum of all of them. So is one
// under SimpleStrategy, which ignores data centres.
const SequenceLocalReplicas = 3

// dcPaxos is how a sequence's data-centre partition (dc:<D>) is read and
// written: at LOCAL_SERIAL among D's replicas (the zero value), or, with
// global, at SERIAL among all of them. Every Registry of a data centre
// picks the same from the keyspace's replication, so a partition sees one
// kind of Paxos only.
type dcPaxos struct{ global bool }

func (p dcPaxos) serial() gocql.SerialConsistency {
	if p.global {
		return gocql.Serial
	}
	return gocql.LocalSerial
}

func (p dcPaxos) commit() gocql.Consistency {
	if p.global {
		return gocql.Quorum
	}
	return gocql.LocalQuorum
}

// read is the consistency of a serial read of the partition.
func (p dcPaxos) read() gocql.Consistency { return gocql.Consistency(p.serial()) }

func (p dcPaxos) String() string {
	if p.global {
		return "SERIAL"
	}
	return "LOCAL_SERIAL"
}

// paxosFor is how data centre dc's sequence partitions are kept under the
// keyspace's replication repl (as stored): locally when dc holds at least
// SequenceLocalReplicas replicas under NetworkTopologyStrategy, and the
// replicas it holds.
func paxosFor(repl map[string]string, dc string) (dcPaxos, int) {
	class := strings.TrimPrefix(repl["class"], "org.apache.cassandra.locator.")
	if class != "NetworkTopologyStrategy" {
		return dcPaxos{global: true}, 0
	}
	n, err := strconv.Atoi(repl[dc])
	if err != nil || n < SequenceLocalReplicas {
		return dcPaxos{global: true}, max(n, 0)
	}
	return dcPaxos{}, n
}

// seqPaxos decides how data centre dc's partitions are kept, from the
// keyspace's replication as stored, which it returns rendered.
func (r *Registry) seqPaxos(ctx context.Context, dc string) (dcPaxos, string, error) {
	repl, err := r.keyspaceReplication(ctx)
	if err != nil {
		return dcPaxos{}, "", fmt.Errorf("snapid: %w: reading keyspace %s's replication, which decides how data centre %q keeps sequences: %w",
			registry.ErrRegistry, r.ks, dc, err)
	}
	if repl == nil {
		return dcPaxos{}, "", fmt.Errorf("snapid: %w: keyspace %s does not exist (create it: snapctl setup)", registry.ErrRegistry, r.ks)
	}
	decide := paxosFor
	if r.seqs.paxosFor != nil {
		decide = r.seqs.paxosFor
	}
	p, _ := decide(repl, dc)
	return p, renderMap(repl), nil
}

// dcAddrs returns the addresses of the nodes of data centre dc that the
// cluster lists (system.local and system.peers through the Registry's
// session), so that the data centre's session can reach them when the
// configured contact points are all in other data centres. A data centre
// the cluster does not list is an error naming the ones it does.
func (r *Registry) dcAddrs(ctx context.Context, dc string) ([]string, error) {
	byDC := map[string][]string{}
	var d string
	var rpc net.IP
	if err := r.session.Query(`SELECT data_center, rpc_address FROM system.local`).ScanContext(ctx, &d, &rpc); err != nil {
		return nil, fmt.Errorf("snapid: %w: reading the cluster's nodes: %w", registry.ErrRegistry, err)
	}
	byDC[d] = append(byDC[d], rpc.String())
	iter := r.session.Query(`SELECT data_center, rpc_address FROM system.peers`).IterContext(ctx)
	for iter.Scan(&d, &rpc) {
		if rpc != nil && !rpc.IsUnspecified() {
			byDC[d] = append(byDC[d], rpc.String())
		}
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("snapid: %w: reading the cluster's nodes: %w", registry.ErrRegistry, err)
	}
	if len(byDC[dc]) == 0 {
		var have []string
		for d, addrs := range byDC {
			sort.Strings(addrs)
			have = append(have, fmt.Sprintf("%s (%s)", d, strings.Join(addrs, ", ")))
		}
		sort.Strings(have)
		return nil, fmt.Errorf("snapid: %w: the cluster has no node in data centre %q, this host's for sequences (Config.LocalDC, SNAPID_LOCAL_DC); "+
			"its data centres are %s: set the data centre this host is in", registry.ErrRegistry, dc, strings.Join(have, "; "))
	}
	return byDC[dc], nil
}

// dcCAS sends a conditional statement or batch on the data centre's
// partition, at its serial consistency (see dcPaxos), once checkPaxos
// finds that consistency still the keyspace's.
func (r *Registry) dcCAS(ctx context.Context, q cql.SeqQuerier, stmts ...cql.SeqStmt) (bool, error) {
	if err := r.checkPaxos(ctx); err != nil {
		return false, err
	}
	p := r.dcPaxos()
	return q.CASBatch(ctx, p.serial(), p.commit(), stmts...)
}

// paxosRecheck is how long checkPaxos trusts the keyspace's replication
// it last read.
const paxosRecheck = 10 * time.Second

// checkPaxos reads the keyspace's replication again, at most once per
// paxosRecheck, and refuses (ErrRegistry) to read or write the data
// centre's partition once it changed: the partition may now be kept the
// other way (Registries opened before and after an ALTER KEYSPACE would
// run SERIAL and LOCAL_SERIAL on it, and the two need not share a
// quorum), or the same way among replicas some of which are new and empty
// until a full repair. A Registry without a session (the simulated
// cluster's) has nothing to read.
func (r *Registry) checkPaxos(ctx context.Context) error {
	st := &r.seqs
	st.mu.Lock()
	fresh := r.session == nil || r.now().Sub(st.paxosAt) < paxosRecheck
	had, hadRepl, dc := st.paxos, st.repl, st.dc
	st.mu.Unlock()
	if fresh {
		return nil
	}
	now, repl, err := r.seqPaxos(ctx, dc)
	if err != nil {
		return err
	}
	if now != had || repl != hadRepl {
		return fmt.Errorf("snapid: %w: keyspace %s's replication changed while this program ran, from %s to %s "+
			"(data centre %q's sequences kept at %s, now at %s); nothing was leased: stop this data centre's programs, "+
			"run the full repair the change needs, and start them again", registry.ErrRegistry, r.ks, hadRepl, repl, dc, had, now)
	}
	st.mu.Lock()
	st.paxosAt = r.now()
	st.mu.Unlock()
	return nil
}

// SequenceDC is how a data centre of the cluster keeps its sequence ranges
// and leases under the keyspace's replication (see SequenceLocalReplicas).
type SequenceDC struct {
	DC string `json:"dc"`
	// Replicas is how many replicas of the keyspace the data centre
	// holds (NetworkTopologyStrategy; 0 under SimpleStrategy).
	Replicas int `json:"replicas"`
	// Paxos is LOCAL_SERIAL (among the data centre's replicas) or SERIAL
	// (among all of them).
	Paxos string `json:"paxos"`
	// LeasesCutOff says whether its hosts go on leasing while it is cut
	// off from the other data centres.
	LeasesCutOff bool `json:"leases_while_cut_off"`
	// Detail says what that means.
	Detail string `json:"detail"`
}

// assessSequences says, for each data centre of nodes, how it keeps
// sequences under replication repl (factors rf), and the problems that
// stop its hosts from leasing with one of its nodes down. replicas and
// quorum are those of a SERIAL round among all the keyspace's replicas.
func assessSequences(repl map[string]string, rf, nodes map[string]int, replicas, quorum int) ([]SequenceDC, []string) {
	var out []SequenceDC
	var problems []string
	for _, dc := range sortedKeys(nodes) {
		p, n := paxosFor(repl, dc)
		s := SequenceDC{DC: dc, Replicas: max(rf[dc], n), Paxos: p.String()}
		if p.global {
			s.Detail = fmt.Sprintf("kept at SERIAL among all %d replicas: its hosts lease while they reach %d of them, not while the data centre is cut off from a quorum; "+
				"%d replicas in %s would keep them there (at LOCAL_SERIAL)", replicas, quorum, SequenceLocalReplicas, dc)
			out = append(out, s)
			continue
		}
		s.LeasesCutOff = true
		q, have := n/2+1, min(n, nodes[dc])
		s.Detail = fmt.Sprintf("kept at LOCAL_SERIAL among its %d replicas: its hosts lease while they reach %d of them, also while the data centre is cut off", n, q)
		if have-1 < q {
			problems = append(problems, fmt.Sprintf("sequences in data centre %s need %d of its %d replicas, and it has %s: with one of them down, its hosts cannot lease",
				dc, q, n, countOf(nodes[dc], "node")))
		}
		out = append(out, s)
	}
	return out, problems
}
