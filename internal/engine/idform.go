package engine

import "github.com/snapid/snapid/internal/idform"

// The id forms and parsed ids are internal/idform's; the engine's callers
// name them here.

// Format is the form of the ids a Generator hands out (WithFormat).
type Format = idform.Format

// The forms.
const (
	FormatName    = idform.FormatName
	FormatDecimal = idform.FormatDecimal
	FormatStriped = idform.FormatStriped
)

// Bounds for WithMaxID, and the largest node number.
const (
	MaxInt64       = idform.MaxInt64
	MaxSafeInteger = idform.MaxSafeInteger
	MaxUint32      = idform.MaxUint32
	MaxNodeNumber  = idform.MaxNodeNumber
)

// ID is a parsed id.
type ID = idform.ID

// ParseFormat parses "name", "decimal" or "striped".
func ParseFormat(s string) (Format, error) { return idform.ParseFormat(s) }

// ParseID parses an id of any form.
func ParseID(s string) (ID, error) { return idform.ParseID(s) }
