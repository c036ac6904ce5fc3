// Package admin is what an operator's tool calls, beside the Generator a
// program opens; snapctl is built on it.
//
// On a host (host.go): Init creates a counter or raises it, Repair
// rewrites one (the only call that lowers a counter), ReadCounter reads
// one under its lock; ReadHostFiles, ReadNodeNumber, ReadMark,
// ReadLeaseFile and OwnerToken read what the host keeps for a counter
// without changing it; Release gives a name back to the registry and
// ForceRelease gives back a dead holder's. In a registry (sequences.go):
// CreateSequence and CreateSequenceKeepMax create or widen a sequence.
//
// The audit (audit.go, seqaudit.go) of a registry's rows: names that break
// the rule or collide once normalised, owner tokens shared between names,
// rows not seen for long, a host's inventory against the registry, node
// numbers shared or missing, sequences whose ranges and leases overlap or
// pass their bounds. snapctl check-names prints its report. The audit is
// a pure function of the rows a registry lists
// (registry.Registry.List, registry.SequenceRegistry.ListSequences): it
// reads no file and calls no registry.
package admin
