// Package alloc turns callers' requests for numbers into as few counter
// updates as possible, knowing nothing of the counter itself: each takes
// the update as a function.
//
//   - GroupCommit: concurrent requests share one update (one lock, one
//     write, one fdatasync); nobody gets a number before the update
//     covering it has returned, and a failed update fails the whole group.
//   - Block: numbers reserved a block at a time and served from memory
//     with one atomic add; the next block is reserved in the background
//     when half of the current one is used.
//   - Shards: small runs taken from a Block, one per P, so that callers on
//     different cores do not share a cache line per number.
package alloc
