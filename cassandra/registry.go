package cassandra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid"
)

// Registry is the snapid.Registry kept in an Apache Cassandra table; the
// package documentation describes the table and how its rows are kept
// consistent.
//
// It is safe for concurrent use by any number of goroutines, and any number
// of Registry values, in any number of processes and hosts, may use
// one table at once: every change is a lightweight transaction conditional
// on the row it was decided from. Every method honours its context.
//
// It must outlive the Generators that use it: close them first, then the
// Registry. A Generator closed after its registry cannot return its unused
// reservation (its Close fails with snapid.ErrRegistry), and the next start
// of that host skips to the registry's mark.
type Registry struct {
	session  *gocql.Session // nil in tests that inject q alone
	q        casQuerier
	log      *slog.Logger
	ks, tbl  string // validated identifiers
	stmts    statements
	now      func() time.Time // tests move the clock
	pageSize int              // rows per page of List
	closed   sync.Once
	// awaitSchema waits for the cluster to agree on the schema (the
	// session's AwaitSchemaAgreement; tests count the calls). gocql 1.7.0
	// counts nodes that are down, so a wait with one node down lasts until
	// its timeout: it is called only after this process changed the schema.
	awaitSchema func(context.Context) error
	// cons and localDC are the configured commit consistency and data
	// centre; nodes counts the cluster's nodes per data centre (readNodes;
	// tests inject the topology of a larger cluster).
	cons    gocql.Consistency
	localDC string
	nodes   func(context.Context) (map[string]int, error)
	seqs    seqState // sequences (seqstore.go, sequence.go)
}

var _ snapid.Registry = (*Registry)(nil)

// Bounds of the loops that handle races, and the page size of List.
const (
	claimAttempts = 6 // reads and conditional updates of a row that keeps changing
	listPageSize  = 1000
)

// NewRegistry validates cfg, connects, checks what of cfg depends on the
// cluster (LocalDC must be one of its data centres; EACH_QUORUM needs a
// NetworkTopologyStrategy keyspace), creates the keyspace and the
// table if they do not exist (unless cfg.NoCreate; after creating anything
// it waits for the cluster to agree on the schema) and checks the table's
// columns. An invalid cfg is refused with an error wrapping
// snapid.ErrInvalidOption before any connection is made, or, for what
// depends on the cluster, before anything is created: a keyspace to create
// whose replication cannot survive the loss of one node is refused with
// ErrFragileReplication unless cfg.AllowFragileReplication. A connection
// or schema failure wraps snapid.ErrRegistry. ctx bounds the whole set-up.
//
// Creating what is missing keeps a single node or a test working with no
// set-up. On a production cluster, create the schema once with
// CreateSchema (snapctl setup), with the replication it needs,
// rather than from every host's first start at once.
func NewRegistry(ctx context.Context, cfg Config) (*Registry, error) {
	r, err := dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := r.setUp(ctx, cfg, !cfg.NoCreate); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// dial validates cfg and connects, without touching the schema.
func dial(ctx context.Context, cfg Config) (*Registry, error) {
	cluster, err := cfg.cluster()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cluster.Logger = slogStdLogger{log}
	session, err := createSession(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("snapid: %w: connecting to Cassandra at %s: %w", snapid.ErrRegistry, strings.Join(cfg.Hosts, ","), err)
	}
	r := newRegistry(session, &gocqlQuerier{
		s:      session,
		cons:   cluster.Consistency,
		serial: cluster.SerialConsistency,
	}, cfg.keyspace(), cfg.table(), log)
	r.cons, r.localDC = cluster.Consistency, cfg.LocalDC
	r.seqs.cfg = cfg
	return r, nil
}

func newRegistry(s *gocql.Session, q *gocqlQuerier, ks, tbl string, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{session: s, q: q, log: log, ks: ks, tbl: tbl, now: time.Now, pageSize: listPageSize, cons: gocql.Quorum}
	r.nodes = func(ctx context.Context) (map[string]int, error) { return readNodes(ctx, r.session) }
	r.awaitSchema = func(ctx context.Context) error {
		if r.session == nil {
			return errors.New("no session")
		}
		return r.session.AwaitSchemaAgreement(ctx)
	}
	r.stmts = newStatements(ks, tbl)
	q.selectOne = r.stmts.selectOne
	return r
}

// createSession connects, giving up when ctx ends (gocql's own connection
// set-up takes no context; a session that arrives after ctx ended is
// closed).
func createSession(ctx context.Context, cluster *gocql.ClusterConfig) (*gocql.Session, error) {
	type result struct {
		s   *gocql.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := cluster.CreateSession()
		ch <- result{s, err}
	}()
	select {
	case res := <-ch:
		return res.s, res.err
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.s != nil {
				res.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// Close closes the connections. It is idempotent; calls after Close fail
// with an error wrapping snapid.ErrRegistry.
func (r *Registry) Close() {
	r.closed.Do(func() {
		r.closeSequences()
		if r.session != nil {
			r.session.Close()
		}
	})
}

// Keyspace returns the registry table's keyspace.
func (r *Registry) Keyspace() string { return r.ks }

// Table returns the registry table's name.
func (r *Registry) Table() string { return r.tbl }

func invalidArg(format string, args ...any) error {
	return fmt.Errorf("snapid: %w: %s", snapid.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// checkOwner validates an owner token: 1 to 128 printable ASCII characters
// without spaces (snapid's tokens are 32 hex digits).
func checkOwner(owner string) error {
	if owner == "" {
		return invalidArg("empty owner token")
	}
	if len(owner) > 128 {
		return invalidArg("owner token of %d bytes (at most 128)", len(owner))
	}
	for i := 0; i < len(owner); i++ {
		if owner[i] <= ' ' || owner[i] > '~' {
			return invalidArg("owner token byte %d is %q (want printable ASCII)", i, owner[i])
		}
	}
	return nil
}

func checkField(what, v string) error {
	if len(v) > 1024 {
		return invalidArg("%s of %d bytes (at most 1024)", what, len(v))
	}
	return nil
}

// timestamp returns the current time at the precision Cassandra stores.
func (r *Registry) timestamp() time.Time {
	return r.now().UTC().Truncate(time.Millisecond)
}

func newClaimToken() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic("snapid: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Claim implements snapid.Registry.Claim (see there).
//
// It sends "INSERT … IF NOT EXISTS"; a new name is then held. Otherwise the
// failed insert returns the row, and Claim decides from it:
//
//   - same owner: refused with snapid.ErrProbableClone if c.CloneWindow > 0, the
//     row is active, was last seen less than c.CloneWindow ago, and its
//     machine id or host name differ from c's; otherwise refreshed (host
//     name, address, machine id, last seen, state active). Force does not
//     bypass the clone check: set CloneWindow to zero for that.
//   - another owner, released: taken over; Reserved is the old holder's
//     recorded final value, which the new holder's counter must start at.
//   - another owner, active (or a partial row without owner or state):
//     refused with an error wrapping snapid.ErrNameTaken that describes the
//     holder, unless c.Force; then taken over with Reserved = max(the old
//     mark, c.Floor).
//
// The update is conditional on the row as read, so two claimers never both
// win; a claimer whose update fails looks at the row again. Each claim
// writes a fresh random claim token, which resolves a claim whose reply was
// lost (see "Unknown outcomes" in the package documentation).
func (r *Registry) Claim(ctx context.Context, c snapid.Claim) (snapid.Holder, error) {
	if err := snapid.ValidateName(c.Name); err != nil {
		return snapid.Holder{}, err
	}
	if err := checkOwner(c.Owner); err != nil {
		return snapid.Holder{}, err
	}
	for _, f := range [...]struct{ what, v string }{{"host name", c.Hostname}, {"address", c.Address}, {"machine id", c.MachineID}} {
		if err := checkField(f.what, f.v); err != nil {
			return snapid.Holder{}, err
		}
	}
	if c.CloneWindow < 0 {
		return snapid.Holder{}, invalidArg("negative clone window %v", c.CloneWindow)
	}
	var lastRow snapid.Holder
	for attempt := 0; attempt < claimAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return snapid.Holder{}, fmt.Errorf("snapid: %w: claim %q: %w", snapid.ErrRegistry, c.Name, err)
			}
		}
		h, done, err := r.claimOnce(ctx, c, &lastRow)
		if done || err != nil {
			return h, err
		}
	}
	return lastRow, fmt.Errorf("snapid: %w: claim %q: the row kept changing during %d attempts (last seen: %s)",
		snapid.ErrRegistry, c.Name, claimAttempts, lastRow)
}

// orUnknown is s, or "unknown" if it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// backoff waits a short random time that grows with attempt, so that
// claimers racing on one row do not retry in lock step.
func backoff(ctx context.Context, attempt int) error {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(attempt)*20+1))
	if err != nil {
		return err
	}
	t := time.NewTimer(time.Duration(n.Int64()+1) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimOnce makes one attempt: insert, or decide from the row and update
// it. done false means the row changed under us: try again.
func (r *Registry) claimOnce(ctx context.Context, c snapid.Claim, lastRow *snapid.Holder) (h snapid.Holder, done bool, err error) {
	now := r.timestamp()
	token := newClaimToken()
	mine := func(cur *record, found bool) outcome {
		switch {
		case found && str(cur.token) == token:
			return outcomeApplied
		case !found:
			return outcomeResend
		}
		return outcomeLost
	}
	res, err := r.runCAS(ctx, "claim", c.Name, mine, r.stmts.insert,
		c.Name, c.Owner, c.Hostname, c.Address, c.MachineID, now, now, int64(0), snapid.StateActive, token)
	if err != nil {
		return snapid.Holder{}, true, err
	}
	if res.applied {
		if res.reread {
			return res.cur.holder(), true, nil
		}
		r.log.Debug("snapid: name claimed", "name", c.Name)
		return snapid.Holder{Name: c.Name, Owner: c.Owner, Hostname: c.Hostname, Address: c.Address, MachineID: c.MachineID,
			State: snapid.StateActive, RegisteredAt: now, LastSeen: now, Session: token}, true, nil
	}
	// The whole row: INSERT IF NOT EXISTS returns it, as does the serial
	// read that resolved a lost reply.
	decided := res.cur
	old := decided.holder()
	*lastRow = old
	if str(decided.token) == token {
		// A reply lost earlier in this attempt was in fact applied, and the
		// resent insert found our own row.
		return old, true, nil
	}

	next := snapid.Holder{Name: c.Name, Owner: c.Owner, Hostname: c.Hostname, Address: c.Address, MachineID: c.MachineID,
		State: snapid.StateActive, RegisteredAt: old.RegisteredAt, LastSeen: now, Reserved: old.Reserved, Session: token}
	switch {
	case old.Owner == c.Owner:
		otherMachine := old.MachineID != c.MachineID || old.Hostname != c.Hostname
		seen := now.Sub(old.LastSeen)
		if otherMachine && old.State == snapid.StateActive && c.CloneWindow > 0 && seen < c.CloneWindow {
			return old, true, fmt.Errorf("snapid: %w: %q is active with this owner token on %s (machine %s, last seen %s ago), but this claim comes from %s (machine %s); "+
				"if the other machine is gone, wait %s after its last sighting",
				snapid.ErrProbableClone, c.Name, orUnknown(old.Hostname), orUnknown(old.MachineID), seen.Round(time.Second),
				orUnknown(c.Hostname), orUnknown(c.MachineID), c.CloneWindow)
		}
	case old.State == snapid.StateReleased && old.Owner != "":
		next.RegisteredAt = now
		r.log.Info("snapid: taking over a released name", "name", c.Name, "previous", old.String(), "final", old.Reserved)
	case c.Force:
		next.RegisteredAt = now
		next.Reserved = max(old.Reserved, c.Floor)
		r.log.Warn("snapid: forced take-over of a name held by another owner", "name", c.Name, "previous", old.String(),
			"reserved", next.Reserved)
	default:
		return old, true, fmt.Errorf("snapid: %w: %q is %s; take it over only if that holder is gone for good (force, with a start floor)",
			snapid.ErrNameTaken, c.Name, old)
	}

	// Conditional on the row we decided from.
	judge := func(cur *record, found bool) outcome {
		switch {
		case found && str(cur.token) == token:
			return outcomeApplied
		case found && same(cur.owner, decided.owner) && same(cur.state, decided.state) &&
			same(cur.reserved, decided.reserved) && same(cur.token, decided.token):
			return outcomeResend
		}
		return outcomeLost
	}
	res2, err := r.runCAS(ctx, "claim", c.Name, judge, r.stmts.claimUpdate,
		next.Owner, next.Hostname, next.Address, next.MachineID, next.RegisteredAt, next.LastSeen,
		int64(next.Reserved), next.State, token, c.Name,
		decided.owner, decided.state, decided.reserved, decided.token)
	if err != nil {
		return snapid.Holder{}, true, err
	}
	switch {
	case res2.applied && res2.reread:
		return res2.cur.holder(), true, nil
	case res2.applied:
		return next, true, nil
	case str(res2.cur.token) == token:
		// Applied by an earlier send whose reply was lost; read the row.
		var rec record
		found, err := r.q.serialRead(ctx, &rec, c.Name)
		if err != nil {
			return snapid.Holder{}, true, fmt.Errorf("snapid: %w: claim %q: reading the claimed row: %w", snapid.ErrRegistry, c.Name, err)
		}
		if found && str(rec.token) == token {
			return rec.holder(), true, nil
		}
	}
	return snapid.Holder{}, false, nil
}

// Extend implements snapid.Registry.Extend:
//
//	UPDATE … SET reserved = new, last_seen = now WHERE name = ?
//	IF owner = ? AND state = 'active' AND reserved = old
//
// On success the returned snapid.Holder has Name, Owner, State, Reserved (new) and
// LastSeen set; the other fields are zero (an applied LWT returns no row).
// When the condition fails, the row is read at SERIAL: a missing row, or a
// row released or held by another owner, is snapid.ErrNameTaken (wrapped with the
// holder's details; a missing row also matches snapid.ErrNotRegistered), and the
// row is not changed or recreated; a row of this owner whose mark is not
// old is returned with snapid.ErrMarkMoved.
func (r *Registry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (snapid.Holder, error) {
	if err := snapid.ValidateName(name); err != nil {
		return snapid.Holder{}, err
	}
	if err := checkOwner(owner); err != nil {
		return snapid.Holder{}, err
	}
	if err := checkField("session", session); err != nil {
		return snapid.Holder{}, err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		now := r.timestamp()
		ours := func(cur *record) bool {
			return str(cur.owner) == owner && str(cur.token) == session && str(cur.state) == snapid.StateActive
		}
		judge := func(cur *record, found bool) outcome {
			switch {
			case found && ours(cur) && cur.reserved != nil && uint64(*cur.reserved) == new && cur.lastSeen != nil && cur.lastSeen.Equal(now):
				return outcomeApplied
			case found && ours(cur) && cur.reserved != nil && uint64(*cur.reserved) == old:
				return outcomeResend
			}
			return outcomeLost
		}
		res, err := r.runCAS(ctx, "extend", name, judge, r.stmts.extend,
			int64(new), now, name, owner, session, snapid.StateActive, int64(old))
		if err != nil {
			return snapid.Holder{}, err
		}
		if res.applied {
			return snapid.Holder{Name: name, Owner: owner, Session: session, State: snapid.StateActive, Reserved: new, LastSeen: now}, nil
		}
		cur, found, err := r.fullRow(ctx, "extend", name, res)
		if err != nil {
			return snapid.Holder{}, err
		}
		h := cur.holder()
		switch {
		case !found || !ours(&cur):
			return h, r.notHeld("extend", name, owner, h, found)
		case cur.reserved == nil || uint64(*cur.reserved) != old:
			return h, fmt.Errorf("snapid: %w: %q: the registry's mark is %d, not %d", snapid.ErrMarkMoved, name, h.Reserved, old)
		}
		// The condition holds again (the row changed back): try again.
	}
	return snapid.Holder{}, fmt.Errorf("snapid: %w: extend %q: the row kept changing", snapid.ErrRegistry, name)
}

// notHeld is the error of a change refused because owner does not hold
// name.
func (r *Registry) notHeld(op, name, owner string, h snapid.Holder, found bool) error {
	switch {
	case !found:
		return fmt.Errorf("snapid: %w: %s %q: the name has no row (%w); nothing was written", snapid.ErrNameTaken, op, name, snapid.ErrNotRegistered)
	case h.Owner == owner && h.State == snapid.StateActive:
		return fmt.Errorf("snapid: %w: %s %q: a later claim with this owner token replaced this host's (%s): "+
			"a copy of the counter directory in use elsewhere?; nothing was written", snapid.ErrNameTaken, op, name, h)
	case h.Owner == owner:
		return fmt.Errorf("snapid: %w: %s %q: this owner released the name (%s); nothing was written", snapid.ErrNameTaken, op, name, h)
	}
	return fmt.Errorf("snapid: %w: %s %q: another owner has it: %s; nothing was written", snapid.ErrNameTaken, op, name, h)
}

// Touch implements snapid.Registry.Touch:
//
//	UPDATE … SET last_seen = now WHERE name = ? IF owner = ? AND claim_token = ? AND state = 'active'
//
// A missing, released or taken-over row is not changed: snapid.ErrNameTaken.
func (r *Registry) Touch(ctx context.Context, name, owner, session string) error {
	if err := snapid.ValidateName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	if err := checkField("session", session); err != nil {
		return err
	}
	now := r.timestamp()
	ours := func(cur *record) bool {
		return str(cur.owner) == owner && str(cur.token) == session && str(cur.state) == snapid.StateActive
	}
	judge := func(cur *record, found bool) outcome {
		switch {
		case found && ours(cur) && cur.lastSeen != nil && cur.lastSeen.Equal(now):
			return outcomeApplied
		case found && ours(cur):
			return outcomeResend
		}
		return outcomeLost
	}
	res, err := r.runCAS(ctx, "touch", name, judge, r.stmts.touch, now, name, owner, session, snapid.StateActive)
	if err != nil || res.applied {
		return err
	}
	cur, found, err := r.fullRow(ctx, "touch", name, res)
	if err != nil {
		return err
	}
	if found && ours(&cur) {
		// Released and claimed back by this owner in between: the name is
		// ours again, and the claim refreshed last_seen.
		return nil
	}
	return r.notHeld("touch", name, owner, cur.holder(), found)
}

// Release implements snapid.Registry.Release. It reads the row at SERIAL,
// compares the recorded mark with final in Go (as unsigned numbers: CQL
// compares bigint as signed, which would misorder marks at and above
// 2^63), then writes
//
//	UPDATE … SET state = 'released', reserved = final, last_seen = now
//	WHERE name = ? IF owner = ? AND reserved = <the mark read>
//
// so the condition holds only on the row the decision was made from. If
// the row changed in between, it reads and decides again (a few times).
// A missing row or a row of another owner is not changed: snapid.ErrNameTaken. A
// mark above final is not changed either: snapid.ErrMarkMoved. Releasing a
// released row of the same owner records final again.
func (r *Registry) Release(ctx context.Context, name, owner string, final uint64) error {
	if err := snapid.ValidateName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("snapid: %w: release %q: %w", snapid.ErrRegistry, name, err)
			}
		}
		var cur record
		found, err := r.q.serialRead(ctx, &cur, name)
		if err != nil {
			return fmt.Errorf("snapid: %w: release %q: reading the row: %w", snapid.ErrRegistry, name, err)
		}
		h := cur.holder()
		switch {
		case !found || h.Owner != owner:
			return r.notHeld("release", name, owner, h, found)
		case h.Reserved > final:
			return fmt.Errorf("snapid: %w: release %q: the registry's mark %d is above the final value %d; nothing was written",
				snapid.ErrMarkMoved, name, h.Reserved, final)
		}
		read := cur.reserved
		now := r.timestamp()
		judge := func(row *record, found bool) outcome {
			switch {
			case !found || str(row.owner) != owner:
				return outcomeLost
			case str(row.state) == snapid.StateReleased && row.reserved != nil && uint64(*row.reserved) == final &&
				row.lastSeen != nil && row.lastSeen.Equal(now):
				return outcomeApplied
			case same(row.reserved, read):
				return outcomeResend
			}
			return outcomeLost
		}
		res, err := r.runCAS(ctx, "release", name, judge, r.stmts.release,
			snapid.StateReleased, int64(final), now, name, owner, read)
		if err != nil || res.applied {
			return err
		}
		// The row changed since it was read: decide again.
	}
	return fmt.Errorf("snapid: %w: release %q: the row kept changing during %d attempts", snapid.ErrRegistry, name, claimAttempts)
}

// Get implements snapid.Registry.Get: the row read at SERIAL consistency (which
// sees every LWT that completed, and completes one left in flight), or
// snapid.ErrNotRegistered.
func (r *Registry) Get(ctx context.Context, name string) (snapid.Holder, error) {
	if err := snapid.ValidateName(name); err != nil {
		return snapid.Holder{}, err
	}
	var rec record
	found, err := r.q.serialRead(ctx, &rec, name)
	if err != nil {
		return snapid.Holder{}, fmt.Errorf("snapid: %w: get %q: %w", snapid.ErrRegistry, name, err)
	}
	if !found {
		return snapid.Holder{}, fmt.Errorf("snapid: %w: %q", snapid.ErrNotRegistered, name)
	}
	return rec.holder(), nil
}

// List implements snapid.Registry.List: every row, read page by page at the
// configured consistency (not serial: a row being changed at that moment
// may show its previous state). Rows are in token order.
func (r *Registry) List(ctx context.Context) ([]snapid.Holder, error) {
	if r.session == nil {
		return nil, fmt.Errorf("snapid: %w: list: no session", snapid.ErrRegistry)
	}
	q := r.session.Query(r.stmts.selectAll).WithContext(ctx).PageSize(r.pageSize)
	defer q.Release()
	iter := q.Iter()
	var out []snapid.Holder
	for {
		var rec record
		if !iter.Scan(rec.dests()...) {
			break
		}
		out = append(out, rec.holder())
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("snapid: %w: list: %w", snapid.ErrRegistry, err)
	}
	return out, nil
}
