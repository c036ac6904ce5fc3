package sim

import (
	"math/rand/v2"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/internal/simcql"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
)

// backend is what a history's hosts and operators call: the in-memory
// registry (registrytest) or the real cassandra.Registry on a simulated CQL
// cluster (package internal/simcql, whose documentation describes what
// that cluster models).
type backend interface {
	registry.Registry
	registry.SequenceRegistry
	registry.NumberRegistry
}

// cluster is the registry of a history, whichever it is: a backend per
// data centre, the faults the history drives, and the settled state the
// checks read.
type cluster interface {
	inDC(dc int) backend
	// Row is the name's row as the registry will settle it.
	Row(name string) (registry.Holder, bool)
	// Sequences is the registry's sequences, in a form to compare.
	Sequences() any
	// hostLease is the lease the registry records for host name of
	// data centre dc in sequence seq, as it will settle.
	hostLease(seq string, dc int, name string) (registry.SequenceLease, bool)
	setDown(down bool)
	// setCut cuts data centre dc off from the cluster's quorum (oneWay:
	// its requests arrive, their replies are lost) or heals it.
	setCut(dc int, cut, oneWay bool)
	// loseSequences empties data centre dc's sequence partitions, as
	// replicas that lost them would, and reports whether it did.
	loseSequences(dc int) bool
	// tick lets the registry move on between steps; settle waits for its
	// background work; stop lifts every fault of its own; close ends it.
	tick()
	settle()
	stop()
	close()
	faults() int
	reached() map[string]int
}

// memCluster is the in-memory registry: linearizable, every answer lost
// settled before the error returns.
type memCluster struct{ mem *registrytest.Registry }

func (m memCluster) inDC(dc int) backend                     { return m.mem.InDC(dcName(dc)) }
func (m memCluster) Row(name string) (registry.Holder, bool) { return m.mem.Row(name) }
func (m memCluster) Sequences() any                          { return m.mem.Sequences() }
func (m memCluster) setDown(down bool)                       { m.mem.SetDown(down) }
func (m memCluster) hostLease(seq string, dc int, name string) (registry.SequenceLease, bool) {
	for _, st := range m.mem.Sequences() {
		for _, l := range st.Leases {
			if st.Name == seq && l.DC == dcName(dc) && l.Name == name {
				return l, true
			}
		}
	}
	return registry.SequenceLease{}, false
}
func (m memCluster) setCut(dc int, cut, _ bool) { m.mem.SetCut(dcName(dc), cut) }
func (m memCluster) tick()                      {}
func (m memCluster) loseSequences(int) bool     { return false } // no replicas to lose
func (m memCluster) settle()                    {}
func (m memCluster) stop()                      {}
func (m memCluster) close()                     {}
func (m memCluster) faults() int                { return 0 }
func (m memCluster) reached() map[string]int    { return nil }

// cqlCluster is the real Cassandra adapter, one Registry per data centre,
// on one simulated CQL cluster.
type cqlCluster struct {
	c    simcql.Cluster
	regs [2]cql.Registry
	rate float64
}

func newCQLCluster(h History, w *world) *cqlCluster {
	c := &cqlCluster{c: simcql.New(rand.New(rand.NewPCG(h.Seed, 0xc9))), rate: h.CQLFaults}
	for dc := range c.regs {
		c.regs[dc] = c.c.Registry(dcName(dc), w.clock.now)
	}
	return c
}

func (c *cqlCluster) inDC(dc int) backend                     { return c.regs[dc] }
func (c *cqlCluster) Row(name string) (registry.Holder, bool) { return c.c.Row(name) }
func (c *cqlCluster) Sequences() any                          { return c.c.Sequences() }
func (c *cqlCluster) setDown(down bool)                       { c.c.SetDown(down) }
func (c *cqlCluster) hostLease(seq string, dc int, name string) (registry.SequenceLease, bool) {
	return c.c.HostLease(seq, dcName(dc), name)
}
func (c *cqlCluster) loseSequences(dc int) bool { return c.c.LoseSequences(dcName(dc)) }

func (c *cqlCluster) setCut(dc int, cut, oneWay bool) {
	if oneWay && cut {
		c.c.SetOneWay(dcName(dc), true)
		return
	}
	c.c.SetCut(dcName(dc), cut)
	if !cut {
		c.c.SetOneWay(dcName(dc), false)
	}
}
func (c *cqlCluster) tick()   { c.c.Tick() }
func (c *cqlCluster) settle() { c.c.Settle() }
func (c *cqlCluster) stop()   { c.c.SetFaultRate(0) }
func (c *cqlCluster) start()  { c.c.SetFaultRate(c.rate) }
func (c *cqlCluster) close() {
	for _, r := range c.regs {
		r.Close()
	}
}
func (c *cqlCluster) faults() int { return c.c.Faults() }
func (c *cqlCluster) reached() map[string]int {
	out := c.c.Reached()
	out["cassandra"] = 1
	return out
}

// addCassandra runs a third of the histories against the Cassandra
// adapter on the simulated cluster, with a rate of random faults from
// none to one request in ten, and makes a third of their data-centre
// cuts one-way (requests arrive, replies are lost). It draws from a
// generator of its own.
func addCassandra(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xca55))
	if rng.IntN(3) != 0 {
		return
	}
	h.Cassandra = true
	h.CQLFaults = []float64{0, 0.02, 0.05, 0.1}[rng.IntN(4)]
	steps := make([]Step, 0, len(h.Steps))
	hosts := len(h.Hosts) // hosts at this point (take-overs, clones and storms add some)
	for _, s := range h.Steps {
		if s.Kind == KCut && s.Keep && rng.IntN(3) == 0 {
			s.Arg = "one-way"
		}
		switch {
		case s.Kind == KClone && s.Keep:
			// The original runs when its clone starts; the clone stops
			// (returning its reservation), and the original takes more
			// numbers than its reservation holds.
			p := rng.IntN(3)
			steps = append(steps, Step{Kind: KOpen, Host: s.Host, Proc: p}, s,
				Step{Kind: KClose, Host: hosts, Proc: 0},
				Step{Kind: KNext, Host: s.Host, Proc: p, N: 2 * reserveStep, Arg: "any-open"})
			hosts++
			continue
		case s.Kind == KClone, s.Kind == KTakeover, s.Kind == KStorm && s.Keep:
			hosts++
		}
		steps = append(steps, s)
	}
	h.Steps = steps
}
