// Package simcql is the simulated CQL cluster the simulator (internal/sim)
// runs package cassandra's Registry over (cassandra.NewBackendRegistry):
// the Registry, its claims,
// extensions, releases, node numbers and sequences run unchanged; only the
// queriers (internal/cql's CASQuerier, NumQuerier, SeqQuerier) and the
// waits between retries are the simulation's.
//
// What it models. Every table the Registry uses (names, node numbers,
// sequences), partition by partition. The adapter's statements are
// interpreted, not recognised: an INSERT's or UPDATE's columns, its WHERE
// keys and its IF conditions are read from the statement text, so a
// statement with a condition left out is run without it. Per partition:
//
//   - Paxos at SERIAL and LOCAL_SERIAL: a conditional update (or a batch
//     of them on one partition) is evaluated and applied atomically; a new
//     round first completes a proposal left in flight that it finds.
//   - Proposals left in flight: a request may fail (write timeout of type
//     CAS, gocql.ErrTimeoutNoResponse, "CAS write unknown", Overloaded)
//     after its proposal was committed, or accepted by a quorum (any later
//     round completes it), or accepted by a minority (completed later by
//     another coordinator, or by a Tick between steps, or never: dropped
//     when another proposal commits). A serial read may miss a minority's
//     proposal, which is then applied after that read: the case that
//     makes "resolve a lost reply by a serial read" need the same token
//     resent.
//   - Overloaded, Unavailable, read and write timeouts, "CAS write
//     unknown", with the codes of gocql.RequestError, and no connection
//     at all (gocql.ErrNoConnections) during an outage.
//   - Data centres: LOCAL_SERIAL and LOCAL_* reads run on the data
//     centre's replicas, which may not have the latest commit made through
//     another data centre (or through SERIAL with a quorum elsewhere): they
//     see the partition as it was before it (a stale view), until they
//     catch up at a Tick. A data centre cut off from the cluster's quorum
//     fails SERIAL and QUORUM requests (Unavailable) and works at LOCAL_*;
//     a one-way cut loses the replies of its requests after they were
//     applied.
//   - Non-serial reads (QUORUM, LOCAL_QUORUM) see only what was committed,
//     not a proposal in flight; LOCAL_* ones may see the stale view.
//
// What it does not model: replicas one by one (a data centre's view is
// the partition before its latest commit or after it, never further
// behind), cell timestamps (writes apply in the order the simulation
// commits them; a write through a stale view overwrites cell by cell),
// TTLs, deletes, schema changes and the system tables (the Registry is
// made without a session: List, CreateSchema and the cluster checks are
// not run), paging, and time: a wait returns at once, and after a bounded
// number of waits with no request of the data centre succeeding it fails
// as a caller's deadline would.
//
// The cluster's state machine is simCluster, under one mutex, driven by
// the rand.Rand it is given; it starts no goroutine and reads no clock.
package simcql

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/cql"
)

// simRequestError is an error the server sent, as gocql reports it: a
// gocql.RequestError with its protocol code.
type simRequestError struct {
	code int
	msg  string
}

func (e simRequestError) Code() int       { return e.code }
func (e simRequestError) Message() string { return e.msg }
func (e simRequestError) Error() string   { return e.msg }

var _ gocql.RequestError = simRequestError{}

var (
	simErrWriteTimeout = simRequestError{gocql.ErrCodeWriteTimeout, "Operation timed out - received only 1 responses. (write type CAS)"}
	simErrReadTimeout  = simRequestError{gocql.ErrCodeReadTimeout, "Operation timed out - received only 1 responses."}
	simErrUnavailable  = simRequestError{gocql.ErrCodeUnavailable, "Cannot achieve consistency level QUORUM"}
	simErrOverloaded   = simRequestError{gocql.ErrCodeOverloaded, "Too many in flight hints"}
	simErrCASUnknown   = simRequestError{gocql.ErrCodeCASWriteUnknown, "CAS operation result is unknown - proposal accepted by 1 but not a quorum."}
)

// simRow is a row: column → string, int64 or time.Time (absent: null).
type simRow map[string]any

// simRows is a partition: clustering key → row.
type simRows map[string]simRow

func (rs simRows) clone() simRows {
	out := make(simRows, len(rs))
	for k, r := range rs {
		c := make(simRow, len(r))
		for col, v := range r {
			c[col] = v
		}
		out[k] = c
	}
	return out
}

// simWrite sets columns of one row (a nil value: null), creating it.
type simWrite struct {
	ck   string
	cols map[string]any
}

func (rs simRows) apply(ws []simWrite) {
	for _, w := range ws {
		r := rs[w.ck]
		if r == nil {
			r = simRow{}
			rs[w.ck] = r
		}
		for col, v := range w.cols {
			if v == nil {
				delete(r, col)
			} else {
				r[col] = v
			}
		}
	}
}

// simCond is one statement's condition on its row: IF NOT EXISTS, or
// columns equal to values (nil: null; a missing row has every column
// null).
type simCond struct {
	ck        string
	notExists bool
	eq        map[string]any
}

func (c simCond) holds(rs simRows) bool {
	r, found := rs[c.ck]
	if c.notExists {
		return !found
	}
	if !found && len(c.eq) > 0 {
		// A conditional UPDATE of a missing row is not applied.
		allNull := true
		for _, v := range c.eq {
			allNull = allNull && v == nil
		}
		if !allNull {
			return false
		}
	}
	for col, want := range c.eq {
		if !simEqual(r[col], want) {
			return false
		}
	}
	return true
}

func simEqual(a, b any) bool {
	if ta, ok := a.(time.Time); ok {
		tb, ok := b.(time.Time)
		return ok && ta.Equal(tb)
	}
	return a == b
}

// simValue is a bound value as stored: nil for null.
func simValue(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case *string:
		if x == nil {
			return nil
		}
		return *x
	case *int64:
		if x == nil {
			return nil
		}
		return *x
	case *time.Time:
		if x == nil {
			return nil
		}
		return x.UTC().Truncate(time.Millisecond)
	case time.Time:
		return x.UTC().Truncate(time.Millisecond)
	case int:
		return int64(x)
	case string, int64:
		return x
	}
	panic(fmt.Sprintf("simcql: a bound value of type %T", v))
}

// simProposal is a proposal left in flight on a partition.
type simProposal struct {
	writes  []simWrite
	dc      string
	local   bool // LOCAL_SERIAL
	decided bool // accepted by a quorum: every later round completes it
	fate    bool // accepted by a minority: completed later (true) or dropped
}

type simPart struct {
	rows    simRows
	prev    simRows         // before the latest commit
	lag     map[string]bool // data centres whose replicas missed the latest commit
	pending *simProposal
}

// simCluster is the state machine (see the top of this file).
type simCluster struct {
	mu      sync.Mutex
	rng     *rand.Rand
	parts   map[string]*simPart
	down    bool
	cut     map[string]bool
	oneway  map[string]bool
	dcs     map[string]bool
	rate    float64
	waits   map[string]int // waits since a request of the data centre last succeeded
	reached map[string]int
	faults  int
	parsed  map[string]*simStmt
	settles []func() // one per Registry: waits for its background range grants
}

// simWaitBudget is how many waits in a row, with no request of the data
// centre succeeding, a caller gets before its wait fails as its deadline
// would.
const simWaitBudget = 40

// simRangeFloor is the least numbers a data centre's range takes from a
// sequence in the simulation (DefaultSequenceFloor in production).
const simRangeFloor = 64

func newSimCluster(rng *rand.Rand) *simCluster {
	return &simCluster{rng: rng, parts: map[string]*simPart{}, cut: map[string]bool{}, oneway: map[string]bool{},
		dcs: map[string]bool{}, waits: map[string]int{}, reached: map[string]int{}, parsed: map[string]*simStmt{}}
}

func (c *simCluster) Registry(dc string, now func() time.Time) cql.Registry {
	r, settle := cassandra.NewBackendRegistry(c.Backend(dc, now))
	c.mu.Lock()
	c.settles = append(c.settles, settle)
	c.mu.Unlock()
	return r
}

func (c *simCluster) Backend(dc string, now func() time.Time) cql.Backend {
	c.mu.Lock()
	c.dcs[dc] = true
	c.mu.Unlock()
	return cql.Backend{
		DC: dc, Consistency: gocql.Quorum, Serial: gocql.Serial, Now: now, Wait: c.wait(dc),
		Names:   &simQuerier{c: c, dc: dc, serial: gocql.Serial},
		Numbers: &simNumQuerier{c: c, dc: dc},
		Seqs:    &simSeqQuerier{c: c, dc: dc},
		// Small ranges, so that a history's data centres take many.
		SeqHorizon: time.Hour, SeqFloor: simRangeFloor,
	}
}

func (c *simCluster) Settle() {
	c.mu.Lock()
	settles := append([]func(){}, c.settles...)
	c.mu.Unlock()
	for _, settle := range settles {
		settle()
	}
}

func (c *simCluster) wait(dc string) func(context.Context, time.Duration) error {
	return func(ctx context.Context, _ time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.waits[dc]++
		if c.waits[dc] > simWaitBudget {
			c.waits[dc] = 0
			return context.DeadlineExceeded
		}
		return nil
	}
}

func (c *simCluster) SetDown(down bool) { c.mu.Lock(); c.down = down; c.mu.Unlock() }
func (c *simCluster) SetCut(dc string, cut bool) {
	c.mu.Lock()
	c.cut[dc] = cut
	c.mu.Unlock()
}
func (c *simCluster) SetOneWay(dc string, on bool) {
	c.mu.Lock()
	c.oneway[dc] = on
	c.mu.Unlock()
}
func (c *simCluster) SetFaultRate(p float64) { c.mu.Lock(); c.rate = p; c.mu.Unlock() }

func (c *simCluster) Reached() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.reached))
	for k, v := range c.reached {
		out[k] = v
	}
	return out
}

func (c *simCluster) Faults() int { c.mu.Lock(); defer c.mu.Unlock(); return c.faults }

func (c *simCluster) keys() []string {
	ks := make([]string, 0, len(c.parts))
	for k := range c.parts {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (c *simCluster) Tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.keys() {
		p := c.parts[k]
		if pr := p.pending; pr != nil && (pr.decided || pr.fate) && c.rng.IntN(2) == 0 {
			c.complete(p)
		}
		for _, d := range sortedKeys(c.dcs) {
			if p.lag[d] && !c.cut[d] && c.rng.IntN(2) == 0 {
				delete(p.lag, d)
			}
		}
	}
}

func (c *simCluster) part(pk string) *simPart {
	p := c.parts[pk]
	if p == nil {
		p = &simPart{rows: simRows{}, lag: map[string]bool{}}
		c.parts[pk] = p
	}
	return p
}

// truth is the partition as it will settle: every commit, and the
// proposal in flight if it will be completed.
func (p *simPart) truth() simRows {
	rs := p.rows.clone()
	if pr := p.pending; pr != nil && (pr.decided || pr.fate) {
		rs.apply(pr.writes)
	}
	return rs
}

// view is the partition as dc's coordinator reads it at a local level
// (local) or at a quorum of the cluster.
func (p *simPart) view(dc string, local bool) simRows {
	if local && p.lag[dc] && p.prev != nil {
		return p.prev
	}
	return p.rows
}

// commit applies writes made through dc (at LOCAL_SERIAL if local).
func (c *simCluster) commit(p *simPart, dc string, local bool, writes []simWrite) {
	p.prev = p.rows.clone()
	p.rows.apply(writes)
	p.pending = nil
	for _, d := range sortedKeys(c.dcs) {
		switch {
		case d == dc:
			delete(p.lag, d)
		case c.cut[d] || local || c.rng.IntN(4) == 0:
			p.lag[d] = true
		}
	}
}

// complete commits the proposal left in flight on p.
func (c *simCluster) complete(p *simPart) {
	pr := p.pending
	c.commit(p, pr.dc, pr.local, pr.writes)
	c.reached["applied-later"]++
}

// prepare is a new Paxos round's first phase on p: a proposal in flight
// accepted by a quorum is completed; one accepted by a minority is
// completed if the round's quorum meets it (always for a round that will
// propose, since the simulation decided its fate; half the time for a
// read).
func (c *simCluster) prepare(p *simPart, propose bool) {
	pr := p.pending
	if pr == nil || !(pr.decided || pr.fate) {
		return
	}
	if propose || pr.decided || c.rng.IntN(2) == 0 {
		c.complete(p)
	}
}

// reach fails a request from dc that cannot get the replies it needs:
// quorum is whether it needs a quorum of the whole cluster.
func (c *simCluster) reach(dc string, quorum bool) error {
	// Not counted as faults: the outage and the cut are the driver's.
	switch {
	case c.down:
		return gocql.ErrNoConnections
	case quorum && c.cut[dc]:
		return simErrUnavailable
	}
	return nil
}

func (c *simCluster) ok(dc string) { c.waits[dc] = 0 }

// Outcomes of a conditional request that met a fault.
const (
	simNotApplied = iota
	simCommitted
	simDecided
	simMinorityCompleted
	simMinorityDropped
)

// lwt runs a conditional request (one statement or a batch on one
// partition) from dc at SERIAL or LOCAL_SERIAL. When not applied, it
// returns the rows the conditions were evaluated on.
func (c *simCluster) lwt(dc string, serial gocql.Consistency, pk string, conds []simCond, writes []simWrite) (bool, simRows, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	local := serial == gocql.LocalSerial
	if err := c.reach(dc, !local); err != nil {
		return false, nil, err
	}
	p := c.part(pk)
	c.prepare(p, true)
	view := p.view(dc, local)
	holds := true
	for _, cd := range conds {
		holds = holds && cd.holds(view)
	}
	var err error
	outcome := simCommitted
	switch {
	case c.oneway[dc]: // the driver's cut: not counted as a fault
		err, outcome = gocql.ErrTimeoutNoResponse, simCommitted+c.rng.IntN(2)
	case c.rng.Float64() < c.rate:
		c.faults++
		switch c.rng.IntN(5) {
		case 0:
			err, outcome = simErrWriteTimeout, c.rng.IntN(5)
		case 1:
			err, outcome = gocql.ErrTimeoutNoResponse, c.rng.IntN(5)
		case 2:
			// Overloaded after a quorum accepted (StorageProxy.commitPaxos
			// checks hint overload after the accept phase).
			err, outcome = simErrOverloaded, c.rng.IntN(3)
		case 3:
			err, outcome = simErrUnavailable, simNotApplied
		default:
			err, outcome = simErrCASUnknown, simDecided+c.rng.IntN(3)
		}
	}
	if !holds {
		if err != nil {
			return false, nil, err
		}
		c.ok(dc)
		return false, view.clone(), nil
	}
	switch outcome {
	case simNotApplied:
	case simCommitted:
		c.commit(p, dc, local, writes)
	default:
		p.pending = &simProposal{writes: writes, dc: dc, local: local,
			decided: outcome == simDecided, fate: outcome == simMinorityCompleted}
	}
	if err != nil {
		return false, nil, err
	}
	c.ok(dc)
	return true, nil, nil
}

// serialLevel reports whether cons is a serial consistency, and local
// whether it runs on the data centre's replicas alone.
func levels(cons gocql.Consistency) (serial, local bool) {
	switch cons {
	case gocql.Serial:
		return true, false
	case gocql.LocalSerial:
		return true, true
	case gocql.LocalQuorum, gocql.LocalOne, gocql.One, gocql.Two, gocql.Three, gocql.Any:
		return false, true
	}
	return false, false
}

// read reads partition pk from dc at cons.
func (c *simCluster) read(dc string, cons gocql.Consistency, pk string) (simRows, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	serial, local := levels(cons)
	if err := c.reach(dc, !local); err != nil {
		return nil, err
	}
	p := c.part(pk)
	if serial {
		c.prepare(p, false)
	}
	if c.oneway[dc] {
		return nil, gocql.ErrTimeoutNoResponse
	}
	if c.rng.Float64() < c.rate/2 {
		c.faults++
		errs := []error{simErrReadTimeout, simErrUnavailable, simErrOverloaded, gocql.ErrTimeoutNoResponse}
		if serial {
			errs = append(errs, simErrWriteTimeout) // completing a round in flight
		}
		return nil, errs[c.rng.IntN(len(errs))]
	}
	view := p.view(dc, local)
	if !reflect.DeepEqual(simNorm(view), simNorm(p.truth())) {
		c.reached["stale-read"]++
	}
	c.ok(dc)
	return view.clone(), nil
}

// write runs an unconditional write from dc at cons.
func (c *simCluster) write(dc string, cons gocql.Consistency, pk string, writes []simWrite) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, local := levels(cons)
	if err := c.reach(dc, !local); err != nil {
		return err
	}
	p := c.part(pk)
	if c.oneway[dc] || c.rng.Float64() < c.rate {
		if !c.oneway[dc] {
			c.faults++
		}
		if c.rng.IntN(2) == 0 {
			c.commit(p, dc, local, writes)
		}
		return simErrWriteTimeout
	}
	c.commit(p, dc, local, writes)
	c.ok(dc)
	return nil
}

// scan reads every partition whose key starts with prefix at cons.
func (c *simCluster) scan(dc string, cons gocql.Consistency, prefix string) (map[string]simRows, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, local := levels(cons)
	if err := c.reach(dc, !local); err != nil {
		return nil, err
	}
	if c.oneway[dc] {
		return nil, gocql.ErrTimeoutNoResponse
	}
	out := map[string]simRows{}
	for _, k := range c.keys() {
		if strings.HasPrefix(k, prefix) {
			out[k] = c.parts[k].view(dc, local).clone()
		}
	}
	c.ok(dc)
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
