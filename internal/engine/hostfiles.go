package engine

import (
	"errors"
	"io/fs"

	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/statefile"
)

// The files a Generator with a registry keeps beside the counter: see
// package claim (Files).
const (
	ownerSuffix    = claim.OwnerSuffix
	markSuffix     = claim.MarkSuffix
	presenceSuffix = claim.PresenceSuffix
	sessionSuffix  = claim.SessionSuffix
)

// HostInfo identifies the machine in the registry (see package claim).
type HostInfo = claim.HostInfo

// LocalHostInfo returns this machine's host name, a non-loopback address
// and machine id (see claim.LocalHostInfo).
func LocalHostInfo() HostInfo { return claim.LocalHostInfo() }

// checkHostFiles validates the files beside the counter that a Generator
// with a registry reads and that exist (owner and mark; the session is
// read only by processes joining their host's claim, see enter), before
// anything is created or written, on disk or in the registry. It reads
// without locks: a mark file only ever grows from empty to 16 bytes in
// one write.
func checkHostFiles(counterPath string, o *options) error {
	if _, err := claim.LoadOwner(counterPath, false, o.claimFiles()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_, _, err := claim.ReadMarkFile(counterPath, o.followSymlinks)
	return err
}

// fsOps is the file-system seam of the state-file layer (statefile.FS):
// tests replace it (withFS) to record the order of operations and inject
// failures.
type fsOps = statefile.FS

// osFS is the real file system.
type osFS = statefile.OS

// OwnerToken returns the owner token stored beside the counter file at
// counterPath (in counterPath+".owner"). A counter that never used a
// registry has none: the error then wraps fs.ErrNotExist.
func OwnerToken(counterPath string, opts ...Option) (string, error) {
	o, err := buildOptions(opts)
	if err == nil {
		err = o.refuseOwner("OwnerToken")
	}
	if err != nil {
		return "", err
	}
	return claim.LoadOwner(counterPath, false, o.claimFiles())
}

// ReadMark returns the reserved-up-to mark this host keeps beside the
// counter file at counterPath (the highest number the registry lets it
// issue), and false if the counter has never been used with a registry.
func ReadMark(counterPath string) (mark uint64, ok bool, err error) {
	m, ok, err := claim.ReadMarkFile(counterPath, false)
	return m.Mark, ok, err
}
