package simcql

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// What the simulator reads of the simulated cluster's state, as the
// Registry will see it once every proposal in flight is settled.

// Partition keys of the tables.
const (
	simNames   = "names/"
	simNumbers = "numbers/"
	simSeqs    = "seqs/"
)

func (c *simCluster) Row(name string) (registry.Holder, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[simNames+name]
	if p == nil {
		return registry.Holder{}, false
	}
	row, ok := p.truth()[""]
	if !ok {
		return registry.Holder{}, false
	}
	var rec cql.Record
	simFill(rec.DestMap(), row, nil)
	return rec.Holder(), true
}

func (c *simCluster) HostLease(seq, dc, name string) (registry.SequenceLease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[seqPK(seq, cql.DCPart(dc))]
	if p == nil {
		return registry.SequenceLease{}, false
	}
	row, ok := p.truth()[seqCK(cql.KindHost, name, 0)]
	if !ok {
		return registry.SequenceLease{}, false
	}
	w := seqRowOf(row)
	return w.Lease(seq, dc), true
}

func (c *simCluster) Sequences() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, k := range c.keys() {
		if !strings.HasPrefix(k, simSeqs) {
			continue
		}
		rs := simNorm(c.parts[k].truth())
		cks := make([]string, 0, len(rs))
		for ck := range rs {
			cks = append(cks, ck)
		}
		sort.Strings(cks)
		for _, ck := range cks {
			fmt.Fprintf(&b, "%q %q %v\n", k, ck, rs[ck])
		}
	}
	return b.String()
}

// simFill sets scan destinations (by column name) from row: the columns

// simNorm is rs with times as milliseconds, for comparing.
func simNorm(rs simRows) map[string]map[string]any {
	out := map[string]map[string]any{}
	for k, r := range rs {
		m := map[string]any{}
		for col, v := range r {
			if t, ok := v.(time.Time); ok {
				v = t.UnixMilli()
			}
			m[col] = v
		}
		out[k] = m
	}
	return out
}

// LoseSequences empties data centre dc's partition of every sequence, as
// a data centre whose replicas lost the sequences table (or came back from
// a copy older than its ranges) would see it, proposals in flight
// included, and reports whether there was one.
func (c *simCluster) LoseSequences(dc string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	suffix := "\x00" + cql.DCPart(dc)
	lost := false
	for _, k := range c.keys() {
		if strings.HasPrefix(k, simSeqs) && strings.HasSuffix(k, suffix) {
			c.parts[k] = &simPart{rows: simRows{}, lag: map[string]bool{}}
			lost = true
		}
	}
	return lost
}
