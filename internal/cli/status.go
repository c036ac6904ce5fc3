package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"golang.org/x/sys/unix"
)

// statusReport is snapctl status's JSON.
type statusReport struct {
	Name    string `json:"name"`
	Counter struct {
		Path       string `json:"path"`
		Exists     bool   `json:"exists"`
		LastIssued string `json:"last_issued,omitempty"`
		Mode       string `json:"mode,omitempty"`
		SizeOK     bool   `json:"size_ok"`
	} `json:"counter"`
	Files     *admin.HostFiles `json:"files,omitempty"`
	Processes *int             `json:"processes,omitempty"` // with a registry, processes using the counter now
	Registry  *statusRow       `json:"registry,omitempty"`
	Sequences []statusSequence `json:"sequences,omitempty"` // the host's lease files
	Attention []string         `json:"attention"`
	// Notes are normal states worth saying (a name this host released):
	// they need nothing done, and leave the exit status 0.
	Notes []string `json:"notes"`
}

// note adds a note to st.
func (st *statusReport) note(format string, a ...any) {
	st.Notes = append(st.Notes, fmt.Sprintf(format, a...))
}

// statusSequence is the host's lease of one sequence, from its lease file.
type statusSequence struct {
	Sequence     string `json:"sequence"`
	CurrentFirst uint64 `json:"current_first,string"`
	CurrentLast  uint64 `json:"current_last,string"`
	Next         uint64 `json:"next,string"`
	AheadFirst   uint64 `json:"ahead_first,string"`
	AheadLast    uint64 `json:"ahead_last,string"`
	LeftNumbers  uint64 `json:"left_numbers,string"`
	// CurrentClaim: the lease was taken under the session this host's
	// files record (else the next start drops it unless the last process
	// closed cleanly).
	CurrentClaim bool `json:"current_claim"`
}

type statusRow struct {
	// Found: the name's row was read; with Unreadable, it could not be
	// (whether there is one is unknown), and Unreadable says why.
	Found        bool      `json:"found"`
	Unreadable   string    `json:"unreadable,omitempty"`
	Hostname     string    `json:"hostname,omitempty"`
	OwnerID      string    `json:"owner_id,omitempty"`
	State        string    `json:"state,omitempty"`
	LastSeen     time.Time `json:"last_seen,omitzero"`
	ReservedUpTo string    `json:"reserved_up_to,omitempty"`
	NodeNumber   uint64    `json:"node_number,omitempty,string"`
	// NodeNumberTaken: the name has no node number yet, but one was
	// taken for it (at NodeNumberTakenAt, if known) by an assignment
	// whose outcome was unknown; the next start settles it.
	NodeNumberTaken   uint64    `json:"node_number_taken,omitempty,string"`
	NodeNumberTakenAt time.Time `json:"node_number_taken_at,omitzero"`
	// NodeNumberUnreadable: the name's node number could not be read.
	NodeNumberUnreadable string `json:"node_number_unreadable,omitempty"`
	Stride               uint64 `json:"stride,omitempty,string"` // the cluster's stride of striped ids, if recorded
	ThisHost             bool   `json:"this_host"`               // held by this counter's owner token
	Session              bool   `json:"this_host_session"`       // and under the session recorded on this host
}

// cmdStatus looks at this host once: the counter, the files beside it, the
// processes using it and, with a registry, the name's row. Exit 0 healthy
// (a name this host released is a normal state: a note), 1 needs
// attention (each item says what and why), 2 could not look.
func cmdStatus(ctx context.Context, c *cli, args []string) error {
	c.newFlags("status")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	asJSON := c.fs.Bool("json", false, jsonHelp)
	if err := c.parse(args); err != nil {
		return err
	}
	name, path, err := c.auditTarget()
	if err != nil {
		return err
	}
	var st statusReport
	st.Name, st.Counter.Path = name, path
	attention := func(format string, a ...any) { st.Attention = append(st.Attention, fmt.Sprintf(format, a...)) }

	if err := statusCounter(ctx, &st, rf.timeout, attention); err != nil {
		return err
	}
	hf, err := statusHostFiles(c, &st, attention)
	if err != nil {
		return err
	}
	if err := statusSequences(path, hf.SessionID, &st, attention); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, err := c.connect(ctx, &rf, true)
	var ue usageError
	switch {
	case errors.As(err, &ue), errors.Is(err, registry.ErrInvalidOption):
		return err // the registry's settings (a malformed host list, say): nothing to look at
	case err != nil:
		attention("the registry could not be read: %s", oneLine(describe("status", err)))
	case reg == nil:
		if err := c.refuseWithoutRegistry(noRegistryConfigured); err != nil {
			return err
		}
		if hf.OwnerID != "" {
			attention("the counter is registered (owner %s) but no registry is configured: give --cassandra or SNAPID_CASSANDRA to check its row", hf.OwnerID)
		}
	default:
		defer reg.Close()
		statusRegistry(ctx, c, reg, &st, hf, attention)
	}
	return printStatusReport(c, &st, *asJSON)
}

// statusCounter reads the counter file into st.Counter; a missing or
// damaged one needs attention.
func statusCounter(ctx context.Context, st *statusReport, timeout time.Duration, attention func(string, ...any)) error {
	path := st.Counter.Path
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		attention("no counter file at %s: run 'snapctl init' (or the first 'snapctl next' creates it)", path)
		return nil
	case err != nil:
		return err
	}
	st.Counter.Exists, st.Counter.Mode = true, info.Mode().Perm().String()
	rctx, rcancel := context.WithTimeout(ctx, timeout)
	last, err := admin.ReadCounterContext(rctx, path) // another process may hold its lock
	rcancel()
	switch {
	case errors.Is(err, engine.ErrCorrupt):
		attention("the counter is damaged (%s): %s", oneLine(err.Error()), describeHint("status", err))
	case err != nil:
		return err
	default:
		st.Counter.SizeOK, st.Counter.LastIssued = true, strconv.FormatUint(last, 10)
	}
	return nil
}

// statusHostFiles reads the files beside the counter and the processes
// using it into st; a damaged file, another name released with this
// counter or processes under another name need attention; the name this
// host released is noted (a normal state, after a planned release).
func statusHostFiles(c *cli, st *statusReport, attention func(string, ...any)) (admin.HostFiles, error) {
	name, path := st.Name, st.Counter.Path
	hf, err := admin.ReadHostFiles(path, c.options()...)
	if err != nil {
		if !errors.Is(err, engine.ErrCorrupt) {
			return hf, err
		}
		attention("%s: %s", oneLine(strings.TrimPrefix(err.Error(), "snapid: ")), describeHint("status", err))
	}
	switch {
	case hf.Released != "" && hf.Released == name:
		st.note("this host released %q: its programs refuse the name until 'snapctl register' claims it again", name)
	case hf.Released != "":
		// As next does: a counter whose host released a name refuses
		// every claim until one is made on purpose.
		attention("this host released %q with this counter: its programs refuse %q too until 'snapctl register' claims a name on purpose", hf.Released, name)
	}
	if hf.OwnerID != "" || hf.MarkFile {
		st.Files = &hf
		n, err := presenceHolders(path + ".presence")
		if err == nil {
			st.Processes = &n
		}
		if hf.SessionName != "" && hf.SessionName != name && n > 0 {
			attention("the processes of this host use the counter under the name %q, not %q", hf.SessionName, name)
		}
	}
	return hf, nil
}

// rowReader is what status reads from the registry.
type rowReader interface {
	Get(ctx context.Context, name string) (registry.Holder, error)
	Stride(ctx context.Context) (uint64, error)
	NodeNumber(ctx context.Context, name string) (cassandra.NumberState, error)
}

// statusRegistry reads the name's row and the cluster's stride into st,
// and judges them against this host's files. A row that could not be read
// is not taken for a missing one: it is unknown.
func statusRegistry(ctx context.Context, c *cli, reg rowReader, st *statusReport, hf admin.HostFiles, attention func(string, ...any)) {
	name := st.Name
	st.Registry = &statusRow{}
	h, err := reg.Get(ctx, name)
	switch {
	case errors.Is(err, registry.ErrNotRegistered) && hf.OwnerID != "":
		attention("%q has no row in the registry though this counter has an owner token: 'snapctl register' claims it", name)
	case errors.Is(err, registry.ErrNotRegistered):
		// As check-names says (not_registered): with a registry
		// configured, a name without a row is not in use safely.
		attention("%q has no row in the registry (check-names: not_registered): 'snapctl register' claims it", name)
	case err != nil:
		st.Registry.Unreadable = oneLine(strings.TrimPrefix(err.Error(), "snapid: "))
		attention("the registry row of %q could not be read, so whether this host holds it is unknown: %s", name, oneLine(describe("status", err)))
	}
	if err == nil || errors.Is(err, registry.ErrNotRegistered) {
		secondName(ctx, reg, name, hf, st.Processes, attention)
	}
	if s, serr := reg.Stride(ctx); serr != nil {
		attention("the cluster's stride could not be read: %s", oneLine(describe("status", serr)))
	} else {
		st.Registry.Stride = s
		if s != 0 && err == nil && h.Number >= s {
			attention("%q has node number %d, not below the cluster's stride %d: this host cannot use the striped form", name, h.Number, s)
		}
	}
	if err == nil {
		statusHolder(c, st, h, hf, attention)
		if h.Number == 0 {
			statusNumber(ctx, reg, st, attention)
		}
	}
}

// statusNumber reads, for a name whose row shows no node number, what the
// registry holds about its number: one settled now (a give whose answer
// was lost), one taken for it by an assignment whose outcome was unknown
// (which needs attention, as check-names' no_number), or none; or that it
// could not be read (attention too).
func statusNumber(ctx context.Context, reg rowReader, st *statusReport, attention func(string, ...any)) {
	r := st.Registry
	ns, err := reg.NodeNumber(ctx, st.Name)
	if err != nil {
		r.NodeNumberUnreadable = oneLine(strings.TrimPrefix(err.Error(), "snapid: "))
		attention("the node number of %q could not be read: %s", st.Name, oneLine(describe("status", err)))
		return
	}
	r.NodeNumber, r.NodeNumberTaken, r.NodeNumberTakenAt = ns.Number, ns.Taken, ns.TakenAt
	if ns.Taken != 0 {
		attention("the node number of %q is not settled (check-names: no_number): %s; until then the numeric id forms cannot be used",
			st.Name, takenNumber(ns.Taken, ns.TakenAt))
	}
}

// statusHolder judges the name's row h against this host's files and
// processes.
func statusHolder(c *cli, st *statusReport, h registry.Holder, hf admin.HostFiles, attention func(string, ...any)) {
	name, path := st.Name, st.Counter.Path
	r := st.Registry
	fillStatusRow(r, h, hf)
	if _, n, _, ok, err := admin.ReadNodeNumber(path, c.options()...); err == nil && ok && h.Number != 0 && n != h.Number && r.ThisHost {
		attention("this host recorded node number %d for %q, and the registry holds %d: the next start refuses to issue (ErrNumberMismatch)", n, name, h.Number)
	}
	running := st.Processes != nil && *st.Processes > 0
	statusHeldBy(st, h, hf, running, attention)
	if c, err := strconv.ParseUint(st.Counter.LastIssued, 10, 64); err == nil && r.ThisHost && h.State == registry.StateActive && c > h.Reserved {
		attention("the counter (%d) is above the registry's mark (%d): ids were issued without the registry", c, h.Reserved)
	}
}

// fillStatusRow records the row h in r, and whether this host's files (hf)
// hold it by owner token and by session.
func fillStatusRow(r *statusRow, h registry.Holder, hf admin.HostFiles) {
	r.Found, r.Hostname, r.OwnerID, r.State, r.LastSeen = true, h.Hostname, registry.OwnerID(h.Owner), h.State, h.LastSeen
	r.ReservedUpTo = strconv.FormatUint(h.Reserved, 10)
	r.NodeNumber = h.Number
	r.ThisHost, r.Session = hf.OwnedBy(h), hf.HoldsSession(h)
}

// statusHeldBy needs attention when the active row h of st's name
// (recorded in st.Registry) is held by another owner, or when it is this
// host's but a later claim superseded the session of its running
// processes, or this host released the name and the registry still holds
// it for this counter (the release did not finish). A name this host
// released and another host now holds is noted: a hand-over done.
func statusHeldBy(st *statusReport, h registry.Holder, hf admin.HostFiles, running bool, attention func(string, ...any)) {
	name, r := st.Name, st.Registry
	released := hf.Released != "" && hf.Released == name
	switch {
	case released && h.State == registry.StateActive && r.ThisHost:
		attention("this host released %q, but the registry still holds it for this counter: the release did not finish; "+
			"run 'snapctl release' again (or 'snapctl register' to keep the name here)", name)
	case released && h.State == registry.StateActive:
		st.note("%q is held by host %s now (owner %s), after this host released it", name, h.Hostname, r.OwnerID)
	case h.State == registry.StateActive && !r.ThisHost && hf.OwnerID != "":
		attention("%q is held by another owner (%s, host %s): this host must not issue under it", name, r.OwnerID, h.Hostname)
	case h.State == registry.StateActive && !r.ThisHost:
		attention("%q is held by host %s (owner %s), and this host's counter has no owner token: this host must not issue under it", name, h.Hostname, r.OwnerID)
	case r.ThisHost && h.State == registry.StateActive && running && !r.Session:
		attention("a later claim superseded the session of this host's running processes (a copy of this counter directory?): they issue nothing more beyond their mark")
	}
}

// statusSequences adds the host's lease files (<counter>.seq.<sequence>)
// to st; a damaged one needs attention. session is the fingerprint of the
// session this host's files record.
func statusSequences(path, session string, st *statusReport, attention func(string, ...any)) error {
	files, err := filepath.Glob(globEscape(path) + ".seq.*")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		seq := strings.TrimPrefix(f, path+".seq.")
		if strings.HasSuffix(seq, ".refill") || strings.HasSuffix(seq, ".floor") || engine.ValidateName(seq) != nil {
			continue
		}
		cur, ahead, pos, ok, err := admin.ReadLeaseFile(path, seq)
		switch {
		case errors.Is(err, engine.ErrCorrupt):
			attention("the lease file of sequence %q is damaged (%s): %s", seq, oneLine(strings.TrimPrefix(err.Error(), "snapid: ")), describeHint("status", err))
			continue
		case err != nil:
			return err
		case !ok:
			continue
		}
		s := statusSequence{Sequence: seq, CurrentFirst: cur.First, CurrentLast: cur.Last, Next: pos,
			AheadFirst: ahead.First, AheadLast: ahead.Last, CurrentClaim: session != "" && cur.Session != "" && registry.OwnerID(cur.Session) == session}
		if cur.First != 0 && pos <= cur.Last {
			s.LeftNumbers = cur.Last - pos + 1
		}
		if ahead.First != 0 {
			s.LeftNumbers += ahead.Last - ahead.First + 1
		}
		st.Sequences = append(st.Sequences, s)
	}
	return nil
}

// globEscape escapes the pattern characters of a path for filepath.Glob.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// describeHint returns only the hint describe would add to err.
func describeHint(cmd string, err error) string {
	full := describe(cmd, err)
	msg := strings.TrimPrefix(err.Error(), "snapid: ")
	return strings.TrimPrefix(strings.TrimPrefix(full, msg), "; ")
}

// presenceHolders counts the flocks held on the presence file (every
// process using the counter with the registry holds one), from
// /proc/locks.
func presenceHolders(path string) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return countFlocks(bufio.NewScanner(f), fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino))
}

// countFlocks counts the granted FLOCK lines of /proc/locks on the file
// id ("major:minor:inode", the device in hex as /proc/locks writes it:
// "1: FLOCK ADVISORY READ 1234 08:01:5678 0 EOF"; waiters have "->").
// The device counts: an inode number alone repeats across file systems.
func countFlocks(sc *bufio.Scanner, id string) (int, error) {
	n := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "FLOCK" {
			continue
		}
		if sameLockID(f[5], id) {
			n++
		}
	}
	return n, sc.Err()
}

// sameLockID compares two "major:minor:inode" ids, the device's numbers
// in hex (with or without leading zeros).
func sameLockID(a, b string) bool {
	pa, pb := strings.Split(a, ":"), strings.Split(b, ":")
	if len(pa) != 3 || len(pb) != 3 {
		return false
	}
	for i := range 3 {
		base := 16
		if i == 2 {
			base = 10
		}
		va, ea := strconv.ParseUint(pa[i], base, 64)
		vb, eb := strconv.ParseUint(pb[i], base, 64)
		if ea != nil || eb != nil || va != vb {
			return false
		}
	}
	return true
}

// secondName adds, as next and register refuse it, a name other than the
// one this counter holds: the session file records another name that the
// counter's owner holds, active, in the registry (one counter, one name).
// Processes running under it are reported already.
func secondName(ctx context.Context, reg rowReader, name string, hf admin.HostFiles, procs *int, attention func(string, ...any)) {
	if hf.SessionName == "" || hf.SessionName == name || hf.SessionName == hf.Released || (procs != nil && *procs > 0) {
		return
	}
	h, err := reg.Get(ctx, hf.SessionName)
	if err != nil || h.State != registry.StateActive || !hf.OwnedBy(h) {
		return
	}
	attention("this counter holds %q in the registry (its session file records it): one counter serves one name, so %q is refused; "+
		"release %q first, or give %q its own counter", hf.SessionName, name, hf.SessionName, name)
}
