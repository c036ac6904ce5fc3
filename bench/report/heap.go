package main

import (
	"fmt"
	"strings"
)

// The settings and kinds of BenchmarkCompareHeap, and the snapid line of
// each kind that the peers are measured against: block mode's name form,
// the library's default.
var (
	heapSettings = []string{"fresh", "busy"}
	heapKinds    = []struct{ kind, snapid, label string }{
		{"string", "snapid/block=65536", "ids as strings: UniqueID"},
		{"native", "snapid/block=65536+AppendUniqueID", "allocation-free results: AppendUniqueID"},
	}
)

const compareHeap = "BenchmarkCompareHeap/"

// heapLine is one line of BenchmarkCompareHeap.
type heapLine struct {
	heap, kind, impl, mode string
	r                      *Result
}

// heapLines returns BenchmarkCompareHeap's results in the output's order.
func heapLines(rep *Report) []heapLine {
	var ls []heapLine
	for i := range rep.Results {
		r := &rep.Results[i]
		rest, ok := strings.CutPrefix(r.Name, compareHeap)
		if r.Package != benchPkg || !ok {
			continue
		}
		parts := strings.Split(rest, "/")
		if len(parts) != 5 || parts[4] != "c1" {
			continue
		}
		ls = append(ls, heapLine{heap: parts[0], kind: parts[1], impl: parts[2], mode: parts[3], r: r})
	}
	return ls
}

// fastestPeer returns the line of another generator with the most ids/s
// in this setting and kind.
func fastestPeer(rep *Report, heap, kind string) (heapLine, Stat, bool) {
	var best heapLine
	var bestSt Stat
	found := false
	for _, l := range heapLines(rep) {
		if l.heap != heap || l.kind != kind || l.impl == "snapid" {
			continue
		}
		if st, ok := l.r.Stat("ids/s"); ok && (!found || st.Median > bestSt.Median) {
			best, bestSt, found = l, st, true
		}
	}
	return best, bestSt, found
}

// heapGoals: snapid's block mode ahead of every other generator, in both
// heap settings and both kinds of result.
func heapGoals(rep *Report) []goal {
	var gs []goal
	for _, heap := range heapSettings {
		for _, k := range heapKinds {
			own, _ := stat(rep, benchPkg, compareHeap+heap+"/"+k.kind+"/"+k.snapid+"/c1", "ids/s")
			peer, peerSt, ok := fastestPeer(rep, heap, k.kind)
			what := fmt.Sprintf("%s, %s heap, 1 caller ÷ the fastest other generator", k.label, heap)
			if ok {
				what += fmt.Sprintf(" (%s %s)", peer.impl, peer.mode)
			}
			gs = append(gs, goal{what, 1, divide(own, peerSt)})
		}
	}
	return gs
}

// writeHeap: every line of BenchmarkCompareHeap, against snapid's line of
// the same setting and kind.
func writeHeap(b *strings.Builder, rep *Report) {
	ls := heapLines(rep)
	if len(ls) == 0 {
		return
	}
	b.WriteString("\n## A fresh heap and a busy one (`BenchmarkCompareHeap`, 1 caller)\n\n")
	b.WriteString("*fresh*: the heap is collected and returned to the system before each line. ")
	b.WriteString("*busy*: 256 MiB of live, pointer-rich objects stay reachable during each line, so every collection marks them while the generator allocates, as in a process that has other work. ")
	b.WriteString("*string*: the id as a string (one allocation per id for every generator). ")
	b.WriteString("*native*: each generator's own result, which allocates nothing: snapid's `AppendUniqueID` into a reused buffer and, striped, `UniqueUint64`; a snowflake `int64`, an xid or a UUID value. ")
	b.WriteString("snapid ÷ line compares snapid's block mode (name form, the default) of the same setting and kind with the line (above 1: snapid gives more ids/s). ")
	b.WriteString("The rate-limited lines of the table above are left out.\n\n")
	b.WriteString("| heap | kind | generator | mode | ns/op | ids/s | ± | snapid ÷ line | B/op | allocs/op |\n|---|---|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range ls {
		st, _ := l.r.Stat("ids/s")
		vs := "–"
		for _, k := range heapKinds {
			if k.kind == l.kind && l.impl+"/"+l.mode != k.snapid {
				own, _ := stat(rep, benchPkg, compareHeap+l.heap+"/"+l.kind+"/"+k.snapid+"/c1", "ids/s")
				vs = ratio(own.Median, st.Median)
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.heap, l.kind, l.impl, l.mode, ns(l.r.NsPerOp), count(st.Median), spread(st),
			vs, optional(l.r.BytesPerOp), optional(l.r.AllocsPerOp))
	}
}
