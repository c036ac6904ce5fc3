package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// seqSubcommand is a subcommand of "snapctl seq".
type seqSubcommand struct {
	name, usage, summary string
	run                  func(ctx context.Context, c *cli, seq string, args []string) error
}

// seqSubcommands are the subcommands of "snapctl seq".
var seqSubcommands []seqSubcommand

func init() {
	seqSubcommands = []seqSubcommand{
		{"create", "NAME [--start N] [--max N]", "create the sequence NAME (numbers start..max), or raise its max or its next number", seqCreate},
		{"next", "NAME [-n N]", "print N new numbers of NAME (default 1), one per line, issued under this host's node name", seqNext},
		{"show", "NAME [--json]", "show GLOBAL, each data centre's ranges, the hosts' leases and this host's lease file", seqShow},
	}
}

// cmdSeq runs "snapctl seq <create|next|show> NAME [flags]".
func cmdSeq(ctx context.Context, c *cli, args []string) error {
	// The subcommand and NAME may stand anywhere among the flags.
	words, flags := positionals(args, 2)
	if len(words) == 0 {
		printSeqUsage(c.stdout)
		if helpAsked(flags) {
			return flag.ErrHelp
		}
		return usageError{"seq needs a subcommand: create, next or show"}
	}
	for _, sc := range seqSubcommands {
		if sc.name != words[0] {
			continue
		}
		if helpAsked(flags) {
			// The subcommand's own help: its summary, then its usage
			// and flags.
			fmt.Fprintf(c.stdout, "%s\n\n", sc.summary)
			return sc.run(ctx, c, "", []string{"-h"})
		}
		if len(words) < 2 {
			return usageError{fmt.Sprintf("seq %s needs the sequence's NAME: snapctl seq %s %s", sc.name, sc.name, sc.usage)}
		}
		name := words[1]
		if err := engine.ValidateName(name); err != nil {
			return hintError{fmt.Errorf("sequence name: %w", err),
				"a sequence's NAME follows the node-name rule, like 'articles': 'snapctl seq " + sc.name + " " + sc.usage + "'"}
		}
		return sc.run(ctx, c, name, flags)
	}
	return usageError{fmt.Sprintf("unknown seq subcommand %q (want create, next or show)", words[0])}
}

func printSeqUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: snapctl seq <subcommand> NAME [flags]")
	fmt.Fprintln(w)
	for _, sc := range seqSubcommands {
		fmt.Fprintf(w, "  seq %-6s %-28s %s\n", sc.name, sc.usage, sc.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Sequences hand out plain integers, unique across the cluster, from ranges held in the registry")
	fmt.Fprintln(w, "(GLOBAL → data centre → host → process). NAME follows the node-name rule. --max defaults to")
	fmt.Fprintln(w, "2^63-1; use 2147483647 for a signed 32-bit column, 9007199254740991 for JavaScript numbers.")
	fmt.Fprintln(w, "Every subcommand needs a registry (--cassandra or SNAPID_CASSANDRA); next also takes --name,")
	fmt.Fprintln(w, "--counter and --sync as 'snapctl next' does, create and show --counter (this host's lease).")
	fmt.Fprintln(w, "Gaps are normal (unused leases); repeats never happen.")
	fmt.Fprintln(w, "Re-creating a sequence keeps its max unless --max is given (never below numbers already handed")
	fmt.Fprintln(w, "to data centres), and raises its start only while no number was handed out: once numbers were,")
	fmt.Fprintln(w, "a higher --start is refused (their ranges and leases would stay in use); create a new sequence.")
	fmt.Fprintln(w, "'snapctl help seq SUBCOMMAND' shows a subcommand's flags.")
	var subs []string
	for _, sc := range seqSubcommands {
		subs = append(subs, "seq "+sc.name)
	}
	printExamples(w, subs...)
}

// seqCreate creates or updates a sequence.
func seqCreate(ctx context.Context, c *cli, seq string, args []string) error {
	fs := c.newFlags("seq create")
	start := decimalFlag(fs, "start", 1, "the first number (numbers that already exist stay below it); an existing sequence's start is raised "+
		"only while it has handed out no number, and a higher --start is refused once it has (create a new sequence instead)")
	maxN := decimalFlag(fs, "max", registry.MaxSequence, "the last number (2147483647 for a signed 32-bit column); an existing sequence keeps its max "+
		"unless --max is given, and a max below numbers already handed to data centres is refused")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	if err := c.parse(args); err != nil {
		return err
	}
	maxGiven := false
	fs.Visit(func(f *flag.Flag) { maxGiven = maxGiven || f.Name == "max" })
	// Everything is checked before connecting.
	if err := registry.CheckSequenceBounds(seq, *start, *maxN); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, err := c.needRegistry(ctx, &rf, "seq create")
	if err != nil {
		return err
	}
	defer reg.Close()
	var info registry.SequenceInfo
	if maxGiven {
		info, err = admin.CreateSequence(ctx, reg, seq, *start, *maxN)
	} else {
		// An existing sequence keeps its max (a 32-bit cap stays, even
		// one set while this runs).
		info, err = admin.CreateSequenceKeepMax(ctx, reg, seq, *start)
	}
	if errors.Is(err, registry.ErrSequenceExists) {
		// Another create made it while this one ran, with other bounds.
		return hintError{err, fmt.Sprintf("'snapctl seq show %s' shows it; to give it your bounds anyway, run 'snapctl seq create %s' again: "+
			"on a sequence that exists, --max changes its max (never below numbers handed out) and --start is raised only before any was", seq, seq)}
	}
	if err != nil {
		return err
	}
	c.printSeqCreated(ctx, reg, seq, info)
	return nil
}

// printSeqCreated prints where the sequence seq, created as info,
// stands: its bounds, the registry's global position, each data centre's
// next number and this host's next number.
func (c *cli) printSeqCreated(ctx context.Context, reg *cassandra.Registry, seq string, info registry.SequenceInfo) {
	// Two figures that differ once numbers were handed out: the
	// registry's global position (numbers below it went to data centres,
	// some still unissued in leases) and the next number this host hands
	// out from its own lease.
	fmt.Fprintf(c.stdout, "sequence %s: start %d, max %d\n", info.Name, info.Start, info.Max)
	if info.Next > info.Max {
		fmt.Fprintf(c.stdout, "registry (GLOBAL): every number up to max was handed to data centres\n")
	} else {
		fmt.Fprintf(c.stdout, "registry (GLOBAL): the next range handed to a data centre starts at %d (not a number a host hands out next)\n", info.Next)
	}
	if st, err := reg.SequenceStatus(ctx, seq); err == nil {
		for _, r := range st.Ranges {
			if r.Next <= r.Last {
				fmt.Fprintf(c.stdout, "data centre %s: next number leased to a host %d (its range %d-%d)\n", r.DC, r.Next, r.First, r.Last)
			}
		}
	}
	if path, err := c.resolveCounter(); err == nil {
		if cur, _, pos, ok, err := admin.ReadLeaseFile(path, seq); err == nil && ok && cur.First != 0 && pos <= cur.Last {
			fmt.Fprintf(c.stdout, "this host (%s): next number it hands out %d (its lease %d-%d)\n", cur.Name, pos, cur.First, cur.Last)
		}
	}
}

// seqNext prints N new numbers, taken with one update of the host's lease
// file (leasing exactly N from the data centre when the file has fewer).
func seqNext(ctx context.Context, c *cli, seq string, args []string) error {
	fs := c.newFlags("seq next")
	n := decimalFlag(fs, "n", 1, "how many numbers to print")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	if err := c.parse(args); err != nil {
		return err
	}
	if *n == 0 || *n > 1_000_000 {
		return usageError{"-n must be from 1 to 1000000"}
	}
	name, path, err := c.target()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, err := c.needRegistry(ctx, &rf, "seq next")
	if err != nil {
		return err
	}
	defer reg.Close()
	// A sequence that does not exist is refused before the name is
	// claimed or any file created. The data centre's own partition
	// answers (GLOBAL is read only when it has no row of the sequence),
	// so a data centre cut off from the others still issues.
	if _, err := reg.HostLease(ctx, seq, name); err != nil {
		return err
	}
	if err := c.prepareDefaultDir(); err != nil {
		return err
	}
	g, err := engine.OpenContext(ctx, path, name, append(c.options(), engine.WithRegistry(reg))...)
	if err != nil {
		return err
	}
	defer func() {
		if err := g.Close(); err != nil {
			fmt.Fprintf(c.stderr, "snapctl: warning: %s\n", oneLine(err.Error()))
		}
	}()
	// A lease of exactly N: this process takes all of it, so nothing is
	// left unused when the next start of the host claims anew.
	s, err := g.SequenceContext(ctx, seq, engine.SequenceLeaseSize(*n))
	if err != nil {
		return err
	}
	first, err := s.NextNContext(ctx, *n)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	w := bufio.NewWriter(c.stdout)
	var buf []byte
	for i := uint64(0); i < *n; i++ {
		buf = strconv.AppendUint(buf[:0], first+i, 10)
		buf = append(buf, '\n')
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return w.Flush()
}

// seqShowJSON is seq show's JSON; numbers are decimal strings (values
// above 2^53 do not survive JavaScript numbers).
type seqShowJSON struct {
	Name      string        `json:"name"`
	Start     string        `json:"start"`
	Max       string        `json:"max"`
	Next      string        `json:"next"`
	CreatedAt time.Time     `json:"created_at,omitzero"`
	Grants    []seqRangeOut `json:"grants"`
	Ranges    []seqRangeOut `json:"ranges"`
	Leases    []seqLeaseOut `json:"leases"`
	ThisHost  *seqLeaseOut  `json:"this_host,omitempty"`
}

type seqRangeOut struct {
	DC        string    `json:"dc"`
	First     string    `json:"first"`
	Last      string    `json:"last"`
	Next      string    `json:"next,omitempty"`
	GrantedAt time.Time `json:"granted_at,omitzero"`
}

type seqLeaseOut struct {
	NodeName string    `json:"node_name"` // the node name the lease was taken under`
	DC       string    `json:"dc,omitempty"`
	OwnerID  string    `json:"owner_id,omitempty"`
	First    string    `json:"first"`
	Last     string    `json:"last"`
	Position string    `json:"position,omitempty"` // this host's lease file: the next number it hands out
	Ahead    string    `json:"ahead,omitempty"`    // this host's lease file: the next lease, first-last
	LeasedAt time.Time `json:"leased_at,omitzero"`
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

// seqShow prints a sequence's state in the registry and this host's lease
// file.
func seqShow(ctx context.Context, c *cli, seq string, args []string) error {
	fs := c.newFlags("seq show")
	asJSON := fs.Bool("json", false, "print JSON")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	if err := c.parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, err := c.connect(ctx, &rf, true)
	if err == nil && reg == nil {
		err = usageError{"seq show needs a registry: give --cassandra host[:port],… or set SNAPID_CASSANDRA"}
	}
	if err != nil {
		return err
	}
	defer reg.Close()
	st, err := reg.SequenceStatus(ctx, seq)
	if err != nil {
		return err
	}
	out := seqShowOut(st)
	if path, err := c.resolveCounter(); err == nil {
		if out.ThisHost, err = seqThisHost(path, seq); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printSeqShow(c.stdout, out)
	return nil
}

// seqShowOut returns the registry's state of a sequence (st) as seq show
// prints it, without this host's lease.
func seqShowOut(st registry.SequenceStatus) seqShowJSON {
	out := seqShowJSON{Name: st.Name, Start: u(st.Start), Max: u(st.Max), Next: u(st.Next), CreatedAt: st.CreatedAt,
		Grants: []seqRangeOut{}, Ranges: []seqRangeOut{}, Leases: []seqLeaseOut{}}
	for _, g := range st.Grants {
		out.Grants = append(out.Grants, seqRangeOut{DC: g.DC, First: u(g.First), Last: u(g.Last), GrantedAt: g.GrantedAt})
	}
	for _, r := range st.Ranges {
		out.Ranges = append(out.Ranges, seqRangeOut{DC: r.DC, First: u(r.First), Last: u(r.Last), Next: u(r.Next), GrantedAt: r.GrantedAt})
	}
	for _, l := range st.Leases {
		out.Leases = append(out.Leases, seqLeaseOut{NodeName: l.Name, DC: l.DC, OwnerID: registry.OwnerID(l.Owner), First: u(l.First), Last: u(l.Last), LeasedAt: l.LeasedAt})
	}
	return out
}

// seqThisHost reads the lease file of sequence seq beside the counter at
// path: nil if there is none.
func seqThisHost(path, seq string) (*seqLeaseOut, error) {
	cur, ahead, pos, ok, err := admin.ReadLeaseFile(path, seq)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, nil
	}
	h := &seqLeaseOut{NodeName: cur.Name, OwnerID: registry.OwnerID(cur.Owner), First: u(cur.First), Last: u(cur.Last), Position: u(pos)}
	if ahead.First != 0 {
		h.Ahead = u(ahead.First) + "-" + u(ahead.Last)
	}
	return h, nil
}

// printSeqShow prints a sequence's state (out) as text: the registry's
// grants, ranges and leases, then this host's lease.
func printSeqShow(w io.Writer, out seqShowJSON) {
	fmt.Fprintf(w, "sequence %s: start %s, max %s; GLOBAL next %s\n", out.Name, out.Start, out.Max, out.Next)
	for _, g := range out.Grants {
		fmt.Fprintf(w, "  granted to %s: %s-%s\n", g.DC, g.First, g.Last)
	}
	for _, r := range out.Ranges {
		fmt.Fprintf(w, "  data centre %s: range %s-%s, next %s\n", r.DC, r.First, r.Last, r.Next)
	}
	for _, l := range out.Leases {
		fmt.Fprintf(w, "  node %s (%s): lease %s-%s\n", l.NodeName, l.DC, l.First, l.Last)
	}
	switch h := out.ThisHost; {
	case h == nil:
		fmt.Fprintf(w, "this host: no lease file\n")
	case h.First == "0":
		fmt.Fprintf(w, "this host (%s): lease file without a lease\n", h.NodeName)
	default:
		ahead := "none"
		if h.Ahead != "" {
			ahead = h.Ahead
		}
		fmt.Fprintf(w, "this host (%s): lease %s-%s, next number %s, next lease %s\n", h.NodeName, h.First, h.Last, h.Position, ahead)
	}
}

// seqExhaustedHint says what a lease that could not be had lacks: fewer
// numbers left than asked, or none left for this data centre.
func seqExhaustedHint(err error) string {
	var e *engine.SequenceExhaustedError
	if !errors.As(err, &e) {
		return "nothing was issued: the sequence has fewer numbers left than asked for; ask for fewer, or raise its max with 'snapctl seq create NAME --max M'"
	}
	elsewhere := ""
	if n := e.OtherDCsLeft(); n > 0 {
		elsewhere = fmt.Sprintf("; the %d numbers other data centres' ranges hold go to their own hosts ('snapctl seq show %s' shows where)", n, e.Sequence)
	}
	if left := e.DCLeft + e.GlobalLeft; left > 0 {
		return fmt.Sprintf("nothing was issued: %d numbers are left for this data centre, at most %d of them together, fewer than the %d asked for; "+
			"ask for at most %d, or raise the max with 'snapctl seq create %s --max M'%s", left, e.Largest, e.Wanted, e.Largest, e.Sequence, elsewhere)
	}
	return fmt.Sprintf("nothing was issued: every number up to max %d was handed to data centres and this one's are leased "+
		"(other hosts may still hold unissued numbers in their leases); raise the max with 'snapctl seq create %s --max M' "+
		"for more numbers here%s", e.Max, e.Sequence, elsewhere)
}
