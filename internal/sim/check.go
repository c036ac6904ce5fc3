package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"golang.org/x/sys/unix"
)

// checker holds what a history has shown so far and checks every
// guarantee against it (see the package documentation for the list).
type checker struct {
	w          *world
	ids        map[idKey]string  // every id handed out, and where
	high       map[string]uint64 // the highest number handed out per name
	seqs       []*seqCheck
	violations []string
	numberOf   map[string]uint64   // node number of each name, as its ids carry it
	nameOf     map[uint64]string   // name of each node number
	values     map[string]string   // numeric ids as exact decimals, and where handed out
	gaps       map[*host]*gapState // the crash-gap check's (checkgap.go)
}

// seqCheck is what a history showed of one sequence.
type seqCheck struct {
	cfg        SeqConfig
	start, max uint64            // the bounds as last created
	nums       map[uint64]string // every number handed out, and where
}

type idKey struct {
	name string
	n    uint64
}

func newChecker(w *world) *checker {
	return &checker{w: w, ids: map[idKey]string{}, high: map[string]uint64{},
		numberOf: map[string]uint64{}, nameOf: map[uint64]string{}, values: map[string]string{}}
}

func (c *checker) violation(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf("step %d: ", c.w.step)+fmt.Sprintf(format, args...))
}

// issued records numbers [first, first+n-1] handed out under name by
// process p of ho, and checks them: none handed out before (1); with
// sync on, each covered by the counter's durable value when returned
// (3); with a registry, each at or below the registry's mark (4, 5).
func (c *checker) issued(ho *host, p int, name string, first, n uint64) {
	if name != ho.cfg.Name {
		c.violation("h%d/p%d handed out an id under %q, not its name %q", ho.i, p, name, ho.cfg.Name)
	}
	if first == 0 || first+n-1 < first {
		c.violation("h%d/p%d handed out numbers from %d (%d of them)", ho.i, p, first, n)
		return
	}
	last := first + n - 1
	where := fmt.Sprintf("h%d/p%d at step %d", ho.i, p, c.w.step)
	for k := first; ; k++ { // up to last, which may be 2^64-1
		key := idKey{name, k}
		if prev, dup := c.ids[key]; dup {
			c.violation("id %s-%d handed out twice: by %s and by %s", name, k, prev, where)
			return
		}
		c.ids[key] = where
		if k == last {
			break
		}
	}
	if last > c.high[name] {
		c.high[name] = last
	}
	c.withinBound(ho, p, name, last)
	if v, ok := c.stripedValue(ho, p, name, first); ok {
		c.aboveEarlierForms(ho, p, v)
		if v, ok := c.stripedValue(ho, p, name, last); ok {
			ho.maxStriped = max(ho.maxStriped, v)
		}
	}
	if st := ho.strideOf(p); ho.cfg.Form == engine.FormatStriped && st != ho.stride() {
		if left, ok := ho.formLeftAt[st]; ok && last > left {
			c.violation("h%d/p%d handed out number %d with stride %d, whose form the counter left at %d for stride %d: two striped forms issued from one counter at once", ho.i, p, last, st, left, ho.stride())
		}
	}
	if ho.issuers != nil {
		ho.issuers[ho.procs[p]] = true
	}
	c.issuedAfterTaken(ho, p)
	if ho.takeSet && first < ho.takeover {
		c.violation("h%d/p%d took %s over with floor %d but handed out %d", ho.i, p, name, ho.takeover, first)
	}
	c.strictOrder(ho, p, first, last)
	if msg := c.covered(ho, p, name, last); msg != "" {
		c.violation("%s", msg)
	}
}

// strictOrder checks guarantee 3 on a strict-mode host (no block): the
// host's numbers go up, one call after another, and are dense (each the
// one after the host's last) unless since the last a process of the host
// died, a call failed, or the registry may have raised the counter
// (ho.dense is false then, until the next number sets it again). Calls
// running concurrently (a burst, a storm) are ordered by nobody: they
// only leave ho.dense false.
func (c *checker) strictOrder(ho *host, p int, first, last uint64) {
	if ho.cfg.Block > 0 {
		return
	}
	if c.w.parallel {
		ho.dense = false
		ho.lastNum = max(ho.lastNum, last)
		return
	}
	if p >= 0 && p < len(ho.raiseBack) && ho.raiseBack[p] {
		ho.raiseBack[p], ho.dense = false, false
	}
	switch {
	case ho.lastNum != 0 && first <= ho.lastNum:
		c.violation("strict mode: h%d/p%d handed out %d after %d: not in increasing order", ho.i, p, first, ho.lastNum)
	case ho.dense && first != ho.lastNum+1 && !c.skipped(ho, ho.lastNum, first):
		c.violation("strict mode: h%d/p%d handed out %d after %d with no process dead, no call failed and no raise between: a gap", ho.i, p, first, ho.lastNum)
	}
	ho.lastNum, ho.dense = last, true
}

// skipped reports whether every number strictly between from and to is
// one the host's form never hands out (the decimal form skips multiples
// of ten).
func (c *checker) skipped(ho *host, from, to uint64) bool {
	if ho.cfg.Form != engine.FormatDecimal {
		return false
	}
	for k := from + 1; k < to; k++ {
		if k%10 != 0 {
			return false
		}
	}
	return true
}

// covered checks, when a number is returned, that the state that keeps it
// from being handed out again is durable: with sync on, the counter's
// durable value (3); with a registry, the registry's mark (4). It returns
// what is wrong, or "". Safe to call from several goroutines.
func (c *checker) covered(ho *host, p int, name string, last uint64) string {
	if ho.cfg.Sync {
		if d, ok := ho.disk.durableCounter(ho.counter); !ok || d < last {
			return fmt.Sprintf("h%d/p%d returned %s-%d while the counter's durable value was %d (a power cut now would hand it out again)", ho.i, p, name, last, d)
		}
	}
	if ho.cfg.Registry {
		if row, ok := c.w.reg0.Row(name); !ok || row.Reserved < last {
			return fmt.Sprintf("h%d/p%d returned %s-%d above the registry's mark %d", ho.i, p, name, last, row.Reserved)
		}
	}
	return ""
}

// durableCounter is the value of the counter at path that a power cut
// would leave, as the disk knows it.
func (d *disk) durableCounter(path string) (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false
	}
	d.mu.Lock()
	b, ok := d.content[st.Ino]
	d.mu.Unlock()
	if !ok {
		return 0, false
	}
	v, err := admin.DecodeCounter(b)
	return v, err == nil
}

// afterStep checks what must hold between any two steps: what the
// registry reported done during the step kept its contract (see
// contract), and the registry's mark of every name is at or above every
// number handed out under it (5: a mark that went below would let the
// next holder repeat them).
func (c *checker) afterStep(Step) {
	for _, v := range c.w.contract.take() {
		c.violation("%s", v)
	}
	for name, high := range c.high {
		// A standalone name's numbers are the registry's from the moment
		// a claim of it stood, even if the Open that claimed it failed
		// right after: the claim covers the counter (Claim.Floor).
		row, ok := c.w.reg0.Row(name)
		if !ok {
			continue // a standalone name
		}
		if row.Reserved < high {
			c.violation("the registry's mark of %s is %d, below %d, which was handed out", name, row.Reserved, high)
		}
	}
}

// issuedID records an id returned by process p of ho (see issued).
func (c *checker) issuedID(ho *host, p int, id string) {
	parsed, err := engine.ParseID(id)
	if err != nil {
		c.violation("h%d/p%d returned an id that does not parse: %q: %v", ho.i, p, id, err)
		return
	}
	if parsed.Form != ho.cfg.Form {
		c.violation("h%d/p%d returned %q, not a %s id", ho.i, p, id, ho.cfg.Form)
		return
	}
	if parsed.Form == engine.FormatName {
		c.issued(ho, p, parsed.Name, parsed.Number, 1)
		return
	}
	if parsed.Form == engine.FormatStriped {
		if parsed, err = parsed.Unstripe(ho.strideOf(p)); err != nil {
			c.violation("h%d/p%d returned %q: %v", ho.i, p, id, err)
			return
		}
	}
	// One number per name and one name per number, whichever host (a
	// take-over, a clone) carries the name.
	name := ho.cfg.Name
	if n, ok := c.numberOf[name]; ok && n != parsed.Node {
		c.violation("h%d/p%d returned %q: %s carried node number %d before", ho.i, p, id, name, n)
	}
	if other, ok := c.nameOf[parsed.Node]; ok && other != name {
		c.violation("h%d/p%d returned %q: node number %d is %s's", ho.i, p, id, parsed.Node, other)
	}
	c.numberOf[name], c.nameOf[parsed.Node] = parsed.Node, name
	// No two ids equal as exact decimals (as a spreadsheet or a JSON
	// parser reads them), across forms.
	r, ok := new(big.Rat).SetString(id)
	if !ok {
		c.violation("h%d/p%d returned %q, not a decimal number", ho.i, p, id)
		return
	}
	if parsed.Form == engine.FormatStriped && r.Cmp(maxInt64) > 0 {
		c.violation("h%d/p%d returned striped id %s, above the form's bound 2^63-1", ho.i, p, id)
	}
	if b := ho.cfg.MaxID; b != 0 && r.Cmp(new(big.Rat).SetUint64(b)) > 0 {
		c.violation("h%d/p%d returned id %s, above its WithMaxID bound %d", ho.i, p, id, b)
	}
	where := fmt.Sprintf("h%d/p%d at step %d", ho.i, p, c.w.step)
	if prev, dup := c.values[r.RatString()]; dup {
		c.violation("id %s is, as a number, one handed out before: by %s, and by %s", id, prev, where)
	}
	c.values[r.RatString()] = where

	c.w.reached["ids handed out in the "+parsed.Form.String()+" form"]++
	c.issued(ho, p, name, parsed.Number, 1)
}

// maxInt64 is 2^63-1, the striped form's default bound.
var maxInt64 = new(big.Rat).SetUint64(1<<63 - 1)

// tookNothing checks that a call whose context had ended, and that
// failed, left the counter as it was (before, read just before the call;
// no other process of the host runs a step meanwhile).
func (c *checker) tookNothing(ho *host, before []byte) {
	after, _ := os.ReadFile(ho.counter)
	if !bytes.Equal(before, after) {
		c.violation("a call of h%d whose context had ended failed but moved the counter (% x, then % x)", ho.i, before, after)
	}
}

// state is what bad input must not change: every file of a host and the
// registry's rows.
type state struct {
	files map[string][]byte
	rows  []registry.Holder
	seqs  any // the registry's sequences (cluster.Sequences)
}

func (c *checker) snapshot(ho *host) state {
	files, _ := readTree(ho.dir)
	return state{files: files, rows: c.rows(), seqs: c.w.reg0.Sequences()}
}

// rows reads every row of the registry as it stands, outage or not.
func (c *checker) rows() []registry.Holder {
	var rows []registry.Holder
	seen := map[string]bool{}
	for _, ho := range c.w.hosts {
		if seen[ho.cfg.Name] {
			continue
		}
		seen[ho.cfg.Name] = true
		if r, ok := c.w.reg0.Row(ho.cfg.Name); ok {
			rows = append(rows, r)
		}
	}
	return rows
}

// unchanged checks guarantee 6: the call changed nothing on disk or in
// the registry.
func (c *checker) unchanged(ho *host, before state, what string) {
	after := c.snapshot(ho)
	for p, b := range after.files {
		if old, ok := before.files[p]; !ok {
			c.violation("%s on h%d created %s", what, ho.i, p)
		} else if !bytes.Equal(old, b) {
			c.violation("%s on h%d changed %s", what, ho.i, p)
		}
	}
	for p := range before.files {
		if _, ok := after.files[p]; !ok {
			c.violation("%s on h%d removed %s", what, ho.i, p)
		}
	}
	c.rowsUnchanged(before.rows, fmt.Sprintf("%s on h%d", what, ho.i))
	if after := c.w.reg0.Sequences(); !reflect.DeepEqual(before.seqs, after) {
		c.violation("%s on h%d changed the registry's sequences: %+v, then %+v", what, ho.i, before.seqs, after)
	}
}

// rowsUnchanged checks that the registry's rows are still before.
func (c *checker) rowsUnchanged(before []registry.Holder, what string) {
	after := c.rows()
	if len(before) != len(after) {
		c.violation("%s changed the registry's rows (%d, then %d)", what, len(before), len(after))
		return
	}
	for i := range before {
		a, b := before[i], after[i]
		if a.Name != b.Name || a.Owner != b.Owner || a.State != b.State || a.Reserved != b.Reserved || a.Session != b.Session {
			c.violation("%s changed the registry's row of %s: %+v, then %+v", what, a.Name, a, b)
		}
	}
}

// released checks a Release (4: reported done means applied; reported
// failed without an unknown outcome means nothing changed).
func (c *checker) released(ho *host, final uint64, err error, before state) {
	row, ok := c.w.reg0.Row(ho.cfg.Name)
	switch {
	case err == nil:
		ho.released = true
		ho.releaseUnsynced = false
		if ho.cfg.Registry && (!ok || row.State != registry.StateReleased || row.Reserved != final) {
			c.violation("Release of %s on h%d reported done (final %d) but the registry shows %+v", ho.cfg.Name, ho.i, final, row)
		}
		for _, r := range before.rows {
			if r.Name == ho.cfg.Name && final < r.Reserved {
				c.violation("Release of %s on h%d recorded %d, below the registry's mark %d", ho.cfg.Name, ho.i, final, r.Reserved)
			}
		}
	case errors.Is(err, engine.ErrRegistry):
		// Outcome unknown: the release is recorded on the host first, so
		// the host must not issue again until reclaimed (checked by the
		// ids and by its Opens), unless it failed before that.
		ho.exempt = "its release's outcome is unknown"
		if rec, ok := hostRecord(ho); ok && rec.Released && !ho.released {
			ho.released = true
			ho.releaseUnsynced = true
		}
	default:
		var was registry.Holder
		for _, r := range before.rows {
			if r.Name == ho.cfg.Name {
				was = r
			}
		}
		if errors.Is(err, registry.ErrMarkMoved) && ok && row.Reserved == was.Reserved {
			// Nothing ran on the name: the mark did not move, so
			// Release asked the registry to lower it.
			c.violation("Release of %s on h%d was refused as below the registry's mark %d, which did not move: it recorded less than the mark (%v)", ho.cfg.Name, ho.i, row.Reserved, err)
		}
		if ho.cfg.Registry && ok && row.State == registry.StateReleased {
			if was.State != registry.StateReleased {
				c.violation("Release of %s on h%d failed (%v) but the registry shows it released", ho.cfg.Name, ho.i, err)
			}
		}
		if rec, ok := hostRecord(ho); ok && rec.Released && !ho.released {
			ho.released = true
			ho.releaseUnsynced = true
			ho.exempt = "its release failed after being recorded on the host"
		}
	}
}

// forceReleased checks a ForceRelease with next number next: reported
// done, the registry shows it released at final, at or above the mark it
// had and next-1; refused as below the mark (ErrMarkMoved), the mark must
// have moved meanwhile (else ForceRelease asked to lower it).
func (c *checker) forceReleased(ho *host, next, final uint64, err error, was registry.Holder, hadRow bool) {
	row, ok := c.w.reg0.Row(ho.cfg.Name)
	if err != nil {
		if errors.Is(err, registry.ErrMarkMoved) && hadRow && ok && row.Reserved == was.Reserved && row.Owner == was.Owner {
			c.violation("ForceRelease of %s (next %d) was refused as below the registry's mark %d, which did not move: it recorded less than the mark (%v)", ho.cfg.Name, next, row.Reserved, err)
		}
		return
	}
	if !ok || row.State != registry.StateReleased || row.Reserved != final {
		c.violation("ForceRelease of %s reported done (final %d) but the registry shows %+v", ho.cfg.Name, final, row)
	}
	if final < next-1 || hadRow && was.Owner == row.Owner && final < was.Reserved {
		c.violation("ForceRelease of %s (next %d) recorded %d, below next-1 or the mark %d it had", ho.cfg.Name, next, final, was.Reserved)
	}
}

// live checks liveness (8): with every fault stopped, a host nothing was
// done to, which still holds its name, opens and issues within a few
// tries.
func (c *checker) live(ho *host) {
	if ho.exempt != "" || ho.released || ho.damaged {
		return
	}
	if ho.cfg.Registry {
		owner, err := admin.OwnerToken(ho.counter)
		row, ok := c.w.reg0.Row(ho.cfg.Name)
		if err != nil || !ok || row.Owner != owner || row.State != registry.StateActive {
			return // it never claimed its name, or lost it
		}
	}
	var last error
	for range 3 {
		if err := c.w.open(ho, 0); errors.Is(err, engine.ErrExhausted) {
			return
		} else if err != nil {
			last = err
			continue
		}
		id, err := ho.procs[0].UniqueIDContext(c.w.opCtx())
		if errors.Is(err, engine.ErrExhausted) {
			return // used up: nothing left to issue is not a lost host
		}
		if err != nil {
			last = err
			continue
		}
		c.issuedID(ho, 0, id)
		c.liveSequences(ho)
		return
	}
	c.violation("liveness: with every fault stopped, h%d (%s) cannot issue: %v", ho.i, ho.cfg.Name, last)
}

// liveSequences checks that a live host's process 0 takes a number of
// every sequence it has not had damaged (a used-up sequence aside).
func (c *checker) liveSequences(ho *host) {
	if !ho.cfg.Registry {
		return
	}
	for i := range c.w.h.Sequences {
		if _, damaged := ho.seqDamaged[i]; damaged {
			continue
		}
		var last error
		ok := false
		for range 3 {
			sq, err := c.w.sequence(ho, 0, i)
			if err == nil {
				var n uint64
				if n, err = sq.NextContext(c.w.opCtx()); err == nil {
					c.seqIssued(ho, 0, i, n, 1)
					ok = true
					break
				}
			}
			if errors.Is(err, engine.ErrExhausted) {
				ok = true
				break
			}
			last = err
		}
		if !ok {
			c.violation("liveness: with every fault stopped, h%d (%s) cannot take a number of %s: %v", ho.i, ho.cfg.Name, c.w.h.Sequences[i].Name, last)
		}
	}
}

// seqIssued records numbers [first, first+n-1] of sequence i handed out by
// process p of ho, and checks them (2): none handed out before, none
// below the start or above the max they were handed out under.
func (c *checker) seqIssued(ho *host, p, i int, first, n uint64) {
	sc := c.seqs[i]
	if sc.nums == nil {
		sc.nums = map[uint64]string{}
	}
	last := first + n - 1
	if first == 0 || last < first {
		c.violation("h%d/p%d handed out %d numbers of %s from %d", ho.i, p, n, sc.cfg.Name, first)
		return
	}
	if first < sc.start || last > sc.max {
		c.violation("h%d/p%d handed out %s numbers [%d, %d] outside [%d, %d]", ho.i, p, sc.cfg.Name, first, last, sc.start, sc.max)
	}
	where := fmt.Sprintf("h%d/p%d at step %d", ho.i, p, c.w.step)
	for k := first; ; k++ {
		if prev, dup := sc.nums[k]; dup {
			c.violation("%s number %d handed out twice: by %s and by %s", sc.cfg.Name, k, prev, where)
			return
		}
		sc.nums[k] = where
		if k == last {
			break
		}
	}
}

// seqCreated checks a re-creation: a start raised once numbers were
// handed out, or a max lowered below them, must be refused; what is
// accepted bounds every number handed out afterwards.
func (c *checker) seqCreated(i int, s Step, info registry.SequenceInfo, err error) {
	sc := c.seqs[i]
	if err != nil {
		return
	}
	var high uint64
	for k := range sc.nums {
		high = max(high, k)
	}
	if s.Start > sc.start && len(sc.nums) > 0 {
		c.violation("%s created again with start %d (was %d) after %d numbers were handed out", sc.cfg.Name, s.Start, sc.start, len(sc.nums))
	}
	if s.Max != 0 && s.Max < high {
		c.violation("%s created again with max %d below %d, which was handed out", sc.cfg.Name, s.Max, high)
	}
	if info.Max != 0 && s.Max == 0 && info.Max != sc.max {
		c.violation("%s created again without a max: its max moved from %d to %d", sc.cfg.Name, sc.max, info.Max)
	}
	sc.start = max(sc.start, s.Start)
	if s.Max != 0 {
		sc.max = s.Max
	}
}

// seqCovered checks, when numbers of sequence i up to last are returned
// by a host with sync on, that the lease file as a power cut would leave
// it does not hand last out again: last is not in its next range, and if
// in its current one, below its position (guarantee 2 for sequences).
func (c *checker) seqCovered(ho *host, p, i int, last uint64) {
	if !ho.cfg.Sync {
		return
	}
	path := ho.counter + ".seq." + c.w.h.Sequences[i].Name
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return
	}
	ho.disk.mu.Lock()
	b, ok := ho.disk.content[st.Ino]
	ho.disk.mu.Unlock()
	if !ok {
		return // not durable at all: the host finds no lease file after a cut
	}
	if len(b) < 48 || string(b[:6]) != "snapse" {
		return // damaged, or no record: not trusted after a cut
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	pos, curFirst, curLast, aheadFirst, aheadLast := u(8), u(16), u(24), u(32), u(40)
	switch {
	case curFirst != 0 && curFirst <= last && last <= curLast && pos <= last:
		c.violation("h%d/p%d returned %s number %d while the lease file's durable position was %d in [%d, %d] (a power cut now would hand it out again)", ho.i, p, c.w.h.Sequences[i].Name, last, pos, curFirst, curLast)
	case aheadFirst != 0 && aheadFirst <= last && last <= aheadLast:
		c.violation("h%d/p%d returned %s number %d while the lease file's durable record had it in the range ahead [%d, %d] (a power cut now would hand it out again)", ho.i, p, c.w.h.Sequences[i].Name, last, aheadFirst, aheadLast)
	}
}
