package simcql

import (
	"fmt"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// The simulated cluster's reading of the adapter's statements: columns,
// keys and conditions taken from the statement text, and bound to the
// request's values.

// named in only (nil: every column); the others are left null.
func simFill(dests map[string]any, row simRow, only []string) {
	for col, d := range dests {
		if only != nil && !contains(only, col) {
			continue
		}
		v, ok := row[col]
		if !ok {
			continue
		}
		switch d := d.(type) {
		case **string:
			s := v.(string)
			*d = &s
		case **int64:
			n := v.(int64)
			*d = &n
		case **time.Time:
			t := v.(time.Time)
			*d = &t
		case *string:
			*d = v.(string)
		case *int64:
			*d = v.(int64)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// simStmt is a parsed INSERT or UPDATE of the adapter's statement set.
type simStmt struct {
	table       string   // the table's name, unquoted
	insert      bool     // INSERT (cols are its columns) or UPDATE (cols are its SET columns)
	cols        []string // columns set
	null        []bool   // an UPDATE's column set to the literal null
	where       []string // an UPDATE's WHERE columns (each = ?)
	ifNotExists bool
	ifCols      []string // IF columns (each = ?)
}

// parse reads an INSERT or UPDATE of the form the adapter builds:
//
//	INSERT INTO t (c, …) VALUES (?, …) [IF NOT EXISTS]
//	UPDATE t SET c = ?|null, … WHERE k = ? AND … [IF c = ? AND …]
func (c *simCluster) parse(stmt string) (*simStmt, error) {
	if st, ok := c.parsed[stmt]; ok {
		return st, nil
	}
	r := strings.NewReplacer("(", " ( ", ")", " ) ", ",", " , ", "=", " = ")
	toks := simTokens(strings.Fields(r.Replace(stmt)))
	st := &simStmt{}
	var i int
	var why string
	switch toks.up(0) {
	case "INSERT":
		i, why = toks.parseInsert(st)
	case "UPDATE":
		i, why = toks.parseUpdate(st)
	default:
		why = "not an INSERT or an UPDATE"
	}
	if why == "" {
		why = toks.parseIf(st, i)
	}
	if why != "" {
		return nil, simRequestError{gocql.ErrCodeSyntax, fmt.Sprintf("simcql: %s: %s", why, stmt)}
	}
	c.parsed[stmt] = st
	return st, nil
}

// simTokens are a statement's words, with parentheses, commas and equals
// signs apart.
type simTokens []string

// up is token i in upper case, or "" past the end.
func (toks simTokens) up(i int) string {
	if i < len(toks) {
		return strings.ToUpper(toks[i])
	}
	return ""
}

// simTable is the unquoted table name of t ("ks"."t", ks.t or t).
func simTable(t string) string {
	parts := strings.Split(t, ".")
	return strings.Trim(parts[len(parts)-1], `"`)
}

// parseInsert reads INSERT INTO t (c, …) VALUES (?, …) into st and returns
// the index of the token after it, or why the statement is not one.
func (toks simTokens) parseInsert(st *simStmt) (int, string) {
	if toks.up(1) != "INTO" || toks.up(3) != "(" {
		return 0, "not an INSERT INTO t (…)"
	}
	i := 4
	st.insert, st.table = true, simTable(toks[2])
	for ; i < len(toks) && toks[i] != ")"; i++ {
		if toks[i] != "," {
			st.cols = append(st.cols, toks[i])
			st.null = append(st.null, false)
		}
	}
	i++
	if toks.up(i) != "VALUES" {
		return 0, "no VALUES"
	}
	for i++; i < len(toks) && toks[i] != ")"; i++ {
	}
	return i + 1, ""
}

// parseUpdate reads UPDATE t SET c = ?|null, … WHERE k = ? AND … into st
// and returns the index of the token after it, or why the statement is
// not one.
func (toks simTokens) parseUpdate(st *simStmt) (int, string) {
	if toks.up(2) != "SET" {
		return 0, "not an UPDATE t SET …"
	}
	i := 3
	st.table = simTable(toks[1])
	for ; i+2 < len(toks) && toks.up(i) != "WHERE"; i += 3 {
		if toks[i] == "," {
			i -= 2
			continue
		}
		if toks[i+1] != "=" {
			return 0, "an assignment that is not c = v"
		}
		st.cols = append(st.cols, toks[i])
		st.null = append(st.null, strings.EqualFold(toks[i+2], "null"))
	}
	if toks.up(i) != "WHERE" {
		return 0, "no WHERE"
	}
	for i++; i+2 < len(toks) && toks.up(i) != "IF"; i += 3 {
		if toks.up(i) == "AND" {
			i -= 2
			continue
		}
		st.where = append(st.where, toks[i])
	}
	return i, ""
}

// parseIf reads the condition from token i on, if there is one (IF NOT
// EXISTS, or IF c = ? AND …), into st; it returns why the condition is
// not one of these, or "".
func (toks simTokens) parseIf(st *simStmt, i int) string {
	if toks.up(i) != "IF" {
		return ""
	}
	if toks.up(i+1) == "NOT" && toks.up(i+2) == "EXISTS" {
		st.ifNotExists = true
		return ""
	}
	for i++; i+2 < len(toks); i += 3 {
		if toks.up(i) == "AND" {
			i -= 2
			continue
		}
		if toks[i+1] != "=" || toks[i+2] != "?" {
			return "a condition that is not c = ?"
		}
		st.ifCols = append(st.ifCols, toks[i])
	}
	return ""
}

// simBound is a statement bound to its values.
type simBound struct {
	st    *simStmt
	keys  map[string]any // key columns (an UPDATE's WHERE, an INSERT's key columns)
	cols  map[string]any // columns set
	conds map[string]any
}

// bind binds args to the statement text stmt; keyCols are the table's
// primary key columns.
func (c *simCluster) bind(stmt string, args []any, keyCols []string) (simBound, error) {
	c.mu.Lock()
	st, err := c.parse(stmt)
	c.mu.Unlock()
	if err != nil {
		return simBound{}, err
	}
	b := simBound{st: st, keys: map[string]any{}, cols: map[string]any{}, conds: map[string]any{}}
	n := 0
	next := func() (any, error) {
		if n >= len(args) {
			return nil, simRequestError{gocql.ErrCodeInvalid, fmt.Sprintf("simcql: %d values for %s", len(args), stmt)}
		}
		n++
		return simValue(args[n-1]), nil
	}
	for i, col := range st.cols {
		if st.null[i] {
			b.cols[col] = nil
			continue
		}
		v, err := next()
		if err != nil {
			return b, err
		}
		if st.insert && contains(keyCols, col) {
			b.keys[col] = v
		} else {
			b.cols[col] = v
		}
	}
	for _, col := range st.where {
		v, err := next()
		if err != nil {
			return b, err
		}
		b.keys[col] = v
	}
	for _, col := range st.ifCols {
		v, err := next()
		if err != nil {
			return b, err
		}
		b.conds[col] = v
	}
	if n != len(args) {
		return b, simRequestError{gocql.ErrCodeInvalid, fmt.Sprintf("simcql: %d values for %d markers: %s", len(args), n, stmt)}
	}
	for _, k := range keyCols {
		if _, ok := b.keys[k]; !ok {
			return b, simRequestError{gocql.ErrCodeInvalid, fmt.Sprintf("simcql: no value of key column %s: %s", k, stmt)}
		}
	}
	return b, nil
}

// cond and write are the bound statement's condition and write on row ck.
func (b simBound) cond(ck string) simCond {
	return simCond{ck: ck, notExists: b.st.ifNotExists, eq: b.conds}
}

func (b simBound) write(ck string) simWrite {
	cols := make(map[string]any, len(b.cols)+len(b.keys))
	for k, v := range b.keys {
		cols[k] = v
	}
	for k, v := range b.cols {
		cols[k] = v
	}
	return simWrite{ck: ck, cols: cols}
}
