package claim

import (
	"fmt"
	"strings"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// Session is the content of the session file: the host's claim.
type Session struct{ Name, Owner, Session string }

// SessionHeader is the session file's first line.
const SessionHeader = "snapid-session 2"

// EncodeSession returns the session file's content (see the package
// documentation).
func EncodeSession(s Session) ([]byte, error) {
	if s.Session == "" || strings.ContainsAny(s.Session, "\r\n") {
		return nil, fmt.Errorf("snapid: %w: the registry returned a session %q that cannot be recorded on one line", errs.ErrRegistry, s.Session)
	}
	return []byte(SessionHeader + "\nname " + s.Name + "\nowner " + s.Owner + "\nsession " + s.Session + "\n"), nil
}

// DecodeSession parses the session file's content.
func DecodeSession(b []byte) (Session, error) {
	text, ok := strings.CutSuffix(string(b), "\n")
	lines := strings.Split(text, "\n")
	switch {
	case !ok:
		return Session{}, fmt.Errorf("%w: it does not end with a newline", errs.ErrCorruptSession)
	case len(lines) == 1 && !strings.HasPrefix(lines[0], "snapid-session"):
		return Session{}, fmt.Errorf("%w: it holds a session without the name and owner token it belongs to "+
			"(written by an earlier version of snapid)", errs.ErrCorruptSession)
	case lines[0] != SessionHeader:
		return Session{}, fmt.Errorf("%w: its first line is not %q", errs.ErrCorruptSession, SessionHeader)
	case len(lines) != 4:
		return Session{}, fmt.Errorf("%w: it is %d lines, not 4", errs.ErrCorruptSession, len(lines))
	}
	var s Session
	for i, f := range []struct {
		key string
		val *string
	}{{"name", &s.Name}, {"owner", &s.Owner}, {"session", &s.Session}} {
		v, ok := strings.CutPrefix(lines[i+1], f.key+" ")
		if !ok || v == "" {
			return Session{}, fmt.Errorf("%w: line %d is not %q followed by a value", errs.ErrCorruptSession, i+2, f.key+" ")
		}
		*f.val = v
	}
	if registry.ValidateName(s.Name) != nil {
		return Session{}, fmt.Errorf("%w: it holds an invalid node name", errs.ErrCorruptSession)
	}
	if !ValidOwner(s.Owner) {
		return Session{}, fmt.Errorf("%w: it holds an invalid owner token", errs.ErrCorruptSession)
	}
	return s, nil
}

// ValidOwner reports whether tok is an owner token: 32 lower-case hex
// digits.
func ValidOwner(tok string) bool {
	return len(tok) == 32 && strings.Trim(tok, "0123456789abcdef") == ""
}
