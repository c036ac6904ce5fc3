//go:build race

package sim

// raceBuild: the race detector slows every history several times; the
// test command runs the full count without it in a step of its own.
const raceBuild = true
