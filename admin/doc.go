// Package admin is what an operator's tool calls, beside the Generator a
// program opens: the audit of a registry's rows (names that break the
// rule or collide once normalised, owner tokens shared between names, rows
// not seen for long, a host's inventory against the registry, node numbers
// shared or missing, sequences whose ranges and leases overlap or pass
// their bounds). snapctl check-names prints its report.
//
// The audit is a pure function of the rows a registry lists
// (registry.Registry.List, registry.SequenceRegistry.ListSequences): it
// reads no file and calls no registry.
package admin
