package engine

import (
	"fmt"
	"strings"

	"github.com/snapid/snapid/internal/nodename"
	"github.com/snapid/snapid/registry"
)

// MaxNameLen is the longest valid node name.
const MaxNameLen = registry.MaxNameLen

// NameRule is the node name rule in words, as used in error messages.
const NameRule = registry.NameRule

// ValidateName reports whether s is a valid node name. The error wraps
// ErrInvalidName, says what is wrong and states the rule. A name is never
// altered to make it valid; see NameFromHostname for the one derivation
// snapid offers.
func ValidateName(s string) error { return registry.ValidateName(s) }

// NameFromHostname derives a node name from a host name the way Snap!
// does: cut at the first ".", replace every "-" by "_", lower-case. It
// returns the name and, when the result differs from h, a short description
// of what was changed (empty when h was already a valid name). What cannot be
// made valid by those three steps (an empty label, a leading digit, other
// characters, more than 63 characters) is refused with an error wrapping
// ErrInvalidName.
func NameFromHostname(h string) (name, changed string, err error) {
	var changes []string
	name = h
	if i := strings.IndexByte(name, '.'); i >= 0 {
		name = name[:i]
		changes = append(changes, fmt.Sprintf("cut at the first \".\" (%q)", name))
	}
	if strings.Contains(name, "-") {
		name = strings.ReplaceAll(name, "-", "_")
		changes = append(changes, "replaced \"-\" by \"_\"")
	}
	if lower := nodename.Lower(name); lower != name {
		name = lower
		changes = append(changes, "lower-cased")
	}
	if why := nodename.Problem(name); why != "" {
		return "", "", fmt.Errorf("snapid: %w: host name %q gives %q: %s; %s",
			ErrInvalidName, h, name, why, NameRule)
	}
	if len(changes) > 0 {
		changed = fmt.Sprintf("host name %q became %q: %s", h, name, strings.Join(changes, ", "))
	}
	return name, changed, nil
}
