package engine

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/snapid/snapid/internal/idform"
)

// The formats of the files earlier versions kept beside the counter (see
// migrate.go): the form history (two copies with a generation and a
// checksum) and the number file, decoded and merged; nothing here reads
// or writes a file.

// formEntry is one line of an earlier version's form history.
type formEntry struct {
	form         Format // FormatStriped or FormatDecimal
	stride, node uint64
	upto         uint64 // striped: the counter's value when the form was left
	current      bool   // striped: the form in use
	// unknown (striped): a form one copy records as in use and the other
	// does not; left at the counter's value now, the most it can have
	// issued (see resolve).
	unknown bool
	// registry (form FormatName): a registry gave the node name registry
	// node number node and, if known, stride (0: not known).
	registry string
}

type formHistory []formEntry

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// decodeFormsGen decodes one copy of the history and its generation (0
// for a version 1 copy, which has none).
func decodeFormsGen(b []byte) (formHistory, uint64, error) {
	lines, err := checkedFormLines(b)
	if err != nil {
		return nil, 0, err
	}
	gen, lines, err := formsGeneration(lines)
	if err != nil {
		return nil, 0, err
	}
	var h formHistory
	currents := 0
	for _, l := range lines {
		e, err := decodeFormEntry(l)
		if err != nil {
			return nil, 0, err
		}
		if e.current {
			currents++
		}
		h = append(h, e)
	}
	if currents > 1 {
		return nil, 0, errors.New("it records two striped forms in use")
	}
	return h, gen, nil
}

// checkedFormLines returns the lines of a copy of the history above its
// checksum line, once the checksum matches them.
func checkedFormLines(b []byte) ([]string, error) {
	s := string(b)
	i := strings.LastIndex(strings.TrimSuffix(s, "\n"), "\n")
	if i < 0 || !strings.HasSuffix(s, "\n") {
		return nil, errors.New("not a form history")
	}
	body, sum := s[:i+1], strings.TrimSuffix(s[i+1:], "\n")
	if sum != fmt.Sprintf("crc32c %08x", crc32.Checksum([]byte(body), crc32c)) {
		return nil, errors.New("its checksum does not match")
	}
	return strings.Split(strings.TrimSuffix(body, "\n"), "\n"), nil
}

// formsGeneration decodes the header of a copy of the history: its
// generation (0 for version 1) and the form lines after the header.
func formsGeneration(lines []string) (gen uint64, forms []string, err error) {
	switch {
	case lines[0] == formsHeaderV1:
		return 0, lines[1:], nil
	case lines[0] == formsHeader && len(lines) > 1:
		g, prefixed := strings.CutPrefix(lines[1], "generation ")
		n, ok := canonicalUint(g)
		if !ok || !prefixed {
			return 0, nil, fmt.Errorf("line %q is not a generation", lines[1])
		}
		return n, lines[2:], nil
	default:
		return 0, nil, errors.New("not a form history")
	}
}

// canonicalUint parses s as a decimal number written the one way
// FormatUint writes it.
func canonicalUint(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil && strconv.FormatUint(v, 10) == s
}

// decodeFormEntry decodes one form line of a copy of the history.
func decodeFormEntry(l string) (formEntry, error) {
	f := strings.Fields(l)
	var e formEntry
	ok := false
	switch {
	case len(f) == 4 && f[0] == "registry":
		e, ok = decodeRegistryEntry(f)
	case len(f) == 2 && f[0] == "decimal":
		e, ok = decodeDecimalEntry(f)
	case len(f) == 4 && f[0] == "striped":
		e, ok = decodeStripedEntry(f)
	}
	if !ok {
		return formEntry{}, fmt.Errorf("line %q is not a form", l)
	}
	return e, nil
}

// decodeRegistryEntry decodes the fields of a line "registry <node name>
// <node number> <stride>".
func decodeRegistryEntry(f []string) (e formEntry, ok bool) {
	var ok1, ok2, ok3 bool
	e.registry, ok1 = f[1], ValidateName(f[1]) == nil
	e.node, ok2 = canonicalUint(f[2])
	ok2 = ok2 && idform.CheckNodeNumber(e.node, 0) == nil
	e.stride, ok3 = canonicalUint(f[3])
	ok3 = ok3 && (e.stride == 0 || idform.CheckStride(e.stride) == nil)
	return e, ok1 && ok2 && ok3
}

// decodeDecimalEntry decodes the fields of a line "decimal <node
// number>".
func decodeDecimalEntry(f []string) (e formEntry, ok bool) {
	e.form = FormatDecimal
	e.node, ok = canonicalUint(f[1])
	return e, ok && idform.CheckNodeNumber(e.node, 0) == nil
}

// decodeStripedEntry decodes the fields of a line "striped <stride> <node
// number> <counter when it was left, or current>".
func decodeStripedEntry(f []string) (e formEntry, ok bool) {
	var ok1, ok2, ok3 bool
	e.form = FormatStriped
	e.stride, ok1 = canonicalUint(f[1])
	e.node, ok2 = canonicalUint(f[2])
	if f[3] == "current" {
		e.current, ok3 = true, true
	} else {
		e.upto, ok3 = canonicalUint(f[3])
	}
	ok1 = ok1 && idform.CheckStride(e.stride) == nil
	ok2 = ok2 && idform.CheckNodeNumber(e.node, e.stride) == nil
	return e, ok1 && ok2 && ok3
}

// mergeForms returns the history two valid copies record together: a
// form either records is kept, whichever copy is older. The form in use
// is the one of the copy with the higher generation (the primary's if
// equal); a striped form the other copy records as in use is kept as
// left at the counter's value now (unknown), and a form both record as
// left keeps the higher of their values.
func mergeForms(a formHistory, genA uint64, b formHistory, genB uint64) formHistory {
	if genB > genA {
		a, b = b, a
	}
	h := append(formHistory(nil), a...)
	for _, e := range b {
		i := h.find(e)
		switch {
		case i < 0 && e.current:
			e.current, e.unknown = false, true
			h = append(h, e)
		case i < 0:
			h = append(h, e)
		case e.registry != "":
			h[i].stride = max(h[i].stride, e.stride)
		case e.form != FormatStriped || h[i].current:
		case e.current:
			h[i].unknown = true
		default:
			h[i].upto = max(h[i].upto, e.upto)
			h[i].unknown = h[i].unknown || e.unknown
		}
	}
	return h
}

// find returns the index of the entry for e's form (or registry record)
// in h, -1 if none.
func (h formHistory) find(e formEntry) int {
	for i, x := range h {
		switch {
		case e.registry != "":
			if x.registry == e.registry && x.node == e.node {
				return i
			}
		case x.registry == "" && x.form == e.form && x.node == e.node && (e.form != FormatStriped || x.stride == e.stride):
			return i
		}
	}
	return -1
}

// resolve gives every form left at an unknown value the counter's value
// now, cur: the most it can have issued under it.
func (h formHistory) resolve(cur uint64) {
	for i := range h {
		if h[i].unknown {
			h[i].upto, h[i].unknown = max(h[i].upto, cur), false
		}
	}
}

// numberRecord is what a number file (or a registry line of the
// history) says: a registry gave name node number number and stride.
type numberRecord struct {
	name           string
	number, stride uint64
}

// decodeNumberFile decodes a number file (see above); damaged, it is
// errCorruptNumber.
func decodeNumberFile(b []byte) (numberRecord, error) {
	lines := strings.Split(string(b), "\n")
	if why := numberFileHeader(lines); why != "" {
		return badNumberFile(why)
	}
	var f numberRecord
	var ok bool
	if f.name, ok = strings.CutPrefix(lines[1], "name "); !ok || ValidateName(f.name) != nil {
		return badNumberFile("no valid node name")
	}
	n, ok := numberFileNumber(lines[2])
	if !ok {
		return badNumberFile("no valid node number")
	}
	s, ok := numberFileStride(lines[3])
	if !ok {
		return badNumberFile("no valid stride")
	}
	f.number, f.stride = n, s
	return f, nil
}

// badNumberFile is the error of a damaged number file, why saying what is
// wrong with it.
func badNumberFile(why string) (numberRecord, error) {
	return numberRecord{}, fmt.Errorf("%w: %s; stop the host's programs and remove it: a registry gives the name its number again at the next start, "+
		"and the host's record of the name keeps it since", errCorruptNumber, why)
}

// numberFileHeader checks a number file's version line, line count and
// (version 2) claim line: it says what is wrong, "" if nothing.
func numberFileHeader(lines []string) string {
	switch {
	case len(lines) == 5 && lines[0] == "snapid-number 1" && lines[4] == "":
	case len(lines) == 6 && lines[0] == "snapid-number 2" && lines[5] == "":
		h, ok := strings.CutPrefix(lines[4], "claim ")
		if _, err := strconv.ParseUint(h, 16, 64); !ok || err != nil || len(h) != 16 {
			return "no valid claim line"
		}
	default:
		return "not a number file"
	}
	return ""
}

// numberFileNumber decodes a number file's line "number <node number>".
func numberFileNumber(line string) (uint64, bool) {
	num, ok := strings.CutPrefix(line, "number ")
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil || n == 0 || n > MaxNodeNumber || strconv.FormatUint(n, 10) != num {
		return 0, false
	}
	return n, true
}

// numberFileStride decodes a number file's line "stride <stride>" (0:
// not known).
func numberFileStride(line string) (uint64, bool) {
	str, ok := strings.CutPrefix(line, "stride ")
	s, err := strconv.ParseUint(str, 10, 64)
	if !ok || err != nil || (s != 0 && idform.CheckStride(s) != nil) || strconv.FormatUint(s, 10) != str {
		return 0, false
	}
	return s, true
}
