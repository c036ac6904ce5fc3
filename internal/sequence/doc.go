// Package sequence is the client side of the cluster's integer
// sequences: a Sequence hands out numbers from blocks it takes from its
// host's lease file (take.go), which holds the leases the host takes
// from the registry (refill.go). It knows the claim only as a Host (the
// name, owner and session a Generator claimed), and the lease file only
// as an open leasefile.File: making and placing the files beside the
// counter is the engine's.
//
// The ranges of the host's lease file are trusted only while the file's
// session is the host's current claim and its latest range is the lease
// the registry records for the host: verify reads that record (SequenceRegistry.HostLease)
// under the host's refill lock, so that no other process's lease can come
// between the registry and the file meanwhile, and drops the ranges
// otherwise (a gap, never a repeat). The refill lock, an flock on
// <lease file>.refill, lets one process of the host lease at a time
// (the others go on taking blocks, and a background prefetch gives up
// while another process leases); since a flock is held per open file, a
// one-slot semaphore in front of it keeps the process's own goroutines to
// one lease at a time too (two leases at once would each be conditional
// on the same previous lease, and all but one would be dropped). A lease
// the registry refuses as ErrLeaseMoved means the file is older than the
// registry: its ranges are dropped and the next lease is asked for against
// the registry's record (lease).
//
// A clean restart carries the host's lease over, as the last process sets
// a name's mark back: the host's last process, under the gate, records
// each lease file's position in its host row (closeLeases,
// SequenceRegistry.CloseLease), and the next claim adopts a file whose
// latest range and position are exactly the recorded ones (adopt,
// AdoptLease); any other file of an earlier claim is dropped. Recording at
// every Sequence.Close would not do: another process of the same claim may
// take blocks afterwards and die, and a copy of the file made at the
// recorded position would then be adopted and repeat those blocks.
//
//	situation                                      outcome
//	a clean restart of the host (a new claim)      carried over
//	a restart after a crash                        dropped: a gap of at most two leases
//	the lease file rolled back, the host running   raised back to its floor (take.go)
//	the lease file restored after a restart        another session or position: dropped
//	the state directory cloned to another machine  the clone claims anew and drops it; the
//	                                               original's next lease after the clone's
//	                                               is refused (ErrNameTaken)
//	the file and its floor rolled back together    not caught in general (take.go)
//	the lease file lost                            a new lease: a gap
//	the registry unreachable at Sequence open      a file of the current claim used unchecked,
//	                                               with a warning
//
// Leases start at SequenceLeaseSize, double while each lasts less than
// fastLease (up to maxLeaseGrowth times it) and halve back once one lasts
// longer than slowLease (nextLeaseSize); blocks within a lease are sized
// likewise (take.go).
package sequence
