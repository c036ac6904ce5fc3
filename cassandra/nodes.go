package cassandra

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// How long a decision that found too few nodes waits for the cluster's
// view of its nodes to settle (nodes still joining, gossip not yet
// agreed), within the caller's context; and the pause between readings.
const (
	nodeSettleBudget = 20 * time.Second
	nodeSettlePause  = 250 * time.Millisecond
	// nodeAgreeing readings in a row that agree make a view settled (each
	// may reach another coordinator).
	nodeAgreeing = 3
)

// nodeView is the cluster's nodes per data centre as this process sees
// them. incomplete says why the view may lack nodes (empty: every reading
// agreed and every configured host is in it).
type nodeView struct {
	nodes      map[string]int
	incomplete string
}

// nodeReading is one coordinator's view: system.local and system.peers.
type nodeReading struct {
	coordinator string
	dcOf        map[string]string // host id → data centre
	addrs       map[string]bool   // every address of every node
	partial     []string          // peers listed without host id or data centre (still joining)
}

// readNodes counts the cluster's nodes per data centre: every node that
// any coordinator lists in system.local or system.peers, up or down (a
// node that is down still holds its replicas), merged by host id. It
// reads until nodeAgreeing readings in a row agree, with no peer row
// half-filled and every host of contacts (the configured contact points)
// in the view; without wait it stops after nodeAgreeing readings, with
// wait it goes on, pausing, for up to nodeSettleBudget within ctx. A view
// that did not settle says why in incomplete.
func readNodes(ctx context.Context, s *gocql.Session, contacts []string, wait bool) (nodeView, error) {
	if s == nil {
		return nodeView{}, fmt.Errorf("no session")
	}
	return settleNodes(ctx, func(ctx context.Context) (nodeReading, error) { return readNodesOnce(ctx, s) },
		contactAddrs(ctx, contacts), wait)
}

// settleNodes is readNodes' loop over readings made by once.
func settleNodes(ctx context.Context, once func(context.Context) (nodeReading, error), contacts map[string][]string, wait bool) (nodeView, error) {
	union := map[string]string{}
	addrs := map[string]bool{}
	deadline := time.Now().Add(nodeSettleBudget)
	agreeing := 0
	for n := 1; ; n++ {
		rd, err := readNodesRetrying(ctx, once)
		if err != nil {
			return nodeView{}, err
		}
		if mergeReading(union, addrs, rd) {
			agreeing = 0 // the readings before this one lacked a node
		}
		why := readingIncomplete(rd, union, contacts, addrs)
		if why == "" {
			agreeing++
		} else {
			agreeing = 0
		}
		switch {
		case agreeing >= nodeAgreeing:
			return viewOf(union, ""), nil
		case why == "" && n < 2*nodeAgreeing:
			continue // the next reading may reach another coordinator
		case !wait && n >= nodeAgreeing, wait && time.Now().After(deadline):
			if why == "" {
				why = "the readings did not agree"
			}
			return viewOf(union, why), nil
		}
		if !pauseReading(ctx) {
			return viewOf(union, why), nil
		}
	}
}

// readNodesRetrying makes one reading with once, retried as reads are.
func readNodesRetrying(ctx context.Context, once func(context.Context) (nodeReading, error)) (nodeReading, error) {
	var rd nodeReading
	err := retryRead(ctx, nil, "reading the cluster's nodes", "system.peers", func(ctx context.Context) error {
		var rerr error
		rd, rerr = once(ctx)
		return rerr
	})
	return rd, err
}

// mergeReading adds reading rd's nodes to union (host id → data centre)
// and its addresses to addrs, and reports whether union grew.
func mergeReading(union map[string]string, addrs map[string]bool, rd nodeReading) (grew bool) {
	for id, dc := range rd.dcOf {
		if _, known := union[id]; !known {
			union[id], grew = dc, true
		}
	}
	for a := range rd.addrs {
		addrs[a] = true
	}
	return grew
}

// readingIncomplete says why reading rd may lack nodes: peers still
// joining, a coordinator that knows fewer than union, or contact points
// none of whose addresses is in addrs; empty when it does not.
func readingIncomplete(rd nodeReading, union map[string]string, contacts map[string][]string, addrs map[string]bool) string {
	switch {
	case len(rd.partial) > 0:
		return fmt.Sprintf("system.peers lists %s without a host id or data centre (still joining?)", strings.Join(rd.partial, ", "))
	case len(rd.dcOf) != len(union):
		return fmt.Sprintf("the nodes disagree about the cluster: one coordinator knows %d nodes, %d are known in all", len(rd.dcOf), len(union))
	}
	if missing := missingContacts(contacts, addrs); len(missing) > 0 {
		return fmt.Sprintf("configured host(s) %s are not in the cluster's view", strings.Join(missing, ", "))
	}
	return ""
}

// pauseReading waits nodeSettlePause before the next reading; false when
// ctx ended first.
func pauseReading(ctx context.Context) bool {
	t := time.NewTimer(nodeSettlePause)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

func viewOf(dcOf map[string]string, incomplete string) nodeView {
	nodes := map[string]int{}
	for _, dc := range dcOf {
		nodes[dc]++
	}
	return nodeView{nodes: nodes, incomplete: incomplete}
}

// readNodesOnce reads the coordinator's own row in system.local and every
// other node it knows in system.peers. The two queries may reach
// different coordinators, so rows are merged by host id, and the
// coordinator of the peers query, which system.peers does not list, is
// added as the driver knows it.
func readNodesOnce(ctx context.Context, s *gocql.Session) (nodeReading, error) {
	rd := nodeReading{dcOf: map[string]string{}, addrs: map[string]bool{}}
	var id gocql.UUID
	var dc string
	var peer, rpc net.IP
	if err := s.Query(`SELECT host_id, data_center, broadcast_address, rpc_address FROM system.local`).ScanContext(ctx, &id, &dc, &peer, &rpc); err != nil {
		return rd, fmt.Errorf("system.local: %w", err)
	}
	rd.dcOf[id.String()] = dc
	rd.addIPs(peer, rpc)
	iter := s.Query(`SELECT peer, host_id, data_center, rpc_address FROM system.peers`).IterContext(ctx)
	for iter.Scan(&peer, &id, &dc, &rpc) {
		rd.addIPs(peer, rpc)
		if id == (gocql.UUID{}) || dc == "" {
			rd.partial = append(rd.partial, peer.String())
			continue
		}
		rd.dcOf[id.String()] = dc
	}
	if h := iter.Host(); h != nil && h.HostID() != "" && h.DataCenter() != "" {
		rd.coordinator = h.HostID()
		rd.dcOf[h.HostID()] = h.DataCenter()
		rd.addIPs(h.ConnectAddress(), h.BroadcastAddress(), h.RPCAddress())
	}
	if err := iter.Close(); err != nil {
		return rd, fmt.Errorf("system.peers: %w", err)
	}
	return rd, nil
}

func (rd *nodeReading) addIPs(ips ...net.IP) {
	for _, ip := range ips {
		if ip != nil && !ip.IsUnspecified() {
			rd.addrs[ip.String()] = true
		}
	}
}

// contactAddrs resolves contact points ("host" or "host:port") to their
// addresses; a name that does not resolve is left out (it is no evidence
// of a missing node).
func contactAddrs(ctx context.Context, contacts []string) map[string][]string {
	out := map[string][]string{}
	for _, c := range contacts {
		host := c
		if h, _, err := net.SplitHostPort(c); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); ip != nil {
			out[c] = []string{ip.String()}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ips, err := net.DefaultResolver.LookupIPAddr(lctx, host)
		cancel()
		if err != nil || len(ips) == 0 {
			continue
		}
		for _, ip := range ips {
			out[c] = append(out[c], ip.IP.String())
		}
	}
	return out
}

// missingContacts returns the contact points none of whose addresses is a
// node's address in addrs, sorted.
func missingContacts(contacts map[string][]string, addrs map[string]bool) []string {
	var missing []string
	for c, ips := range contacts {
		found := false
		for _, ip := range ips {
			found = found || addrs[ip]
		}
		if !found {
			missing = append(missing, c)
		}
	}
	sort.Strings(missing)
	return missing
}

// renderNodes renders nodes per data centre as "dc1: 2 nodes, dc2: 1 node".
func renderNodes(nodes map[string]int) string {
	if len(nodes) == 0 {
		return "no nodes"
	}
	var parts []string
	for _, dc := range sortedKeys(nodes) {
		unit := "nodes"
		if nodes[dc] == 1 {
			unit = "node"
		}
		parts = append(parts, fmt.Sprintf("%s: %d %s", dc, nodes[dc], unit))
	}
	return strings.Join(parts, ", ")
}
