// Package nodename is the node-name rule: ^[a-z_][a-z0-9_]{0,62}$, the
// one implementation of it every layer calls.
package nodename

import "fmt"

// MaxLen is the longest valid node name.
const MaxLen = 63

// Rule is the node name rule in words, as used in error messages.
const Rule = "a node name must match ^[a-z_][a-z0-9_]{0,62}$ " +
	"(lower-case ASCII letters, digits and _, 1 to 63 characters, not starting with a digit)"

// Problem returns what is wrong with s as a node name, or "".
// It is the only implementation of the rule.
func Problem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > MaxLen:
		return fmt.Sprintf("it is %d bytes long", len(s))
	case s[0] >= '0' && s[0] <= '9':
		return "it starts with a digit"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isNameByte(c) {
			return fmt.Sprintf("byte %d is %q", i, c)
		}
	}
	return ""
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
}

// Lower lower-cases ASCII letters only, so that no non-ASCII rune is
// turned into an ASCII one by Unicode case folding.
func Lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
