package simcql

import (
	"context"
	"fmt"
	"sort"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
)

// The queriers the Registry runs over on the simulated cluster: the names
// table's, the node numbers' and the sequences'.

// simQuerier is the names table's cql.CASQuerier.
type simQuerier struct {
	c      *simCluster
	dc     string
	serial gocql.Consistency
}

func (q *simQuerier) CAS(ctx context.Context, rec *cql.Record, stmt string, args ...any) (bool, error) {
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
		simFill(rec.DestMap(), row, only)
	}
	return false, nil
}

func (q *simQuerier) SerialRead(ctx context.Context, rec *cql.Record, name string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	rs, err := q.c.read(q.dc, q.serial, simNames+name)
	if err != nil {
		return false, err
	}
	row, ok := rs[""]
	if ok {
		simFill(rec.DestMap(), row, nil)
	}
	return ok, nil
}

func (q *simQuerier) List(ctx context.Context) ([]cql.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, err := q.c.scan(q.dc, gocql.Quorum, simNames)
	if err != nil {
		return nil, err
	}
	var out []cql.Record
	for _, k := range sortedKeys(parts) {
		if row, ok := parts[k][""]; ok {
			var rec cql.Record
			simFill(rec.DestMap(), row, nil)
			out = append(out, rec)
		}
	}
	return out, nil
}

// simNumQuerier is the node numbers table's cql.NumQuerier.
type simNumQuerier struct {
	c  *simCluster
	dc string
}

func numRowOf(row simRow) cql.NumRow {
	var out cql.NumRow
	simFill(map[string]any{"number": &out.Number, "name": &out.Name, "attempt": &out.Token}, row, nil)
	return out
}

func (q *simNumQuerier) Insert(ctx context.Context, key string, number uint64, name, token string) (bool, cql.NumRow, error) {
	if err := ctx.Err(); err != nil {
		return false, cql.NumRow{}, err
	}
	w := simWrite{ck: "", cols: map[string]any{"id": key, "number": int64(number), "name": name, "attempt": token}}
	applied, cur, err := q.c.lwt(q.dc, gocql.Serial, simNumbers+key, []simCond{{notExists: true}}, []simWrite{w})
	if err != nil || applied {
		return applied, cql.NumRow{}, err
	}
	return false, numRowOf(cur[""]), nil
}

func (q *simNumQuerier) Read(ctx context.Context, key string, serial bool) (cql.NumRow, bool, error) {
	if err := ctx.Err(); err != nil {
		return cql.NumRow{}, false, err
	}
	cons := gocql.Quorum
	if serial {
		cons = gocql.Serial
	}
	rs, err := q.c.read(q.dc, cons, simNumbers+key)
	if err != nil {
		return cql.NumRow{}, false, err
	}
	row, ok := rs[""]
	return numRowOf(row), ok, nil
}

func (q *simNumQuerier) Hint(ctx context.Context, n uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.c.write(q.dc, gocql.Quorum, simNumbers+"next", []simWrite{{cols: map[string]any{"id": "next", "number": int64(n)}}})
}

func (q *simNumQuerier) Names(ctx context.Context) (cql.NumTable, error) {
	out := cql.NumTable{Given: map[string]uint64{}, Taken: map[string][]cql.NumTaken{}}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	parts, err := q.c.scan(q.dc, gocql.Quorum, simNumbers)
	if err != nil {
		return out, err
	}
	for _, k := range sortedKeys(parts) {
		r := numRowOf(parts[k][""])
		out.Add(strings.TrimPrefix(k, simNumbers), r.Number, r.Name, nil) // no cell timestamps here
	}
	return out, nil
}

// simSeqQuerier is the sequences table's cql.SeqQuerier.
type simSeqQuerier struct {
	c  *simCluster
	dc string
}

var simSeqKey = []string{"seq", "part", "kind", "key", "first"}

func seqPK(seq, part string) string { return simSeqs + seq + "\x00" + part }

func seqCK(kind, key string, first int64) string {
	return fmt.Sprintf("%s\x00%s\x00%020d", kind, key, first)
}

func (q *simSeqQuerier) CASBatch(ctx context.Context, serial gocql.Consistency, _ gocql.Consistency, stmts ...cql.SeqStmt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var pk string
	var conds []simCond
	var writes []simWrite
	for i, s := range stmts {
		b, err := q.c.bind(s.Stmt, s.Args, simSeqKey)
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

func seqRowOf(row simRow) cql.SeqRow {
	var w cql.SeqRow
	d := w.Dests()
	m := map[string]any{}
	for i, col := range cql.SeqColumns {
		m[col.Name] = d[i]
	}
	m["lwt_token"] = &w.Token
	simFill(m, row, nil)
	return w
}

func rowsOf(rs simRows) []cql.SeqRow {
	cks := make([]string, 0, len(rs))
	for ck := range rs {
		cks = append(cks, ck)
	}
	sort.Strings(cks)
	out := make([]cql.SeqRow, 0, len(cks))
	for _, ck := range cks {
		out = append(out, seqRowOf(rs[ck]))
	}
	return out
}

func (q *simSeqQuerier) ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]cql.SeqRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := q.c.read(q.dc, cons, seqPK(seq, part))
	if err != nil {
		return nil, err
	}
	return rowsOf(rs), nil
}

func (q *simSeqQuerier) ReadAllGlobal(ctx context.Context) ([]cql.SeqRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, err := q.c.scan(q.dc, gocql.LocalQuorum, simSeqs)
	if err != nil {
		return nil, err
	}
	var out []cql.SeqRow
	for _, k := range sortedKeys(parts) {
		for _, w := range rowsOf(parts[k]) {
			if w.Kind == cql.KindGlobal {
				out = append(out, w)
			}
		}
	}
	return out, nil
}
