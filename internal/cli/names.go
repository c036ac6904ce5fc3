package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/snapid/snapid/registry"
)

// cmdNames lists every row of the registry.
func cmdNames(ctx context.Context, c *cli, args []string) error {
	c.newFlags("names")
	var rf registryFlags
	c.addRegistryFlags(&rf)
	asJSON := c.fs.Bool("json", false, jsonHelp)
	if err := c.parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, err := c.connect(ctx, &rf, true)
	if err != nil {
		return err
	}
	if reg == nil {
		return usageError{"names needs a registry: give --cassandra host[:port],… or set SNAPID_CASSANDRA"}
	}
	defer reg.Close()
	rows, err := reg.List(ctx)
	if err != nil {
		return err
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	type row struct {
		Name         string    `json:"name"`
		Hostname     string    `json:"hostname"`
		Address      string    `json:"address"`
		OwnerID      string    `json:"owner_id"`
		State        string    `json:"state"`
		RegisteredAt time.Time `json:"registered_at,omitzero"`
		LastSeen     time.Time `json:"last_seen,omitzero"`
		ReservedUpTo string    `json:"reserved_up_to"`
		NodeNumber   uint64    `json:"node_number,omitempty,string"`
		// A number taken for a name without one, by an assignment whose
		// outcome was unknown (the name's next start settles it).
		NodeNumberTaken uint64 `json:"node_number_taken,omitempty,string"`
	}
	out := make([]row, 0, len(rows))
	for _, h := range rows {
		out = append(out, row{h.Name, h.Hostname, h.Address, registry.OwnerID(h.Owner), h.State, h.RegisteredAt, h.LastSeen,
			strconv.FormatUint(h.Reserved, 10), h.Number, h.NumberTaken})
	}
	stride, err := reg.Stride(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Rows   []row  `json:"rows"`
			Stride uint64 `json:"stride,omitempty,string"` // the cluster's stride of striped ids, if recorded
		}{out, stride})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST\tSTATE\tLAST SEEN\tRESERVED UP TO\tOWNER\tNODE NUMBER")
	for _, r := range out {
		seen := "never"
		if !r.LastSeen.IsZero() {
			seen = r.LastSeen.UTC().Format(time.RFC3339)
		}
		num := "none"
		switch {
		case r.NodeNumber != 0:
			num = strconv.FormatUint(r.NodeNumber, 10)
		case r.NodeNumberTaken != 0:
			num = fmt.Sprintf("unsettled (%d taken, outcome unknown)", r.NodeNumberTaken)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, orNone(r.Hostname), orNone(r.State), seen, r.ReservedUpTo, orNone(r.OwnerID), num)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	strideNote := ""
	if stride != 0 {
		strideNote = fmt.Sprintf(", cluster stride %d", stride)
	}
	_, err = fmt.Fprintf(c.stdout, "names: %s%s\n", plural(len(out), "row"), strideNote)
	return err
}
