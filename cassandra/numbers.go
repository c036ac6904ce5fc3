package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// Node numbers (registry.NumberRegistry) live in a table of their own beside
// the names' table, <table>_numbers (id text PRIMARY KEY, number bigint,
// name text, attempt text), so that the names' table keeps its columns:
//
//	number:<n>        name: the name node number n was taken for; attempt:
//	                  a random token of the attempt that took it
//	name:<node name>  number: the name's node number; attempt: the attempt
//	stride            number: the cluster's stride (FormatStriped)
//	next              number: a hint, the highest number taken (written
//	                  without a condition; it may lag, never matters)
//
// A number is taken by INSERT … IF NOT EXISTS on its row (the one after
// the hint first, then a few apart at random, further apart after each
// number found taken), then given to the name by INSERT … IF NOT EXISTS on
// the name's row, both at SERIAL; an
// unknown outcome is resolved by reading the row at SERIAL (the attempt
// column says whether it is ours). A name keeps the number its row got
// first; a number taken by an attempt that lost that race stays taken,
// never given to another name (a gap in the numbers). Names numbered one
// at a time get dense numbers; names numbered at once, or attempts that
// lost a race, leave gaps, so with stride S fewer than S-1 names may fit
// under it (check-names reports a name whose number is not below the
// stride).
const numbersSuffix = "_numbers"

// numberAttempts bounds the numbers one AssignNumber tries to take.
const numberAttempts = 64

type gocqlNumQuerier struct {
	s                     *gocql.Session
	cons                  gocql.Consistency
	serial                gocql.Consistency
	insertStmt, readStmt  string
	hintStmt, namesStmt   string
	createStmt, tableName string
}

func newGocqlNumQuerier(s *gocql.Session, cons gocql.Consistency, serial gocql.Consistency, ks, tbl string) *gocqlNumQuerier {
	t := `"` + ks + `"."` + tbl + numbersSuffix + `"`
	return &gocqlNumQuerier{
		s: s, cons: cons, serial: serial, tableName: tbl + numbersSuffix,
		createStmt: "CREATE TABLE IF NOT EXISTS " + t + " (id text PRIMARY KEY, number bigint, name text, attempt text)",
		insertStmt: "INSERT INTO " + t + " (id, number, name, attempt) VALUES (?, ?, ?, ?) IF NOT EXISTS",
		readStmt:   "SELECT number, name, attempt FROM " + t + " WHERE id = ?",
		hintStmt:   "UPDATE " + t + " SET number = ? WHERE id = 'next'",
		namesStmt:  "SELECT id, number, name, WRITETIME(name) FROM " + t,
	}
}

func (g *gocqlNumQuerier) Insert(ctx context.Context, key string, number uint64, name, token string) (bool, cql.NumRow, error) {
	var cur cql.NumRow
	q := g.s.Query(g.insertStmt, key, int64(number), name, token).Consistency(g.cons).SerialConsistency(g.serial)
	applied, err := q.MapScanCASContext(ctx, map[string]any{"id": new(string), "number": &cur.Number, "name": &cur.Name, "attempt": &cur.Token})
	return applied, cur, err
}

func (g *gocqlNumQuerier) Read(ctx context.Context, key string, serial bool) (cql.NumRow, bool, error) {
	var row cql.NumRow
	cons := g.cons
	if serial {
		cons = g.serial
	}
	q := g.s.Query(g.readStmt, key).Consistency(cons)
	err := q.ScanContext(ctx, &row.Number, &row.Name, &row.Token)
	if errors.Is(err, gocql.ErrNotFound) {
		return row, false, nil
	}
	return row, err == nil, err
}

func (g *gocqlNumQuerier) Hint(ctx context.Context, n uint64) error {
	return g.s.Query(g.hintStmt, int64(n)).Consistency(g.cons).ExecContext(ctx)
}

func (g *gocqlNumQuerier) Names(ctx context.Context) (cql.NumTable, error) {
	out := cql.NumTable{Given: map[string]uint64{}, Taken: map[string][]cql.NumTaken{}}
	iter := g.s.Query(g.namesStmt).Consistency(g.cons).IterContext(ctx)
	var key string
	var n, written *int64
	var name *string
	for iter.Scan(&key, &n, &name, &written) {
		out.Add(key, n, name, written)
	}
	return out, iter.Close()
}

// numbers returns the numbers table's querier, creating the table if it
// is missing (create) or reporting ok false if not.
func (r *Registry) numbers(ctx context.Context, create bool) (cql.NumQuerier, bool, error) {
	q, ok, _, err := r.numbersCreated(ctx, create)
	return q, ok, err
}

// numbersCreated is numbers, also reporting whether it created the table.
func (r *Registry) numbersCreated(ctx context.Context, create bool) (q cql.NumQuerier, ok, created bool, err error) {
	r.nums.mu.Lock()
	defer r.nums.mu.Unlock()
	if r.nums.q != nil {
		return r.nums.q, true, false, nil
	}
	if r.session == nil { // tests that inject a querier of names alone
		if create {
			return nil, false, false, fmt.Errorf("snapid: %w: node numbers: no session", registry.ErrRegistry)
		}
		return nil, false, false, nil
	}
	if len(r.tbl)+len(numbersSuffix) > 48 {
		if !create {
			return nil, false, false, nil // no numbers table can exist
		}
		return nil, false, false, invalidArg("table name %q is too long for node numbers (its table %s%s must fit Cassandra's 48 characters)", r.tbl, r.tbl, numbersSuffix)
	}
	g := newGocqlNumQuerier(r.session, r.cons, r.serial, r.ks, r.tbl)
	ok, err = r.schemaHas(ctx, `SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, r.ks, g.tableName)
	if err != nil {
		return nil, false, false, fmt.Errorf("snapid: %w: reading the schema: %w", registry.ErrRegistry, err)
	}
	if !ok {
		if !create {
			return nil, false, false, nil
		}
		if err := r.session.Query(g.createStmt).ExecContext(ctx); err != nil {
			return nil, false, false, fmt.Errorf("snapid: %w: creating table %s.%s (snapctl setup creates it with a role that may): %w", registry.ErrRegistry, r.ks, g.tableName, err)
		}
		if err := r.agree(ctx); err != nil {
			return nil, false, true, err
		}
		created = true
	}
	r.nums.q = g
	return g, true, created, nil
}

var _ registry.NumberRegistry = (*Registry)(nil)

// AssignNumber implements registry.NumberRegistry.AssignNumber.
func (r *Registry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	if err := registry.ValidateName(name); err != nil {
		return 0, err
	}
	if err := checkOwner(owner); err != nil {
		return 0, err
	}
	if err := checkField("session", session); err != nil {
		return 0, err
	}
	h, err := r.Get(ctx, name)
	switch {
	case errors.Is(err, registry.ErrNotRegistered):
		return 0, fmt.Errorf("snapid: %w: assign a node number to %q: the name has no row (%w)", registry.ErrNameTaken, name, registry.ErrNotRegistered)
	case err != nil:
		return 0, err
	case h.Owner != owner || h.Session != session || h.State != registry.StateActive:
		return 0, fmt.Errorf("snapid: %w: assign a node number to %q: not held by this owner and session: %s", registry.ErrNameTaken, name, h)
	case h.Number != 0:
		return h.Number, nil
	}
	q, _, err := r.numbers(ctx, true)
	if err != nil {
		return 0, err
	}
	if row, ok, err := q.Read(ctx, "name:"+name, true); err != nil {
		return 0, fmt.Errorf("snapid: %w: reading the node number of %q: %w", registry.ErrRegistry, name, err)
	} else if ok {
		return number(name, row)
	}
	n, err := r.takeNumber(ctx, q, name)
	if err != nil {
		return 0, err
	}
	return r.giveNumber(ctx, q, name, n)
}

// number decodes the number of a name's row.
func number(name string, row cql.NumRow) (uint64, error) {
	if row.Number == nil || *row.Number <= 0 || *row.Number > registry.MaxNodeNumber {
		return 0, fmt.Errorf("snapid: %w: the node number row of %q holds %v, not 1 to %d", registry.ErrRegistry, name, row.Number, uint64(registry.MaxNodeNumber))
	}
	return uint64(*row.Number), nil
}

// takeNumber takes a free node number for name: the one after the hint
// first, so that names numbered one at a time get 1, 2, 3, … (every
// number below the stride usable); after each number found taken, further
// on, a few apart at random and more each time, so that hosts starting
// together meet less. Measured on one node with 16 names: one at a time,
// 1 insert per name and numbers 1 to 16 (a random first gap of 0 to 3
// gave numbers up to 45); 16 at once, 3.25 inserts per name against 2.65
// with the random first gap, and about the same highest number.
func (r *Registry) takeNumber(ctx context.Context, q cql.NumQuerier, name string) (uint64, error) {
	var start uint64
	row, ok, err := q.Read(ctx, "next", false)
	if err != nil {
		// Starting from 0 instead would walk every number taken.
		return 0, fmt.Errorf("snapid: %w: assign a node number to %q: reading the hint: %w", registry.ErrRegistry, name, err)
	}
	if ok && row.Number != nil && *row.Number > 0 {
		start = uint64(*row.Number)
	}
	n := start + 1
	for attempt := range numberAttempts {
		if attempt > 0 {
			if err := r.backoff(ctx, min(attempt, 4)); err != nil {
				return 0, fmt.Errorf("snapid: %w: assign a node number to %q: %w", registry.ErrRegistry, name, err)
			}
		}
		if n > registry.MaxNodeNumber {
			return 0, fmt.Errorf("snapid: %w: assign a node number to %q: every node number up to %d is taken", registry.ErrExhausted, name, uint64(registry.MaxNodeNumber))
		}
		applied, cur, err := r.insertRow(ctx, q, "take node number", name, "number:"+strconv.FormatUint(n, 10), n, name)
		if err != nil {
			return 0, err
		}
		if applied || str(cur.Name) == name {
			// Ours, or taken for this name by an earlier attempt.
			_ = q.Hint(ctx, n)
			return n, nil
		}
		// Taken: further each time, so that a hint far behind (a lost
		// hint write, many hosts at once) is passed within the attempts.
		n += 1 + uint64(rand.IntN(4)) + uint64(attempt*attempt)
	}
	return 0, fmt.Errorf("snapid: %w: assign a node number to %q: %d numbers tried were taken; try again", registry.ErrRegistry, name, numberAttempts)
}

// giveNumber records n as name's number unless the name has one already
// (another attempt's), and returns the name's number.
func (r *Registry) giveNumber(ctx context.Context, q cql.NumQuerier, name string, n uint64) (uint64, error) {
	applied, cur, err := r.insertRow(ctx, q, "give node number", name, "name:"+name, n, name)
	if err != nil {
		return 0, err
	}
	if applied {
		return n, nil
	}
	return number(name, cur)
}

// insertRow runs INSERT … IF NOT EXISTS of key's row as one LWT, resolving
// a lost answer by reading the row at SERIAL (the attempt's token says
// whether it is ours). When not applied, cur is the row there.
func (r *Registry) insertRow(ctx context.Context, q cql.NumQuerier, op, name, key string, number uint64, rowName string) (applied bool, cur cql.NumRow, err error) {
	token := newClaimToken()
	applied, err = runLWT(ctx, r.log, op, name,
		func() (bool, error) {
			var err error
			var ok bool
			ok, cur, err = q.Insert(ctx, key, number, rowName, token)
			return ok, err
		},
		func() (outcome, error) {
			row, found, err := q.Read(ctx, key, true)
			switch {
			case err != nil:
				return outcomeLost, err
			case !found:
				return outcomeResend, nil
			case str(row.Token) == token:
				return outcomeApplied, nil
			}
			cur = row
			return outcomeLost, nil
		})
	return applied, cur, err
}

// nameNumbers reads the numbers table whole (nothing if it does not
// exist).
func (r *Registry) nameNumbers(ctx context.Context) (cql.NumTable, error) {
	q, ok, err := r.numbers(ctx, false)
	if err != nil || !ok {
		return cql.NumTable{}, err
	}
	return q.Names(ctx)
}

// settleNumbers fills in the node numbers of rows from the numbers table
// read whole (t, at the configured consistency). A row that has none
// there but a number taken for it is one whose assignment did not
// complete, or whose give is not committed everywhere yet: its name's row
// is read at SERIAL, which completes a give left in flight; if there is
// still none, the number taken (the latest) is NumberTaken.
func (r *Registry) settleNumbers(ctx context.Context, t cql.NumTable, rows []registry.Holder) error {
	q, ok, err := r.numbers(ctx, false)
	if err != nil || !ok {
		return err
	}
	for i := range rows {
		h := &rows[i]
		if h.Number = t.Given[h.Name]; h.Number != 0 || len(t.Taken[h.Name]) == 0 {
			continue
		}
		st, err := numberState(ctx, q, h.Name, func() (cql.NumTable, error) { return t, nil })
		if err != nil {
			return err
		}
		h.Number, h.NumberTaken, h.NumberTakenAt = st.Number, st.Taken, st.TakenAt
	}
	return nil
}

// NumberState is what the registry holds about a name's node number.
type NumberState struct {
	// Number is the name's node number, 0 if it has none.
	Number uint64
	// Taken, for a name without a number, is a number taken for it
	// whose assignment did not complete (its answer lost or timed out:
	// the outcome was unknown), and TakenAt when (zero if unknown); 0 if
	// none. The name's next assignment (its host's next start) settles
	// it: the name gets one number, and one taken but not given stays a
	// gap, never another name's.
	Taken   uint64
	TakenAt time.Time
}

// NodeNumber returns what the registry holds about name's node number,
// as its next assignment will find it: its number's row read at SERIAL
// (a give whose answer was lost is completed first) and, without one, the
// latest number taken for it (the table read whole). A registry without
// node numbers has none.
func (r *Registry) NodeNumber(ctx context.Context, name string) (NumberState, error) {
	if err := registry.ValidateName(name); err != nil {
		return NumberState{}, err
	}
	q, ok, err := r.numbers(ctx, false)
	if err != nil || !ok {
		return NumberState{}, err
	}
	return numberState(ctx, q, name, func() (cql.NumTable, error) { return q.Names(ctx) })
}

// numberState is NodeNumber over q, with table reading the table whole
// (called only when the name has no number).
func numberState(ctx context.Context, q cql.NumQuerier, name string, table func() (cql.NumTable, error)) (NumberState, error) {
	row, found, err := q.Read(ctx, "name:"+name, true)
	if err != nil {
		return NumberState{}, fmt.Errorf("snapid: %w: reading the node number of %q: %w", registry.ErrRegistry, name, err)
	}
	if found {
		n, err := number(name, row)
		return NumberState{Number: n}, err
	}
	t, err := table()
	if err != nil {
		return NumberState{}, fmt.Errorf("snapid: %w: reading the node numbers: %w", registry.ErrRegistry, err)
	}
	var st NumberState
	for _, tk := range t.Taken[name] {
		if st.Taken == 0 || tk.At.After(st.TakenAt) || tk.At.Equal(st.TakenAt) && tk.Number > st.Taken {
			st.Taken, st.TakenAt = tk.Number, tk.At
		}
	}
	return st, nil
}

// nameNumber returns name's node number, 0 if it has none.
func (r *Registry) nameNumber(ctx context.Context, name string) (uint64, error) {
	q, ok, err := r.numbers(ctx, false)
	if err != nil || !ok {
		return 0, err
	}
	row, found, err := q.Read(ctx, "name:"+name, false)
	if err != nil || !found {
		return 0, err
	}
	return number(name, row)
}

// SetStride implements registry.NumberRegistry.SetStride.
func (r *Registry) SetStride(ctx context.Context, stride uint64) (uint64, error) {
	if stride < 2 || stride > registry.MaxNodeNumber+1 {
		return 0, invalidArg("stride %d: want 2 to %d", stride, uint64(registry.MaxNodeNumber)+1)
	}
	q, _, err := r.numbers(ctx, true)
	if err != nil {
		return 0, err
	}
	applied, cur, err := r.insertRow(ctx, q, "set stride", "", "stride", stride, "")
	if err != nil {
		return 0, err
	}
	if applied {
		return stride, nil
	}
	s, err := strideOf(cur)
	if err != nil {
		return 0, err
	}
	if s != stride {
		return s, fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d", registry.ErrStrideMismatch, s, stride)
	}
	return s, nil
}

// Stride implements registry.NumberRegistry.Stride.
func (r *Registry) Stride(ctx context.Context) (uint64, error) {
	q, ok, err := r.numbers(ctx, false)
	if err != nil || !ok {
		return 0, err
	}
	row, found, err := q.Read(ctx, "stride", true)
	if err != nil {
		return 0, fmt.Errorf("snapid: %w: reading the stride: %w", registry.ErrRegistry, err)
	}
	if !found {
		return 0, nil
	}
	return strideOf(row)
}

func strideOf(row cql.NumRow) (uint64, error) {
	if row.Number == nil || *row.Number < 2 || *row.Number > registry.MaxNodeNumber+1 {
		return 0, fmt.Errorf("snapid: %w: the stride row holds %v", registry.ErrRegistry, row.Number)
	}
	return uint64(*row.Number), nil
}
