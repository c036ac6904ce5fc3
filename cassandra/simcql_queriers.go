package cassandra

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gocql/gocql"
)

// The queriers the Registry runs over on the simulated cluster: the names
// table's, the node numbers' and the sequences'.

// simQuerier is the names table's casQuerier.
type simQuerier struct {
	c      *simCluster
	dc     string
	serial gocql.SerialConsistency
}

func (q *simQuerier) cas(ctx context.Context, rec *record, stmt string, args ...any) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b, err := q.c.bind(stmt, args, []string{"name"})
	if err != nil {
		return false, err
	}
	name, _ := b.keys["name"].(string)
	var conds []simCond
	if b.st.ifNotExists || len(b.st.ifCols) > 0 {
		conds = []simCond{b.cond("")}
	}
	applied, cur, err := q.c.lwt(q.dc, q.serial, simNames+name, conds, []simWrite{b.write("")})
	if err != nil || applied {
		return applied, err
	}
	if row, ok := cur[""]; ok {
		only := b.st.ifCols // an UPDATE returns its condition's columns
		if b.st.ifNotExists {
			only = nil // INSERT … IF NOT EXISTS returns the row
		}
		simFill(rec.destMap(), row, only)
	}
	return false, nil
}

func (q *simQuerier) serialRead(ctx context.Context, rec *record, name string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	rs, err := q.c.read(q.dc, gocql.Consistency(q.serial), simNames+name)
	if err != nil {
		return false, err
	}
	row, ok := rs[""]
	if ok {
		simFill(rec.destMap(), row, nil)
	}
	return ok, nil
}

func (q *simQuerier) list(ctx context.Context) ([]record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, err := q.c.scan(q.dc, gocql.Quorum, simNames)
	if err != nil {
		return nil, err
	}
	var out []record
	for _, k := range sortedKeys(parts) {
		if row, ok := parts[k][""]; ok {
			var rec record
			simFill(rec.destMap(), row, nil)
			out = append(out, rec)
		}
	}
	return out, nil
}

// simNumQuerier is the node numbers table's numQuerier.
type simNumQuerier struct {
	c  *simCluster
	dc string
}

func numRowOf(row simRow) numRow {
	var out numRow
	simFill(map[string]any{"number": &out.number, "name": &out.name, "attempt": &out.token}, row, nil)
	return out
}

func (q *simNumQuerier) insert(ctx context.Context, key string, number uint64, name, token string) (bool, numRow, error) {
	if err := ctx.Err(); err != nil {
		return false, numRow{}, err
	}
	w := simWrite{ck: "", cols: map[string]any{"id": key, "number": int64(number), "name": name, "attempt": token}}
	applied, cur, err := q.c.lwt(q.dc, gocql.Serial, simNumbers+key, []simCond{{notExists: true}}, []simWrite{w})
	if err != nil || applied {
		return applied, numRow{}, err
	}
	return false, numRowOf(cur[""]), nil
}

func (q *simNumQuerier) read(ctx context.Context, key string, serial bool) (numRow, bool, error) {
	if err := ctx.Err(); err != nil {
		return numRow{}, false, err
	}
	cons := gocql.Quorum
	if serial {
		cons = gocql.Consistency(gocql.Serial)
	}
	rs, err := q.c.read(q.dc, cons, simNumbers+key)
	if err != nil {
		return numRow{}, false, err
	}
	row, ok := rs[""]
	return numRowOf(row), ok, nil
}

func (q *simNumQuerier) hint(ctx context.Context, n uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.c.write(q.dc, gocql.Quorum, simNumbers+"next", []simWrite{{cols: map[string]any{"id": "next", "number": int64(n)}}})
}

func (q *simNumQuerier) names(ctx context.Context) (map[string]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, err := q.c.scan(q.dc, gocql.Quorum, simNumbers+"name:")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for k, rs := range parts {
		if r := numRowOf(rs[""]); r.number != nil && *r.number > 0 {
			out[strings.TrimPrefix(k, simNumbers+"name:")] = uint64(*r.number)
		}
	}
	return out, nil
}

// simSeqQuerier is the sequences table's seqQuerier.
type simSeqQuerier struct {
	c  *simCluster
	dc string
}

var simSeqKey = []string{"seq", "part", "kind", "key", "first"}

func seqPK(seq, part string) string { return simSeqs + seq + "\x00" + part }

func seqCK(kind, key string, first int64) string {
	return fmt.Sprintf("%s\x00%s\x00%020d", kind, key, first)
}

func (q *simSeqQuerier) casBatch(ctx context.Context, serial gocql.SerialConsistency, _ gocql.Consistency, stmts ...seqStmt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var pk string
	var conds []simCond
	var writes []simWrite
	for i, s := range stmts {
		b, err := q.c.bind(s.stmt, s.args, simSeqKey)
		if err != nil {
			return false, err
		}
		seq, _ := b.keys["seq"].(string)
		part, _ := b.keys["part"].(string)
		kind, _ := b.keys["kind"].(string)
		key, _ := b.keys["key"].(string)
		first, _ := b.keys["first"].(int64)
		if p := seqPK(seq, part); i == 0 {
			pk = p
		} else if p != pk {
			return false, simRequestError{gocql.ErrCodeInvalid, "Batch with conditions cannot span multiple partitions"}
		}
		ck := seqCK(kind, key, first)
		if b.st.ifNotExists || len(b.st.ifCols) > 0 {
			conds = append(conds, b.cond(ck))
		}
		writes = append(writes, b.write(ck))
	}
	applied, _, err := q.c.lwt(q.dc, serial, pk, conds, writes)
	return applied, err
}

func seqRowOf(row simRow) seqRow {
	var w seqRow
	d := w.dests()
	m := map[string]any{}
	for i, col := range seqColumns {
		m[col.name] = d[i]
	}
	m["lwt_token"] = &w.token
	simFill(m, row, nil)
	return w
}

func rowsOf(rs simRows) []seqRow {
	cks := make([]string, 0, len(rs))
	for ck := range rs {
		cks = append(cks, ck)
	}
	sort.Strings(cks)
	out := make([]seqRow, 0, len(cks))
	for _, ck := range cks {
		out = append(out, seqRowOf(rs[ck]))
	}
	return out
}

func (q *simSeqQuerier) readPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]seqRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := q.c.read(q.dc, cons, seqPK(seq, part))
	if err != nil {
		return nil, err
	}
	return rowsOf(rs), nil
}

func (q *simSeqQuerier) readAllGlobal(ctx context.Context) ([]seqRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, err := q.c.scan(q.dc, gocql.LocalQuorum, simSeqs)
	if err != nil {
		return nil, err
	}
	var out []seqRow
	for _, k := range sortedKeys(parts) {
		for _, w := range rowsOf(parts[k]) {
			if w.kind == kindGlobal {
				out = append(out, w)
			}
		}
	}
	return out, nil
}
