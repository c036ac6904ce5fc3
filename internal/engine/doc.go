// Package engine is the code behind package snapid: package snapid gives
// users its names, and operators' tools and the simulator use it
// directly. What package snapid's documentation describes is done here:
//
//   - a Generator's counter updates: counter.go, counterio.go, over
//     package internal/counterfile (the file) and internal/alloc (group
//     commit, blocks, CPU shards);
//   - id forms: formoptions.go, idform.go, nodename.go, nodenumber.go,
//     formhistory.go, over package internal/idform (the forms'
//     arithmetic, ids);
//   - the host's record of each name: hostrecord.go, recordjudge.go,
//     recordplace.go, recordrelease.go, migrate.go, migrateformat.go, over package
//     internal/hoststate;
//   - the claim with a registry: registryclaim.go (what the engine
//     decides around it), nodenumber.go, hostfiles.go, over package
//     internal/claim (the claim protocol, its files beside the counter,
//     their formats, the heartbeat);
//   - integer sequences: sequences.go (a Generator's Sequences),
//     seqlease.go (their files beside the counter), over package
//     internal/sequence (leases and blocks) and internal/leasefile (the
//     lease file and its floor);
//   - operators' calls: admin.go, release.go, seqcreate.go.
package engine
