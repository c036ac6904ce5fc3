package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/registry"
)

// Statuses of a ReplicationReport.
const (
	// ReplicationOK: the registry goes on with any one node down.
	ReplicationOK = "ok"
	// ReplicationWarning: the cluster has a single node, so nothing
	// survives its loss and no replication can change that: fine for
	// development and tests, not for production. Or the replication could
	// not be understood (a class this package does not know).
	ReplicationWarning = "warning"
	// ReplicationAttention: the registry stops (or cannot work at all)
	// when one node is down, and losing one disk can lose claims and
	// marks; the report says how to fix it.
	ReplicationAttention = "attention"
)

// ProblemFragileReplication is the kind of the problem snapctl
// check-names reports (with package admin's Problem kinds) for a
// registry keyspace whose ReplicationReport needs attention.
const ProblemFragileReplication = "fragile_replication"

// ReplicationReport is what CheckReplication finds about the registry
// keyspace: can the registry go on when any one node of the cluster is
// down? Every claim, extension and release is a Paxos round at SERIAL,
// which needs a quorum (more than half) of all the replicas of a name's
// row, every data centre counted, and a commit at the registry's
// consistency.
type ReplicationReport struct {
	Keyspace string `json:"keyspace"`
	// Replication is the keyspace's replication as the cluster stores it
	// (system_schema.keyspaces).
	Replication map[string]string `json:"replication"`
	// Nodes is the number of nodes per data centre (system.local and
	// system.peers: every node the cluster knows, up or down).
	Nodes map[string]int `json:"nodes_per_dc"`
	// Replicas is how many replicas each name's row has (all data
	// centres), Quorum how many of them a SERIAL round needs.
	Replicas int `json:"replicas"`
	Quorum   int `json:"quorum"`
	// Consistency is the commit consistency the report was made for.
	Consistency string `json:"consistency"`
	// Status is ReplicationOK, ReplicationWarning or ReplicationAttention;
	// Detail says what it means and Fix what to do (both empty when OK).
	Status string `json:"status"`
	// NodesIncomplete says why the cluster's view of its nodes may lack
	// some (nodes still joining): Nodes may then count too few, and Fix
	// says to wait rather than to change the replication.
	NodesIncomplete string `json:"nodes_incomplete,omitempty"`
	Detail          string `json:"detail,omitempty"`
	Fix             string `json:"fix,omitempty"`
	// Sequences is how each data centre keeps sequence ranges and leases.
	Sequences []SequenceDC `json:"sequences"`
}

// CheckReplication reads the registry keyspace's replication and the
// cluster's nodes per data centre and reports whether the registry
// survives the loss of any one node with the registry's consistency
// (snapctl check-names shows it). Errors wrap registry.ErrRegistry. It is
// safe for concurrent use.
func (r *Registry) CheckReplication(ctx context.Context) (ReplicationReport, error) {
	repl, err := r.keyspaceReplication(ctx)
	if err != nil {
		return ReplicationReport{}, fmt.Errorf("snapid: %w: reading the replication of keyspace %s: %w", registry.ErrRegistry, r.ks, err)
	}
	if repl == nil {
		return ReplicationReport{}, fmt.Errorf("snapid: %w: keyspace %s does not exist", registry.ErrRegistry, r.ks)
	}
	view, err := r.settledNodes(ctx, func(nodes map[string]int) bool {
		return assessReplication(r.ks, repl, nodes, r.cons, r.localDC).Status != ReplicationAttention
	})
	if err != nil {
		return ReplicationReport{}, fmt.Errorf("snapid: %w: reading the cluster's nodes: %w", registry.ErrRegistry, err)
	}
	rep := assessReplication(r.ks, repl, view.nodes, r.cons, r.localDC)
	if rep.Status == ReplicationAttention && view.incomplete != "" {
		rep.NodesIncomplete = view.incomplete
		rep.Fix = incompleteAdvice(view) + ", then check again"
	}
	return rep, nil
}

// settledNodes reads the cluster's nodes; when ok says no to them, it
// reads them again, letting the view settle (nodes still joining), so that
// a refusal is made from a settled view or says that the view was not.
func (r *Registry) settledNodes(ctx context.Context, ok func(nodes map[string]int) bool) (nodeView, error) {
	view, err := r.nodes(ctx, false)
	if err != nil || ok(view.nodes) {
		return view, err
	}
	return r.nodes(ctx, true)
}

// incompleteAdvice says that view may lack nodes, and what to do.
func incompleteAdvice(view nodeView) string {
	return fmt.Sprintf("the cluster's view of its nodes is incomplete (%s), so it may have more nodes than the %s counted: "+
		"wait until every node has joined (nodetool status shows each UN)", view.incomplete, renderNodes(view.nodes))
}

// sameFactors reports whether replications a and b give every data centre
// of nodes the same number of replicas with the same class.
func sameFactors(a, b map[string]string, nodes map[string]int) bool {
	ra, sa, oka := replicationFactors(a, nodes)
	rb, sb, okb := replicationFactors(b, nodes)
	if !oka || !okb || sa != sb {
		return false
	}
	for _, dc := range append(sortedKeys(ra), sortedKeys(rb)...) {
		if ra[dc] != rb[dc] {
			return false
		}
	}
	return true
}

// keyspaceReplication returns the registry keyspace's stored replication,
// or nil if there is no such keyspace.
func (r *Registry) keyspaceReplication(ctx context.Context) (map[string]string, error) {
	if r.session == nil {
		return nil, errors.New("no session")
	}
	var m map[string]string
	err := retryRead(ctx, r.log, "reading the replication", r.ks, func(ctx context.Context) error {
		return r.session.Query(`SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?`, r.ks).ScanContext(ctx, &m)
	})
	if errors.Is(err, gocql.ErrNotFound) {
		return nil, nil
	}
	return m, err
}

// replicationFactors returns the replicas per data centre of repl on a
// cluster with nodes per data centre (SimpleStrategy: simple is true and
// the factor is under ""), or ok=false for a map it does not understand.
func replicationFactors(repl map[string]string, nodes map[string]int) (rf map[string]int, simple, ok bool) {
	class := strings.TrimPrefix(repl["class"], "org.apache.cassandra.locator.")
	rf = map[string]int{}
	switch class {
	case "SimpleStrategy":
		n, err := strconv.Atoi(repl["replication_factor"])
		if err != nil || n < 0 {
			return nil, false, false
		}
		rf[""] = n
		return rf, true, true
	case "NetworkTopologyStrategy":
		def := -1
		for k, v := range repl {
			if k == "class" {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, false, false // transient replicas ("3/1") and the like
			}
			if k == "replication_factor" {
				def = n
				continue
			}
			rf[k] = n
		}
		if def >= 0 { // a factor for every data centre not named
			for dc := range nodes {
				if _, named := rf[dc]; !named {
					rf[dc] = def
				}
			}
		}
		return rf, false, true
	}
	return nil, false, false
}

// assessReplication judges replication repl (as given to CREATE KEYSPACE
// or as stored) of keyspace ks on a cluster with nodes per data centre,
// for commits at cons from hosts of localDC. A node holds at most one
// replica of a row, so losing one node loses at most one replica.
func assessReplication(ks string, repl map[string]string, nodes map[string]int, cons gocql.Consistency, localDC string) ReplicationReport {
	if cons == gocql.Any {
		cons = gocql.Quorum
	}
	rep := ReplicationReport{Keyspace: ks, Replication: repl, Nodes: nodes, Consistency: cons.String(), Status: ReplicationOK}
	total := 0
	for _, n := range nodes {
		total += n
	}
	rf, simple, ok := replicationFactors(repl, nodes)
	if !ok {
		rep.Status = ReplicationWarning
		rep.Detail = fmt.Sprintf("keyspace %s: replication %s is not one this check understands; check by hand that every name's row has 3 replicas", ks, renderMap(repl))
		return rep
	}
	var live int
	var short []string
	rep.Replicas, live, short = liveReplicas(rf, simple, nodes, total)
	rep.Quorum = rep.Replicas/2 + 1
	problems := serialProblems(rep.Quorum, rep.Replicas, live, total, short)
	problems = append(problems, commitProblems(cons, simple, rf, nodes, total, localDC)...)
	var seqProblems []string
	rep.Sequences, seqProblems = assessSequences(repl, rf, nodes, rep.Replicas, rep.Quorum)
	if total > 1 {
		problems = append(problems, seqProblems...)
	}
	if len(problems) > 0 {
		rep.Status = ReplicationAttention
		rep.Detail = fmt.Sprintf("keyspace %s (replication %s) cannot survive the loss of one node: %s", ks, renderMap(repl), strings.Join(problems, "; "))
		rep.Fix = replicationFix(ks, repl, rf, simple, nodes, cons)
		return rep
	}
	if total <= 1 {
		rep.Status = ReplicationWarning
		rep.Detail = fmt.Sprintf("keyspace %s has %d replica(s) on a one-node cluster: nothing survives the loss of that node (while it is down no name can be claimed, extended or released; losing its disk loses every claim and mark); fine for development and tests, not for production",
			ks, rep.Replicas)
		rep.Fix = "for production use at least 3 nodes per data centre and 3 replicas in each (snapctl setup --replication dc1:3,dc2:3); see docs/production.md"
	}
	return rep
}

// liveReplicas counts the replicas of each name's row under factors rf
// (simple: SimpleStrategy's, under "") on a cluster with nodes per data
// centre (total in all): how many the replication asks for, how many
// exist (a data centre holds at most as many as it has nodes), and why
// some do not (short).
func liveReplicas(rf map[string]int, simple bool, nodes map[string]int, total int) (replicas, live int, short []string) {
	short = []string{}
	if simple {
		live = min(rf[""], total)
		if live < rf[""] {
			short = append(short, fmt.Sprintf("the cluster has %s for %d replicas", countOf(total, "node"), rf[""]))
		}
		return rf[""], live, short
	}
	for _, dc := range sortedKeys(rf) {
		replicas += rf[dc]
		live += min(rf[dc], nodes[dc])
		switch {
		case rf[dc] > 0 && nodes[dc] == 0:
			short = append(short, fmt.Sprintf("data centre %s is not in the cluster (its data centres: %s)", dc, strings.Join(sortedKeys(nodes), ", ")))
		case nodes[dc] < rf[dc]:
			short = append(short, fmt.Sprintf("data centre %s has %s for %d replicas", dc, countOf(nodes[dc], "node"), rf[dc]))
		}
	}
	return replicas, live, short
}

// serialProblems says why SERIAL rounds, which need quorum of the
// replicas of a name's row (live of them exist, short says why not all,
// on total nodes), cannot go on with one node down; nil when they can.
func serialProblems(quorum, replicas, live, total int, short []string) []string {
	switch {
	case live < quorum:
		return []string{fmt.Sprintf("a SERIAL round needs %d of the %d replicas of a name's row, and only %d exist (%s): no claim can succeed even with every node up",
			quorum, replicas, live, strings.Join(short, "; "))}
	case total > 1 && replicas == 1:
		return []string{fmt.Sprintf("every name's row has one replica on a cluster of %d nodes: while that node is down nothing can be claimed, extended or released, and losing its disk loses claims and marks (a name could then be claimed twice, and a lowered mark let ids repeat)",
			total)}
	case total > 1 && live-1 < quorum:
		detail := ""
		if len(short) > 0 {
			detail = " (" + strings.Join(short, "; ") + ")"
		}
		return []string{fmt.Sprintf("a SERIAL round needs %d of the %d replicas of a name's row%s: with one of the nodes holding them down, claims, extensions and releases stop",
			quorum, live, detail)}
	}
	return nil
}

// commitProblems says why commits at cons, which need a quorum of the
// replicas in each data centre they count (see commitDCs), cannot go on
// with one node down; nil when they can.
func commitProblems(cons gocql.Consistency, simple bool, rf, nodes map[string]int, total int, localDC string) []string {
	var problems []string
	if cons == gocql.EachQuorum && simple {
		problems = append(problems, "consistency EACH_QUORUM needs NetworkTopologyStrategy (Cassandra refuses it on SimpleStrategy)")
	}
	for _, dc := range commitDCs(cons, simple, rf, localDC) {
		q, have := rf[dc]/2+1, min(rf[dc], nodes[dc])
		switch {
		case have < q:
			problems = append(problems, fmt.Sprintf("commits at %s need %d replicas in data centre %s, which has %d", cons, q, dc, have))
		case total > 1 && have-1 < q:
			problems = append(problems, fmt.Sprintf("commits at %s need %d of the %d replicas in data centre %s: with one of its nodes down, changes stop", cons, q, have, dc))
		}
	}
	return problems
}

// commitDCs returns the data centres whose own quorum a commit at cons
// needs: localDC's at LOCAL_QUORUM (NetworkTopologyStrategy only), every
// one with replicas at EACH_QUORUM, none otherwise.
func commitDCs(cons gocql.Consistency, simple bool, rf map[string]int, localDC string) []string {
	switch cons {
	case gocql.LocalQuorum:
		if !simple {
			return []string{localDC}
		}
	case gocql.EachQuorum:
		var dcs []string
		for _, dc := range sortedKeys(rf) {
			if rf[dc] > 0 {
				dcs = append(dcs, dc)
			}
		}
		return dcs
	}
	return nil
}

// suggestReplication returns the replication the keyspace should have:
// NetworkTopologyStrategy with 3 replicas in each data centre of the
// replication that the cluster has (or in each of the cluster's), fewer
// where a data centre has fewer nodes; enough is false when even that
// cannot survive the loss of one node (too few nodes).
func suggestReplication(rf map[string]int, simple bool, nodes map[string]int, cons gocql.Consistency) (want map[string]string, enough bool) {
	var dcs []string
	if !simple {
		for _, dc := range sortedKeys(rf) {
			if rf[dc] > 0 && nodes[dc] > 0 {
				dcs = append(dcs, dc)
			}
		}
	}
	if len(dcs) == 0 {
		dcs = sortedKeys(nodes)
	}
	want = map[string]string{"class": "NetworkTopologyStrategy"}
	live, small := 0, false
	for _, dc := range dcs {
		n := min(3, nodes[dc])
		want[dc] = strconv.Itoa(n)
		live += n
		small = small || n < 3
	}
	perDC := cons == gocql.LocalQuorum || cons == gocql.EachQuorum
	return want, live >= 3 && !(small && perDC)
}

// replicationFix says how to make an existing keyspace survive the loss of
// one node: the replication to ALTER it to, and the repairs that must
// follow.
func replicationFix(ks string, repl map[string]string, rf map[string]int, simple bool, nodes map[string]int, cons gocql.Consistency) string {
	want, enough := suggestReplication(rf, simple, nodes, cons)
	if enough && sameFactors(want, repl, nodes) {
		return fmt.Sprintf("the cluster shows %s; if nodes are still joining, wait until nodetool status shows each UN and check again",
			renderNodes(nodes))
	}
	if !enough {
		return fmt.Sprintf("add nodes: surviving the loss of one node needs at least 3 nodes holding replicas (3 in each data centre for %s); "+
			"then ALTER KEYSPACE \"%s\" WITH replication = {'class': 'NetworkTopologyStrategy', '<dc>': '3', …} and run \"nodetool repair --full %s\" on each node",
			cons, ks, ks)
	}
	return fmt.Sprintf("ALTER KEYSPACE \"%s\" WITH replication = %s, raising the factors in steps that each add fewer replicas than the new quorum "+
		"(from 1 replica: to 2, then 3), and after each step run \"nodetool repair --full %s\" on every node, one at a time, before the next: "+
		"until the repair ends the new replicas are empty, and a SERIAL round made mostly of them could miss a claim",
		ks, renderMap(want), ks)
}

// fragileError is the refusal to create keyspace ks with rep's
// replication.
func fragileError(rep ReplicationReport, view nodeView, cons gocql.Consistency) error {
	nodes := view.nodes
	rf, simple, _ := replicationFactors(rep.Replication, nodes)
	want, enough := suggestReplication(rf, simple, nodes, cons)
	var advice string
	switch {
	case view.incomplete != "":
		// Never suggest from a view that may lack nodes: the suggestion
		// could be what was asked for.
		advice = incompleteAdvice(view) + " and try again"
	case enough && sameFactors(want, rep.Replication, nodes):
		// The suggestion would be what was asked for.
		advice = fmt.Sprintf("the cluster shows %s; if nodes are still joining, wait until nodetool status shows each UN and try again",
			renderNodes(nodes))
	case !enough:
		advice = fmt.Sprintf("the cluster has too few nodes (%s) for a registry that survives the loss of one (3 holding replicas at least); add nodes",
			renderNodes(nodes))
	default:
		advice = fmt.Sprintf("create it with replication %s (snapctl --replication %s)", renderMap(want), flagForm(want))
	}
	return fmt.Errorf("snapid: %w: Cassandra registry: %w: not creating %s; %s, or set AllowFragileReplication "+
		"(snapctl --allow-fragile-replication) to create it anyway", registry.ErrInvalidOption, ErrFragileReplication, rep.Detail, advice)
}

// flagForm renders a NetworkTopologyStrategy map as snapctl's
// --replication value (dc1:3,dc2:3).
func flagForm(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if k != "class" {
			parts = append(parts, k+":"+m[k])
		}
	}
	return strings.Join(parts, ",")
}

// renderMap renders a replication map as CQL, keys sorted, class first.
func renderMap(m map[string]string) string {
	var b strings.Builder
	b.WriteString("{")
	if c, ok := m["class"]; ok {
		b.WriteString("'class': '" + strings.TrimPrefix(c, "org.apache.cassandra.locator.") + "'")
	}
	for _, k := range sortedKeys(m) {
		if k == "class" {
			continue
		}
		if b.Len() > 1 {
			b.WriteString(", ")
		}
		b.WriteString("'" + k + "': '" + m[k] + "'")
	}
	b.WriteString("}")
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// countOf renders n things: "1 node", "2 nodes".
func countOf(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
