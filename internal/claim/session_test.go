package claim

import (
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

const owner = "0123456789abcdef0123456789abcdef"

func TestSessionRoundTrip(t *testing.T) {
	t.Parallel()
	s := Session{Name: "web_1", Owner: owner, Session: "3f2a-1"}
	b, err := EncodeSession(s)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), SessionHeader+"\n"))
	got, err := DecodeSession(b)
	require.NoError(t, err)
	require.Equal(t, s, got)
}

// A session the registry returns that cannot be kept on one line is
// refused before anything is written.
func TestEncodeSessionRefusesALineBreak(t *testing.T) {
	t.Parallel()
	for _, session := range []string{"", "a\nb", "a\rb"} {
		_, err := EncodeSession(Session{Name: "web_1", Owner: owner, Session: session})
		require.ErrorIs(t, err, errs.ErrRegistry, "%q", session)
	}
}

func TestDecodeSessionRefused(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"no newline":    SessionHeader + "\nname web_1\nowner " + owner + "\nsession s",
		"one line":      "3f2a-1\n",
		"other header":  "snapid-session 3\nname web_1\nowner " + owner + "\nsession s\n",
		"three lines":   SessionHeader + "\nname web_1\nowner " + owner + "\n",
		"empty value":   SessionHeader + "\nname \nowner " + owner + "\nsession s\n",
		"invalid name":  SessionHeader + "\nname Web 1\nowner " + owner + "\nsession s\n",
		"invalid owner": SessionHeader + "\nname web_1\nowner XYZ\nsession s\n",
		"keys swapped":  SessionHeader + "\nowner " + owner + "\nname web_1\nsession s\n",
	} {
		_, err := DecodeSession([]byte(text))
		require.ErrorIs(t, err, errs.ErrCorruptSession, name)
	}
}

func TestValidOwner(t *testing.T) {
	t.Parallel()
	require.True(t, ValidOwner(owner))
	require.False(t, ValidOwner(strings.ToUpper(owner)))
	require.False(t, ValidOwner(owner[:31]))
}
