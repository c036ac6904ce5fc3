package registry_test

import (
	"strings"
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
)

func TestValidateNameValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
	}{
		{"single letter", "a"},
		{"single underscore", "_"},
		{"letters digits underscore", "server_a1"},
		{"leading underscore then digit", "_9"},
		{"all underscores", "___"},
		{"max length 63", "a" + strings.Repeat("0", 62)},
		{"every allowed byte", "abcdefghijklmnopqrstuvwxyz_0123456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.NoError(t, registry.ValidateName(tt.in))
		})
	}
}

func TestNameRuleText(t *testing.T) {
	t.Parallel()
	// The rule in the message is the one of the specification.
	assert.Contains(t, registry.NameRule, "^[a-z_][a-z0-9_]{0,62}$")
	assert.Equal(t, 63, registry.MaxNameLen)
}
