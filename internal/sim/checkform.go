package sim

import (
	"math/big"

	"github.com/snapid/snapid/internal/engine"
)

// The checks of numeric id forms: parsed ids against their strings,
// WithMaxID bounds, and ids of a new stride above the earlier forms'.

// issuedParsed records an id returned parsed (NextID, NextIDsContext):
// its string form as issuedID does, and its fields must be the string's.
func (c *checker) issuedParsed(ho *host, p int, id engine.ID) {
	s := id.String()
	c.issuedID(ho, p, s)
	parsed, err := engine.ParseID(s)
	if err != nil {
		return // issuedID reported it
	}
	if parsed.Form == engine.FormatStriped {
		if parsed, err = parsed.Unstripe(ho.strideOf(p)); err != nil {
			return
		}
		if id.Stride != ho.strideOf(p) {
			c.violation("h%d/p%d returned id %s with stride %d, not its %d", ho.i, p, s, id.Stride, ho.strideOf(p))
		}
	}
	if id.Form != parsed.Form || id.Name != parsed.Name || id.Node != parsed.Node || id.Number != parsed.Number {
		c.violation("h%d/p%d returned id %s whose fields (form %s, name %q, node %d, number %d) are not its string's (form %s, name %q, node %d, number %d)",
			ho.i, p, s, id.Form, id.Name, id.Node, id.Number, parsed.Form, parsed.Name, parsed.Node, parsed.Number)
	}
}

// stripedValue is the striped id of number n of process p of ho, if ho
// hands out striped ids, its node number is known and the id fits in 64
// bits.
func (c *checker) stripedValue(ho *host, p int, name string, n uint64) (uint64, bool) {
	if ho.cfg.Form != engine.FormatStriped {
		return 0, false
	}
	node := standaloneNumber(ho)
	if ho.cfg.Registry {
		var ok bool
		if node, ok = c.numberOf[name]; !ok {
			return 0, false
		}
	}
	st := ho.strideOf(p)
	if n > (1<<64-1-node)/st {
		return 0, false
	}
	return n*st + node, true
}

// aboveEarlierForms checks that striped id v of process p of ho is above
// every id the counter issued under its earlier forms, if p opened with a
// new stride (a counter opened with another stride is raised first, so
// that its first id is above them all), and records v.
func (c *checker) aboveEarlierForms(ho *host, p int, v uint64) {
	if f := ho.procFloor[p]; f != 0 && v <= f {
		c.violation("h%d/p%d handed out striped id %d after its counter's stride changed to %d, not above %d, which the counter handed out under its earlier forms",
			ho.i, p, v, ho.strideOf(p), f)
	}
	ho.maxStriped = max(ho.maxStriped, v)
}

// withinBound checks that number last of a striped host's process p is
// an id within the host's WithMaxID bound: last×stride + node, computed
// without overflow, at most the bound.
func (c *checker) withinBound(ho *host, p int, name string, last uint64) {
	b := ho.cfg.MaxID
	if b == 0 || ho.cfg.Form != engine.FormatStriped {
		return
	}
	node := standaloneNumber(ho)
	if ho.cfg.Registry {
		n, ok := c.numberOf[name]
		if !ok {
			return // not known yet: the id's own check (issuedID) covers a first UniqueID
		}
		node = n
	}
	id := new(big.Int).SetUint64(last)
	id.Mul(id, new(big.Int).SetUint64(ho.strideOf(p)))
	id.Add(id, new(big.Int).SetUint64(node))
	if id.Cmp(new(big.Int).SetUint64(b)) > 0 {
		c.violation("h%d/p%d handed out number %d: id %s (stride %d, node %d), above its WithMaxID bound %d", ho.i, p, last, id, ho.strideOf(p), node, b)
	}
}
