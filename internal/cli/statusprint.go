package cli

// snapctl status's report, printed as JSON or as a table.

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
)

// printStatusReport prints st as JSON or as text; a report with items
// needing attention is errProblems (exit 1).
func printStatusReport(c *cli, st *statusReport, asJSON bool) error {
	if asJSON {
		if st.Attention == nil {
			st.Attention = []string{}
		}
		if st.Notes == nil {
			st.Notes = []string{}
		}
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else if err := printStatus(c, st); err != nil {
		return err
	}
	if len(st.Attention) > 0 {
		return errProblems
	}
	return nil
}

// printStatus prints st as text: a table of the counter, this host's
// files, the registry and the leases, then the items needing attention
// and the verdict.
func printStatus(c *cli, st *statusReport) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", st.Name)
	printStatusCounter(tw, st)
	if f := st.Files; f != nil {
		printStatusFiles(tw, f, st.Processes)
	}
	if r := st.Registry; r != nil {
		printStatusRegistry(tw, r, st.Name)
	}
	for _, q := range st.Sequences {
		printStatusSequence(tw, q)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printAttention(c, st.Notes, st.Attention)
}

// printStatusCounter prints the counter file's lines of the status table:
// its path and, if it exists, its last issued id and its mode.
func printStatusCounter(tw io.Writer, st *statusReport) {
	fmt.Fprintf(tw, "counter\t%s\n", st.Counter.Path)
	if st.Counter.Exists {
		last := st.Counter.LastIssued
		if !st.Counter.SizeOK {
			last = "unreadable"
		}
		fmt.Fprintf(tw, "  last issued\t%s\n", last)
		fmt.Fprintf(tw, "  mode\t%s\n", st.Counter.Mode)
	}
}

// printStatusFiles prints the lines of the status table about this host's
// registry files (f) and the processes using the counter with the
// registry (nil: not counted).
func printStatusFiles(tw io.Writer, f *admin.HostFiles, processes *int) {
	fmt.Fprintf(tw, "owner token\t%s\n", orNone(f.OwnerID))
	if f.MarkFile {
		fmt.Fprintf(tw, "mark (cached)\t%d\n", f.Mark)
	}
	if f.Released != "" {
		fmt.Fprintf(tw, "released\t%q by this host\n", f.Released)
	}
	if f.SessionName != "" {
		fmt.Fprintf(tw, "session\t%s for %q\n", f.SessionID, f.SessionName)
	}
	if processes != nil {
		fmt.Fprintf(tw, "processes\t%d using the counter with the registry\n", *processes)
	}
}

// printStatusRegistry prints the lines of the status table about the
// registry: the row of name (r) and the cluster's stride.
func printStatusRegistry(tw io.Writer, r *statusRow, name string) {
	switch {
	case r.Unreadable != "":
		fmt.Fprintf(tw, "registry\tunknown: the row of %q could not be read (%s)\n", name, r.Unreadable)
	case !r.Found:
		fmt.Fprintf(tw, "registry\tno row for %q\n", name)
	default:
		fmt.Fprintf(tw, "registry\t%s, %s (%s, owner %s)\n", r.State, statusHolderName(r), orNone(r.Hostname), r.OwnerID)
		fmt.Fprintf(tw, "  last seen\t%s\n", r.LastSeen.UTC().Format(time.RFC3339))
		fmt.Fprintf(tw, "  reserved up to\t%s\n", r.ReservedUpTo)
		switch {
		case r.NodeNumber != 0:
			fmt.Fprintf(tw, "  node number\t%d\n", r.NodeNumber)
		case r.NodeNumberTaken != 0:
			fmt.Fprintf(tw, "  node number\tnone yet: %s\n", takenNumber(r.NodeNumberTaken, r.NodeNumberTakenAt))
		case r.NodeNumberUnreadable != "":
			fmt.Fprintf(tw, "  node number\tunknown: could not be read (%s)\n", r.NodeNumberUnreadable)
		}
	}
	if r.Stride != 0 {
		fmt.Fprintf(tw, "  cluster stride\t%d\n", r.Stride)
	}
}

// statusHolderName says who holds the row r, or last held it when it is
// released: this host's session, this host's owner token under another
// session, or another owner.
func statusHolderName(r *statusRow) string {
	switch {
	case r.State == registry.StateReleased && r.ThisHost:
		return "last held by this host"
	case r.State == registry.StateReleased:
		return "last held by another owner"
	case r.Session:
		return "held by this host, current session"
	case r.ThisHost:
		return "held by this host's owner token, another session"
	}
	return "held by another owner"
}

// printStatusSequence prints the line of the status table about the lease
// of one sequence (q).
func printStatusSequence(tw io.Writer, q statusSequence) {
	lease := "no lease"
	if q.CurrentFirst != 0 {
		lease = fmt.Sprintf("[%d, %d], next %d", q.CurrentFirst, q.CurrentLast, q.Next)
	}
	if q.AheadFirst != 0 {
		lease += fmt.Sprintf(", then [%d, %d]", q.AheadFirst, q.AheadLast)
	}
	claim := ""
	if !q.CurrentClaim && q.CurrentFirst != 0 {
		claim = " (leased under an earlier claim of this host)"
	}
	fmt.Fprintf(tw, "sequence %s\t%s: %d left%s\n", q.Sequence, lease, q.LeftNumbers, claim)
}

// printAttention prints the notes and the items needing attention, one a
// line, and the verdict: healthy if no item needs attention.
func printAttention(c *cli, notes, attention []string) error {
	for _, n := range notes {
		fmt.Fprintf(c.stdout, "note: %s\n", n)
	}
	if len(attention) == 0 {
		_, err := fmt.Fprintln(c.stdout, "status: healthy")
		return err
	}
	for _, a := range attention {
		fmt.Fprintf(c.stdout, "attention: %s\n", a)
	}
	verb := "needs"
	if len(attention) > 1 {
		verb = "need"
	}
	_, err := fmt.Fprintf(c.stdout, "status: %s %s attention\n", plural(len(attention), "item"), verb)
	return err
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// takenNumber says that node number n was taken for a name (at, if known)
// by an assignment whose outcome was unknown.
func takenNumber(n uint64, at time.Time) string {
	when := ""
	if !at.IsZero() {
		when = " at " + at.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%d was taken for it%s, but its assignment did not complete (outcome unknown: an answer lost or timed out); "+
		"the next start settles it", n, when)
}
