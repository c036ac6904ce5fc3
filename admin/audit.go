package admin

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/snapid/snapid/internal/nodename"
	"github.com/snapid/snapid/registry"
)

// Problem kinds reported by Audit. They are stable: scripts match them in
// `snapctl check-names --json` output.
const (
	// A row whose name breaks the node name rule (written by another tool),
	// or this host's configured name breaking it.
	ProblemInvalidName = "invalid_name"
	// Rows whose names become equal once normalised as Snap! normalises
	// host names (cut at the first ".", "-" becomes "_", lower-case): hosts
	// configured with those spellings would issue the same ids.
	ProblemNormalisedCollision = "normalised_collision"
	// A row without owner or without state: a partial row, as left by a
	// write that raced a delete (a resurrected row) or by another tool.
	ProblemMissingOwner = "missing_owner"
	// A row whose state is neither "active" nor "released".
	ProblemInvalidState = "invalid_state"
	// Two or more active rows with one owner token: one counter holds
	// several names (one counter serves one name); its processes refuse
	// every name but the one its session file records.
	ProblemSharedOwner = "shared_owner"
	// An active row not seen for longer than AuditConfig.Stale: its holder
	// may be gone without releasing the name.
	ProblemStale = "stale"
	// A row last seen (or registered) later than the audit's clock by more
	// than AuditConfig.ClockSkew: the holder's clock, or this host's, is
	// off. The clone check compares hosts' clocks, so they must agree.
	ProblemClockAhead = "clock_ahead"
	// This host's configured name has no row.
	ProblemNotRegistered = "not_registered"
	// This host's configured name is held, active, by another owner.
	ProblemHeldByOther = "held_by_other"
	// An inventory name listed more than once (exactly, or once normalised).
	ProblemInventoryDuplicate = "inventory_duplicate"
	// An inventory name already held (not released) by another owner, or
	// colliding once normalised with such a row.
	ProblemInventoryTaken = "inventory_taken"
	// An inventory entry that is not a valid node name.
	ProblemInventoryInvalid = "inventory_invalid"
	// Two or more rows with one node number: their numeric ids (decimal,
	// striped) would meet. The registry never does this; another tool or
	// a restored table can.
	ProblemNumberShared = "number_shared"
	// An active row without a node number while others have one: a name
	// claimed before the registry gave numbers, or whose host's
	// assignment failed or timed out (with Holder.NumberTaken: a number
	// was taken for it, and the assignment's outcome was unknown). It
	// gets one at its next start, which settles a number taken for it;
	// its host cannot use the numeric forms until then.
	ProblemNoNumber = "no_number"
	// A row whose node number is not below the cluster's stride
	// (AuditConfig.Stride): its host cannot use the striped form (Open
	// refuses it), and neither the number nor the stride can change.
	// Numbers are dense when names are numbered one at a time; names
	// numbered at once may leave gaps: size the stride above the names
	// the cluster will ever number, with room to spare.
	ProblemNumberAboveStride = "number_above_stride"
)

// problemOrder is the order of kinds in a Report.
var problemOrder = []string{
	ProblemInvalidName, ProblemNormalisedCollision, ProblemMissingOwner, ProblemInvalidState,
	ProblemSharedOwner, ProblemStale, ProblemClockAhead, ProblemNotRegistered, ProblemHeldByOther,
	ProblemInventoryInvalid, ProblemInventoryDuplicate, ProblemInventoryTaken, ProblemNumberShared, ProblemNoNumber,
	ProblemNumberAboveStride,
}

// DefaultStale is AuditConfig.Stale's default.
const DefaultStale = 24 * time.Hour

// DefaultClockSkew is AuditConfig.ClockSkew's default.
const DefaultClockSkew = time.Minute

// AuditConfig is what Audit checks the registry rows against.
type AuditConfig struct {
	Now   time.Time     // the time of the audit; zero means time.Now()
	Stale time.Duration // 0 means DefaultStale (24h); negative turns the check off
	// ClockSkew is how far in the future a row's times may be before they
	// are reported as ProblemClockAhead; 0 means DefaultClockSkew (1m),
	// negative turns the check off.
	ClockSkew time.Duration

	// ThisName and ThisOwner are this host's configured node name and its
	// counter's owner token (both optional). With ThisName and without
	// ThisOwner (a counter never registered), an active row of that name is
	// held by another owner.
	ThisName  string
	ThisOwner string

	// Planned is an inventory of names planned for new hosts (optional);
	// see ParseInventory.
	Planned []string

	// Stride is the cluster's stride of the striped form
	// (NumberRegistry.Stride; 0: none recorded, not checked).
	Stride uint64
}

// Report is the result of Audit. Problems is never nil, so that JSON shows
// an empty list for a clean registry.
type Report struct {
	Checked  time.Time `json:"checked"`
	Rows     int       `json:"rows"`
	Problems []Problem `json:"problems"`
}

// OK reports whether the audit found no problem.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Problem is one finding of Audit.
type Problem struct {
	Kind   string     `json:"kind"`            // one of the Problem* constants
	Name   string     `json:"name,omitempty"`  // the name concerned; for collisions, the normalised form
	Detail string     `json:"detail"`          // one readable sentence
	Names  []string   `json:"names,omitempty"` // every name involved (collisions, duplicates), sorted
	Rows   []AuditRow `json:"rows,omitempty"`  // the registry rows involved
}

// AuditRow is a registry row as an audit shows it. The owner token is not
// shown (whoever has it passes a claim as that host); OwnerID is a short
// fingerprint of it, enough to see whether two rows share an owner.
type AuditRow struct {
	Name         string    `json:"name"`
	OwnerID      string    `json:"owner_id,omitempty"`
	Hostname     string    `json:"hostname,omitempty"`
	Address      string    `json:"address,omitempty"`
	MachineID    string    `json:"machine_id,omitempty"`
	State        string    `json:"state,omitempty"`
	RegisteredAt time.Time `json:"registered_at,omitzero"`
	LastSeen     time.Time `json:"last_seen,omitzero"`
	// Reserved is a decimal string in JSON: values above 2^53 do not
	// survive JavaScript numbers.
	Reserved uint64 `json:"reserved,string"`
	// NodeNumber is the name's node number, 0 (left out) if none.
	NodeNumber uint64 `json:"node_number,omitempty,string"`
	// NodeNumberTaken is a number taken for a name without one, whose
	// assignment did not complete (Holder.NumberTaken), 0 (left out) if
	// none.
	NodeNumberTaken uint64 `json:"node_number_taken,omitempty,string"`
}

func auditRow(h registry.Holder) AuditRow {
	return AuditRow{
		Name: h.Name, OwnerID: registry.OwnerID(h.Owner), Hostname: h.Hostname, Address: h.Address,
		MachineID: h.MachineID, State: h.State, RegisteredAt: h.RegisteredAt, LastSeen: h.LastSeen,
		Reserved: h.Reserved, NodeNumber: h.Number, NodeNumberTaken: h.NumberTaken,
	}
}

// NormaliseName returns s normalised as Snap! normalises host names: cut at
// the first ".", every "-" replaced by "_", ASCII letters lower-cased.
// Unlike NameFromHostname it never refuses: the result may still be an
// invalid name. Two names with the same normalised form must not both be in
// use, since hosts configured with either spelling would issue the same ids.
func NormaliseName(s string) string {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	return nodename.Lower(strings.ReplaceAll(s, "-", "_"))
}

// Audit checks registry rows (from Registry.List) for anything that could
// make two hosts issue the same id, or that needs an operator: invalid
// names, names that collide once normalised, partial rows, stale holders,
// this host's name missing or held by another owner, and problems of an
// inventory of planned names. It is a pure function: it reads nothing but
// its arguments. Problems are ordered by kind (in the order of the Problem*
// constants' documentation) and then by name.
func Audit(rows []registry.Holder, cfg AuditConfig) Report {
	now, stale, skew := auditClock(cfg)
	rep := Report{Checked: now, Rows: len(rows), Problems: []Problem{}}
	add := func(p Problem) { rep.Problems = append(rep.Problems, p) }

	byName := map[string]registry.Holder{}
	byNorm := map[string][]registry.Holder{}
	for _, h := range rows {
		byName[h.Name] = h
		n := NormaliseName(h.Name)
		byNorm[n] = append(byNorm[n], h)
		auditOneRow(h, now, stale, add)
	}
	if skew > 0 {
		auditClockAhead(rows, now, skew, add)
	}
	auditSharedOwners(rows, add)
	auditNumbers(rows, cfg.Stride, add)
	auditCollisions(byNorm, add)

	if cfg.ThisName != "" {
		auditThisHost(cfg, byName, byNorm, add)
	}
	auditInventory(cfg, byNorm, add)

	sortProblems(rep.Problems)
	return rep
}

// auditClock returns the audit's time, stale limit and clock skew: cfg's,
// or their defaults where cfg leaves them zero.
func auditClock(cfg AuditConfig) (now time.Time, stale, skew time.Duration) {
	now = cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	stale = cfg.Stale
	if stale == 0 {
		stale = DefaultStale
	}
	skew = cfg.ClockSkew
	if skew == 0 {
		skew = DefaultClockSkew
	}
	return now, stale, skew
}

// auditOneRow reports the problems of row h on its own: an invalid name, a
// partial row or an invalid state, and (if stale is positive) an active
// holder not seen for longer than stale.
func auditOneRow(h registry.Holder, now time.Time, stale time.Duration, add func(Problem)) {
	if why := nodename.Problem(h.Name); why != "" {
		add(Problem{Kind: ProblemInvalidName, Name: h.Name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("row %q: %s; %s", h.Name, why, nodename.Rule)})
	}
	auditRowState(h, add)
	if stale > 0 && h.State == registry.StateActive && h.Owner != "" {
		auditStale(h, now, stale, add)
	}
}

// auditRowState reports row h if it has no owner or no state (a partial
// row), or else if its state is neither active nor released.
func auditRowState(h registry.Holder, add func(Problem)) {
	var missing []string
	if h.Owner == "" {
		missing = append(missing, "owner")
	}
	if h.State == "" {
		missing = append(missing, "state")
	}
	switch {
	case len(missing) > 0:
		add(Problem{Kind: ProblemMissingOwner, Name: h.Name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("row %q has no %s: a partial row (left by a write that raced a delete, or by another tool); "+
				"claims of this name are refused until it is fixed", h.Name, strings.Join(missing, " and no "))})
	case h.State != registry.StateActive && h.State != registry.StateReleased:
		add(Problem{Kind: ProblemInvalidState, Name: h.Name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("row %q has state %q, want %q or %q", h.Name, h.State, registry.StateActive, registry.StateReleased)})
	}
}

// auditStale reports the active row h if it was never seen, or last seen
// longer than stale before now.
func auditStale(h registry.Holder, now time.Time, stale time.Duration, add func(Problem)) {
	switch {
	case h.LastSeen.IsZero():
		add(Problem{Kind: ProblemStale, Name: h.Name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("%q is active but was never seen (%s)", h.Name, h)})
	case now.Sub(h.LastSeen) > stale:
		add(Problem{Kind: ProblemStale, Name: h.Name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("%q was last seen %s ago, more than %s (%s); if its host is gone, release the name",
				h.Name, now.Sub(h.LastSeen).Round(time.Second), stale, h)})
	}
}

// auditClockAhead reports the rows last seen or registered more than skew
// after now.
func auditClockAhead(rows []registry.Holder, now time.Time, skew time.Duration, add func(Problem)) {
	for _, h := range rows {
		if ahead := max(h.LastSeen.Sub(now), h.RegisteredAt.Sub(now)); ahead > skew {
			add(Problem{Kind: ProblemClockAhead, Name: h.Name, Rows: []AuditRow{auditRow(h)},
				Detail: fmt.Sprintf("%q has times %s ahead of this host's clock (%s): its clock or this one is off; "+
					"the clone check compares hosts' clocks, keep them in sync (NTP)", h.Name, ahead.Round(time.Second), h)})
		}
	}
}

// auditSharedOwners reports each owner token that holds two or more active
// rows.
func auditSharedOwners(rows []registry.Holder, add func(Problem)) {
	byOwner := map[string][]registry.Holder{}
	for _, h := range rows {
		if h.State == registry.StateActive && h.Owner != "" {
			byOwner[h.Owner] = append(byOwner[h.Owner], h)
		}
	}
	for owner, hs := range byOwner {
		if len(hs) < 2 {
			continue
		}
		slices.SortFunc(hs, func(a, b registry.Holder) int { return strings.Compare(a.Name, b.Name) })
		p := Problem{Kind: ProblemSharedOwner, Name: hs[0].Name}
		for _, h := range hs {
			p.Names = append(p.Names, h.Name)
			p.Rows = append(p.Rows, auditRow(h))
		}
		p.Detail = fmt.Sprintf("rows %s are active with one owner token (%s): one counter holds them all, and its processes refuse every name "+
			"but the one its session file records; release the names that counter does not use", quoteList(p.Names), registry.OwnerID(owner))
		add(p)
	}
}

// auditCollisions reports each normalised form (a key of byNorm) that two
// or more rows' names share.
func auditCollisions(byNorm map[string][]registry.Holder, add func(Problem)) {
	for norm, hs := range byNorm {
		if len(hs) < 2 {
			continue
		}
		p := Problem{Kind: ProblemNormalisedCollision, Name: norm}
		slices.SortFunc(hs, func(a, b registry.Holder) int { return strings.Compare(a.Name, b.Name) })
		for _, h := range hs {
			p.Names = append(p.Names, h.Name)
			p.Rows = append(p.Rows, auditRow(h))
		}
		p.Detail = fmt.Sprintf("rows %s all normalise to %q: hosts configured with these spellings would issue the same ids",
			quoteList(p.Names), norm)
		add(p)
	}
}

// sortProblems orders problems as a Report has them: by kind, in
// problemOrder, then by name; problems equal in both keep their order.
func sortProblems(problems []Problem) {
	rank := func(kind string) int { return slices.Index(problemOrder, kind) }
	slices.SortStableFunc(problems, func(a, b Problem) int {
		if d := rank(a.Kind) - rank(b.Kind); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// held reports whether h blocks a claim by owner (empty: anyone else): it
// is not released, and not held by owner.
func held(h registry.Holder, owner string) bool {
	return h.State != registry.StateReleased && (owner == "" || h.Owner != owner)
}

func auditThisHost(cfg AuditConfig, byName map[string]registry.Holder, byNorm map[string][]registry.Holder, add func(Problem)) {
	name := cfg.ThisName
	if why := nodename.Problem(name); why != "" {
		add(Problem{Kind: ProblemInvalidName, Name: name,
			Detail: fmt.Sprintf("this host's configured name %q: %s; %s", name, why, nodename.Rule)})
		return
	}
	h, ok := byName[name]
	if !ok {
		p := Problem{Kind: ProblemNotRegistered, Name: name,
			Detail: fmt.Sprintf("this host's name %q has no row in the registry; `snapctl register` claims it", name)}
		for _, other := range byNorm[NormaliseName(name)] {
			p.Rows = append(p.Rows, auditRow(other))
			p.Detail += fmt.Sprintf("; row %q collides with it once normalised", other.Name)
		}
		add(p)
		return
	}
	switch {
	case h.State != registry.StateActive:
	case cfg.ThisOwner == "" && h.Owner == "":
		// A partial row: reported as ProblemMissingOwner.
	case cfg.ThisOwner == "":
		// This host's counter has no owner token: whoever holds the row, it
		// is not this host.
		add(Problem{Kind: ProblemHeldByOther, Name: name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("this host's name %q is %s, and this host's counter has no owner token (never registered here): this host must not issue ids under it", name, h)})
	case h.Owner != cfg.ThisOwner:
		add(Problem{Kind: ProblemHeldByOther, Name: name, Rows: []AuditRow{auditRow(h)},
			Detail: fmt.Sprintf("this host's name %q is %s, not by this host's counter: this host must not issue ids under it", name, h)})
	}
}

func auditInventory(cfg AuditConfig, byNorm map[string][]registry.Holder, add func(Problem)) {
	planned := map[string][]string{} // normalised form -> entries
	var order []string
	for _, name := range cfg.Planned {
		if why := nodename.Problem(name); why != "" {
			add(Problem{Kind: ProblemInventoryInvalid, Name: name,
				Detail: fmt.Sprintf("planned name %q: %s; %s", name, why, nodename.Rule)})
		}
		n := NormaliseName(name)
		if _, seen := planned[n]; !seen {
			order = append(order, n)
		}
		planned[n] = append(planned[n], name)
	}
	for _, n := range order {
		entries := planned[n]
		if len(entries) > 1 {
			names := slices.Clone(entries)
			slices.Sort(names)
			how := "listed more than once"
			if distinct := slices.Compact(slices.Clone(names)); len(distinct) > 1 {
				how = "the same name once normalised"
			}
			add(Problem{Kind: ProblemInventoryDuplicate, Name: n, Names: names,
				Detail: fmt.Sprintf("planned names %s are %s (%q)", quoteList(names), how, n)})
		}
		if nodename.Problem(n) != "" {
			continue // invalid even normalised: reported as invalid, cannot be claimed
		}
		var rows []AuditRow
		var why []string
		for _, h := range byNorm[n] {
			if !held(h, cfg.ThisOwner) {
				continue
			}
			rows = append(rows, auditRow(h))
			if h.Name == n {
				why = append(why, fmt.Sprintf("%q is %s", h.Name, h))
			} else {
				why = append(why, fmt.Sprintf("row %q, the same once normalised, is %s", h.Name, h))
			}
		}
		if len(rows) > 0 {
			add(Problem{Kind: ProblemInventoryTaken, Name: n, Rows: rows,
				Detail: "planned name already in use: " + strings.Join(why, "; ")})
		}
	}
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// ParseInventory reads an inventory of planned node names: one name per
// line; "#" starts a comment (a node name never contains "#"); surrounding
// blanks and blank lines are ignored. Names are returned as written, in
// order, duplicates and invalid names included: Audit reports those. An
// error is returned only for a read failure or a line longer than 64 KiB.
func ParseInventory(r io.Reader) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("snapid: inventory, after line %d: %w", line, err)
	}
	return names, nil
}

// auditNumbers reports node numbers shared by rows, rows whose number is
// not below the stride (if one is recorded), and active rows without one
// when others have one.
func auditNumbers(rows []registry.Holder, stride uint64, add func(Problem)) {
	byNumber := map[uint64][]registry.Holder{}
	numbered := false
	for _, h := range rows {
		if h.Number != 0 {
			byNumber[h.Number] = append(byNumber[h.Number], h)
			numbered = true
		}
	}
	numbers := make([]uint64, 0, len(byNumber))
	for n := range byNumber {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	for _, n := range numbers {
		hs := byNumber[n]
		if len(hs) < 2 {
			continue
		}
		slices.SortFunc(hs, func(a, b registry.Holder) int { return strings.Compare(a.Name, b.Name) })
		p := Problem{Kind: ProblemNumberShared, Name: hs[0].Name}
		for _, h := range hs {
			p.Names = append(p.Names, h.Name)
			p.Rows = append(p.Rows, auditRow(h))
		}
		p.Detail = fmt.Sprintf("rows %s have node number %d: their decimal and striped ids would meet; "+
			"give all but one of them new numbers before any of them uses a numeric form", quoteList(p.Names), n)
		add(p)
	}
	for _, h := range rows {
		if stride != 0 && h.Number >= stride {
			add(Problem{Kind: ProblemNumberAboveStride, Name: h.Name, Rows: []AuditRow{auditRow(h)},
				Detail: fmt.Sprintf("%q has node number %d, not below the cluster's stride %d: its host cannot use the striped form (the name and decimal forms work); "+
					"give that host a new name whose number will be below the stride, or keep it off the striped form", h.Name, h.Number, stride)})
		}
	}
	if !numbered {
		return
	}
	for _, h := range rows {
		if h.Number == 0 && h.State == registry.StateActive && nodename.Problem(h.Name) == "" {
			add(Problem{Kind: ProblemNoNumber, Name: h.Name, Rows: []AuditRow{auditRow(h)}, Detail: noNumberDetail(h)})
		}
	}
}

// noNumberDetail says why the active row h has no node number, as far as
// the registry can tell.
func noNumberDetail(h registry.Holder) string {
	if h.NumberTaken == 0 {
		return fmt.Sprintf("%q has no node number: it was claimed before the registry gave numbers, or its host's assignment of one failed "+
			"before a number was taken (its log says why); it gets one at its next start", h.Name)
	}
	at := ""
	if !h.NumberTakenAt.IsZero() {
		at = " at " + h.NumberTakenAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%q has no node number yet: number %d was taken for it%s, but its assignment did not complete "+
		"(its outcome was unknown: an answer lost or timed out); its host's next start settles it (the name gets one number; "+
		"one taken but not given stays a gap, never another name's)", h.Name, h.NumberTaken, at)
}
