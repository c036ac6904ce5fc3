package engine

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry"
)

// HostFiles is what the files beside a counter say, for snapctl status:
// the owner token's fingerprint, the host's mark and the session of the
// host's claim. ReadHostFiles reads them without locks, as a snapshot.
type HostFiles struct {
	// OwnerID is the owner token's fingerprint (see OwnerID); "" when the
	// counter has no owner token (never used with a registry).
	OwnerID string `json:"owner_id,omitempty"`
	// MarkFile reports whether there is a mark file; Mark is the host's
	// reserved-up-to mark as last cached there (the registry's may have
	// moved since) and Floor the counter's value at its last update.
	MarkFile bool   `json:"mark_file"`
	Mark     uint64 `json:"cached_reserved_up_to,string"`
	Floor    uint64 `json:"floor,string"`
	// SessionName is the name the host's claim was made for, "" without a
	// session file; SessionID the session token's fingerprint.
	SessionName string `json:"session_name,omitempty"`
	SessionID   string `json:"session_id,omitempty"`
	// Released is the name this host released (Release, snapctl release),
	// which its processes refuse until it is claimed again; "" if none.
	Released string `json:"released,omitempty"`
	// Name is the node name the host's record gives this counter file
	// (by device and inode), "" if none does.
	Name string `json:"name,omitempty"`

	owner, session string
}

// ReadHostFiles reads the owner, mark and session files beside the counter
// at counterPath, and the name the host's records (WithBindingDir names
// their place) give that counter and whether it was released. A missing file is
// reported as absent; a damaged one is an error that matches ErrCorrupt
// (errCorruptOwner, errCorruptMark, errCorruptSession). It changes
// nothing.
func ReadHostFiles(counterPath string, opts ...Option) (HostFiles, error) {
	var hf HostFiles
	o, err := buildOptions(opts)
	if err == nil {
		err = o.refuseOwner("ReadHostFiles")
	}
	if err != nil {
		return hf, err
	}
	owner, err := claim.LoadOwner(counterPath, false, o.claimFiles())
	switch {
	case err == nil:
		hf.owner, hf.OwnerID = owner, registry.OwnerID(owner)
	case !errors.Is(err, fs.ErrNotExist):
		return hf, err
	}
	m, ok, err := claim.ReadMarkFile(counterPath, false)
	if err != nil {
		return hf, err
	}
	hf.MarkFile, hf.Mark, hf.Floor = ok, m.Mark, m.Floor
	hf.Name, _ = nameInRecords(counterPath, &o)
	hf.Released = releasedInRecords(counterPath, &o)
	path := counterPath + sessionSuffix
	b, _, err := statefile.ReadSmallOwned(path, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return hf, nil
	case err != nil:
		return hf, &FileError{Op: "read", Path: path, Err: classifyOpenError(err)}
	}
	s, err := claim.DecodeSession(b)
	if err != nil {
		return hf, &FileError{Op: "read", Path: path, Err: err}
	}
	if s.Owner != hf.owner {
		return hf, &FileError{Op: "read", Path: path, Err: fmt.Errorf(
			"%w: it records a claim of owner token %s, not of this counter's (%s)", errCorruptSession, registry.OwnerID(s.Owner), hf.OwnerID)}
	}
	hf.SessionName, hf.session, hf.SessionID = s.Name, s.Session, registry.OwnerID(s.Session)
	return hf, nil
}

// OwnedBy reports whether h, a registry row, is held by this counter's
// owner token.
func (hf HostFiles) OwnedBy(h registry.Holder) bool {
	return hf.owner != "" && h.Owner == hf.owner
}

// HoldsSession reports whether h, a registry row, is held active by this
// counter's owner token under the session recorded on the host: the
// processes of the host may extend its mark.
func (hf HostFiles) HoldsSession(h registry.Holder) bool {
	return hf.OwnedBy(h) && hf.session != "" && h.Session == hf.session && h.State == registry.StateActive
}
