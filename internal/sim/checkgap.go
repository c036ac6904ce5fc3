package sim

import (
	"os"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// The gap a crash leaves (docs/guarantees.md "Steps, outages and
// the gap a crash leaves"): a registered host's numbers are bounded by the
// registry's mark M, which runs at most one step ahead of its counter; a
// crash skips what lies between. A step is the configured one
// (reserveStep), or what the host issued over the last horizon, never
// more; so when the last process of a host dies, M may stand above the
// counter by at most
//
//	max(reserveStep, what the counter moved since the host's first
//	running process opened) + the largest request made meanwhile
//
// (a request whose update failed may have had the mark extended for it;
// blocks count as requests). A mark further ahead is a gap larger than
// the guarantees allow: a step sized from something else than what was
// issued, a mark extended twice for one need, a counter left below the
// mark at start.

// gapState is what the crash-gap check knows of one host since its first
// running process opened.
type gapState struct {
	from uint64 // the counter's value once that process had opened
	req  uint64 // the largest request since
}

// opened notes that a process of ho opened, running tells whether
// another process of ho was running already.
func (c *checker) opened(ho *host, running bool) {
	if c.gaps == nil {
		c.gaps = map[*host]*gapState{}
	}
	if running && c.gaps[ho] != nil {
		return
	}
	if v, ok := readCounter(ho.counter); ok && ho.cfg.Registry && !running {
		c.gaps[ho] = &gapState{from: v}
		return
	}
	delete(c.gaps, ho)
}

// requested notes a request of n numbers on ho.
func (c *checker) requested(ho *host, n uint64) {
	if ho.cfg.Form == engine.FormatDecimal {
		n += n/9 + 1 // decimal ids skip the numbers ending in 0
	}
	if g := c.gaps[ho]; g != nil {
		g.req = max(g.req, n)
	}
}

// crashGap checks, when the last process of ho was killed, that the
// registry's mark is at most one step above the counter (see above).
func (c *checker) crashGap(ho *host) {
	g := c.gaps[ho]
	delete(c.gaps, ho)
	if g == nil || c.w.running(ho) || !ho.cfg.Registry || ho.joinPending || ho.exempt != "" || ho.damaged || c.w.parallel {
		return
	}
	cur, ok := readCounter(ho.counter)
	if !ok || cur < g.from {
		return // put back meanwhile: not this check's case
	}
	owner, err := admin.OwnerToken(ho.counter)
	row, held := c.w.reg0.Row(ho.cfg.Name)
	if err != nil || !held || row.Owner != owner || row.State != registry.StateActive || row.Reserved <= cur {
		return
	}
	gap := row.Reserved - cur
	bound := max(reserveStep, cur-g.from) + max(2*reserveStep, g.req) + ho.cfg.Block
	c.w.reached["crash-gap-checked"]++
	if gap > bound {
		c.violation("a crash of h%d (%s) leaves the registry's mark %d above its counter %d by %d: more than one step (at most %d, the step %d or the %d numbers the counter moved since the host started, with the largest request, %d, and a block)",
			ho.i, ho.cfg.Name, row.Reserved, cur, gap, bound, reserveStep, cur-g.from, max(2*reserveStep, g.req))
	}
}

// readCounter reads the counter file at path as it stands.
func readCounter(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := admin.DecodeCounter(b)
	return v, err == nil
}
