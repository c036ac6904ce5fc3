// Package statefile is the layer every snapid state file goes through:
// the counter and the files beside it, name bindings and lease files. It
// owns directory handles opened once (O_DIRECTORY|O_NOFOLLOW, level by
// level from the root, then *at calls under them), type, owner and
// link-count checks made on the opened descriptor (a file with more than
// one name is refused: a hard link another user made to someone else's
// file is never written or locked), reads that cannot block (O_NONBLOCK, a
// regular file only, size-capped), atomic creation (temporary file, sync,
// renamed into place without replacing, directory sync), directories made durable level by
// level, locks that wait at most as long as a context allows and name
// their holder, and the file-system seam (FS) through which tests and a
// simulator inject faults.
//
// It imports nothing of snapid and speaks bytes and plain errors (the
// sentinels below); callers wrap them into their own errors. It may be
// imported by the snapid root package and by snapid's internal packages
// and tests; it is internal, so nothing outside the module can import it.
package statefile
