package admin

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var auditNow = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// row is an active, recently seen row of owner "tok_<name>".
func row(name string) registry.Holder {
	return registry.Holder{Name: name, Owner: "tok_" + name, Hostname: name + ".example", Address: "192.0.2.7",
		MachineID: "m-" + name, State: registry.StateActive, RegisteredAt: auditNow.Add(-48 * time.Hour),
		LastSeen: auditNow.Add(-time.Minute), Reserved: 1000}
}

func with(h registry.Holder, f func(*registry.Holder)) registry.Holder {
	f(&h)
	return h
}

func TestAuditCleanRegistry(t *testing.T) {
	rows := []registry.Holder{row("web_1"), row("web_2"),
		with(row("old_db"), func(h *registry.Holder) {
			h.State = registry.StateReleased
			h.LastSeen = auditNow.Add(-90 * 24 * time.Hour)
		})}
	rep := Audit(rows, AuditConfig{Now: auditNow, ThisName: "web_1", ThisOwner: "tok_web_1",
		Planned: []string{"web_3", "old_db"}})
	assert.True(t, rep.OK(), "%+v", rep.Problems)
	assert.Equal(t, 3, rep.Rows)
	assert.Equal(t, auditNow, rep.Checked)

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"problems":[]`, "an empty list, not null")
}

func TestAudit(t *testing.T) {
	type want struct {
		kind, name string
		detail     []string // substrings of Detail
		names      []string
	}
	cases := []struct {
		name string
		rows []registry.Holder
		cfg  AuditConfig
		want []want
	}{
		{
			name: "invalid names",
			rows: []registry.Holder{row("web_1"), row("Web1"), row("db-1"), row("9lives")},
			want: []want{
				{kind: ProblemInvalidName, name: "9lives", detail: []string{"starts with a digit", registry.NameRule}},
				{kind: ProblemInvalidName, name: "Web1", detail: []string{`byte 0 is 'W'`}},
				{kind: ProblemInvalidName, name: "db-1", detail: []string{`byte 2 is '-'`}},
			},
		},
		{
			name: "normalised collisions",
			rows: []registry.Holder{row("web_1"), row("Web_1"), row("web-1"), row("web_1.example"), row("db_1"), row("DB_2")},
			want: []want{
				{kind: ProblemInvalidName, name: "DB_2"},
				{kind: ProblemInvalidName, name: "Web_1"},
				{kind: ProblemInvalidName, name: "web-1"},
				{kind: ProblemInvalidName, name: "web_1.example"},
				{kind: ProblemNormalisedCollision, name: "web_1",
					names:  []string{"Web_1", "web-1", "web_1", "web_1.example"},
					detail: []string{"same ids"}},
			},
		},
		{
			name: "missing owner and state",
			rows: []registry.Holder{
				with(row("a"), func(h *registry.Holder) { h.Owner = "" }),
				with(row("b"), func(h *registry.Holder) { h.State = "" }),
				with(row("c"), func(h *registry.Holder) { h.Owner, h.State = "", "" }),
			},
			want: []want{
				{kind: ProblemMissingOwner, name: "a", detail: []string{"no owner", "partial row"}},
				{kind: ProblemMissingOwner, name: "b", detail: []string{"no state"}},
				{kind: ProblemMissingOwner, name: "c", detail: []string{"no owner and no state"}},
			},
		},
		{
			name: "invalid state",
			rows: []registry.Holder{with(row("a"), func(h *registry.Holder) { h.State = "zombie" })},
			want: []want{{kind: ProblemInvalidState, name: "a", detail: []string{`"zombie"`}}},
		},
		{
			name: "stale holders",
			rows: []registry.Holder{
				with(row("fresh"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(-23 * time.Hour) }),
				with(row("gone"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(-25 * time.Hour) }),
				with(row("never"), func(h *registry.Holder) { h.LastSeen = time.Time{} }),
				with(row("released"), func(h *registry.Holder) {
					h.State = registry.StateReleased
					h.LastSeen = auditNow.Add(-1000 * time.Hour)
				}),
			},
			want: []want{
				{kind: ProblemStale, name: "gone", detail: []string{"25h0m0s ago", "gone.example"}},
				{kind: ProblemStale, name: "never", detail: []string{"never seen"}},
			},
		},
		{
			name: "custom stale threshold",
			rows: []registry.Holder{with(row("a"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(-2 * time.Hour) })},
			cfg:  AuditConfig{Stale: time.Hour},
			want: []want{{kind: ProblemStale, name: "a", detail: []string{"more than 1h0m0s"}}},
		},
		{
			name: "stale check off",
			rows: []registry.Holder{with(row("a"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(-2000 * time.Hour) })},
			cfg:  AuditConfig{Stale: -1},
		},
		{
			name: "clock ahead",
			rows: []registry.Holder{
				with(row("near"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(59 * time.Second) }),
				with(row("ahead"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(10 * time.Minute) }),
				with(row("registered_ahead"), func(h *registry.Holder) {
					h.State = registry.StateReleased
					h.RegisteredAt = auditNow.Add(2 * time.Hour)
				}),
			},
			want: []want{
				{kind: ProblemClockAhead, name: "ahead", detail: []string{"10m0s ahead", "NTP"}},
				{kind: ProblemClockAhead, name: "registered_ahead", detail: []string{"2h0m0s ahead"}},
			},
		},
		{
			name: "custom clock skew",
			rows: []registry.Holder{with(row("a"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(30 * time.Second) })},
			cfg:  AuditConfig{ClockSkew: 10 * time.Second},
			want: []want{{kind: ProblemClockAhead, name: "a", detail: []string{"30s ahead"}}},
		},
		{
			name: "clock check off",
			rows: []registry.Holder{with(row("a"), func(h *registry.Holder) { h.LastSeen = auditNow.Add(100 * time.Hour) })},
			cfg:  AuditConfig{ClockSkew: -1},
		},
		{
			name: "this host not registered",
			rows: []registry.Holder{row("web_2"), row("Web-1")},
			cfg:  AuditConfig{ThisName: "web_1", ThisOwner: "tok_web_1"},
			want: []want{
				{kind: ProblemInvalidName, name: "Web-1"},
				{kind: ProblemNotRegistered, name: "web_1", detail: []string{"snapctl register", `row "Web-1" collides`}},
			},
		},
		{
			name: "this host's name held by another owner",
			rows: []registry.Holder{row("web_1")},
			cfg:  AuditConfig{ThisName: "web_1", ThisOwner: "tok_other"},
			want: []want{{kind: ProblemHeldByOther, name: "web_1", detail: []string{"web_1.example", "must not issue"}}},
		},
		{
			name: "this host's name released by another owner is free",
			rows: []registry.Holder{with(row("web_1"), func(h *registry.Holder) { h.State = registry.StateReleased })},
			cfg:  AuditConfig{ThisName: "web_1", ThisOwner: "tok_other"},
		},
		{
			name: "this host's name held while this host has no owner token",
			rows: []registry.Holder{row("web_1")},
			cfg:  AuditConfig{ThisName: "web_1"},
			want: []want{{kind: ProblemHeldByOther, name: "web_1", detail: []string{"web_1.example", "no owner token", "must not issue"}}},
		},
		{
			name: "this host's name released while this host has no owner token",
			rows: []registry.Holder{with(row("web_1"), func(h *registry.Holder) { h.State = registry.StateReleased })},
			cfg:  AuditConfig{ThisName: "web_1"},
		},
		{
			name: "this host's name invalid",
			cfg:  AuditConfig{ThisName: "Web-1"},
			want: []want{{kind: ProblemInvalidName, name: "Web-1", detail: []string{"configured name"}}},
		},
		{
			name: "inventory",
			rows: []registry.Holder{
				row("taken_1"),
				with(row("free_1"), func(h *registry.Holder) { h.State = registry.StateReleased }),
				row("Mine-1"), // only normalised equal to a planned name
				row("ours"),
				with(row("partial"), func(h *registry.Holder) { h.Owner = "" }),
			},
			cfg: AuditConfig{ThisOwner: "tok_ours", Planned: []string{
				"new_1", "taken_1", "free_1", "mine_1", "ours", "partial",
				"dup", "dup", "x-y", "x_y", "Bad Name",
			}},
			want: []want{
				{kind: ProblemInvalidName, name: "Mine-1"},
				{kind: ProblemMissingOwner, name: "partial"},
				{kind: ProblemInventoryInvalid, name: "Bad Name", detail: []string{`byte 0 is 'B'`}},
				{kind: ProblemInventoryInvalid, name: "x-y"},
				{kind: ProblemInventoryDuplicate, name: "dup", names: []string{"dup", "dup"}, detail: []string{"listed more than once"}},
				{kind: ProblemInventoryDuplicate, name: "x_y", names: []string{"x-y", "x_y"}, detail: []string{"once normalised"}},
				{kind: ProblemInventoryTaken, name: "mine_1", detail: []string{`row "Mine-1", the same once normalised`}},
				{kind: ProblemInventoryTaken, name: "partial"},
				{kind: ProblemInventoryTaken, name: "taken_1", detail: []string{"taken_1.example"}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Now = auditNow
			rep := Audit(tc.rows, cfg)
			var got []want
			for _, p := range rep.Problems {
				got = append(got, want{kind: p.Kind, name: p.Name})
			}
			var exp []want
			for _, w := range tc.want {
				exp = append(exp, want{kind: w.kind, name: w.name})
			}
			require.Equal(t, exp, got, "problems (kind, name), in report order")
			for i, w := range tc.want {
				p := rep.Problems[i]
				for _, d := range w.detail {
					assert.Contains(t, p.Detail, d, "%s %s", p.Kind, p.Name)
				}
				if w.names != nil {
					assert.Equal(t, w.names, p.Names)
				}
				assert.NotEmpty(t, p.Detail)
			}
			assert.Equal(t, len(tc.want) == 0, rep.OK())
		})
	}
}

func TestAuditJSON(t *testing.T) {
	h := with(row("web_1"), func(h *registry.Holder) {
		h.Owner = "0123456789abcdef0123456789abcdef"
		h.Reserved = math.MaxUint64
		h.LastSeen = auditNow.Add(-48 * time.Hour)
	})
	rep := Audit([]registry.Holder{h}, AuditConfig{Now: auditNow})
	require.Len(t, rep.Problems, 1)
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	s := string(b)
	assert.Contains(t, s, `"kind":"stale"`)
	assert.Contains(t, s, `"reserved":"18446744073709551615"`, "uint64 as a string")
	assert.Contains(t, s, `"owner_id":"`+registry.OwnerID(h.Owner)+`"`)
	assert.NotContains(t, s, h.Owner, "the owner token itself is never shown")
	assert.Len(t, registry.OwnerID(h.Owner), 12)
	assert.Empty(t, registry.OwnerID(""))

	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep, back)
}

func TestNormaliseName(t *testing.T) {
	for in, want := range map[string]string{
		"web_1": "web_1", "Web-1": "web_1", "WEB-1.example.com": "web_1", "": "", ".x": "", "a b": "a b", "É": "É",
	} {
		assert.Equal(t, want, NormaliseName(in), in)
	}
}

func TestParseInventory(t *testing.T) {
	in := "# planned hosts\n\nweb_1\n  web_2  # second rack\r\nweb_1\n\t\nBad Name\n#web_9\n"
	got, err := ParseInventory(strings.NewReader(in))
	require.NoError(t, err)
	assert.Equal(t, []string{"web_1", "web_2", "web_1", "Bad Name"}, got)

	got, err = ParseInventory(strings.NewReader(""))
	require.NoError(t, err)
	assert.Empty(t, got)

	readErr := errors.New("disk gone")
	_, err = ParseInventory(iotest.ErrReader(readErr))
	assert.ErrorIs(t, err, readErr)

	_, err = ParseInventory(strings.NewReader("web_1\n" + strings.Repeat("x", 70000) + "\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "after line 1")
}

// Two active rows with one owner token (one counter, two names) are a
// shared_owner problem naming both; a released one with the same owner
// is not.
func TestAuditSharedOwner(t *testing.T) {
	a, b, c := row("web_1"), row("web_2"), row("web_3")
	b.Owner = a.Owner
	rep := Audit([]registry.Holder{a, b, c}, AuditConfig{Now: auditNow})
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	p := rep.Problems[0]
	assert.Equal(t, ProblemSharedOwner, p.Kind)
	assert.Equal(t, []string{"web_1", "web_2"}, p.Names)
	assert.Contains(t, p.Detail, registry.OwnerID(a.Owner))
	assert.NotContains(t, p.Detail, a.Owner, "the token is a secret")

	b.State = registry.StateReleased
	assert.True(t, Audit([]registry.Holder{a, b, c}, AuditConfig{Now: auditNow}).OK())
}

func TestAuditNumbers(t *testing.T) {
	rows := []registry.Holder{
		{Name: "a", Owner: "o1", State: registry.StateActive, Number: 3},
		{Name: "b", Owner: "o2", State: registry.StateActive, Number: 3},
		{Name: "c", Owner: "o3", State: registry.StateActive, Number: 4},
		{Name: "d", Owner: "o4", State: registry.StateActive},
		{Name: "e", Owner: "o5", State: registry.StateReleased},
	}
	rep := Audit(rows, AuditConfig{})
	var kinds []string
	for _, p := range rep.Problems {
		if p.Kind == ProblemNumberShared || p.Kind == ProblemNoNumber {
			kinds = append(kinds, p.Kind+":"+strings.Join(append([]string{p.Name}, p.Names...), ","))
		}
	}
	assert.Equal(t, []string{"number_shared:a,a,b", "no_number:d"}, kinds)
	rep = Audit([]registry.Holder{{Name: "x", Owner: "o", State: registry.StateActive}}, AuditConfig{})
	for _, p := range rep.Problems {
		assert.NotEqual(t, ProblemNoNumber, p.Kind, "a registry that gives no numbers: nothing to report")
	}

	// With the cluster's stride 4: numbers 4 and up cannot be striped.
	kinds = nil
	for _, p := range Audit(rows, AuditConfig{Stride: 4}).Problems {
		if p.Kind == ProblemNumberAboveStride {
			kinds = append(kinds, p.Name)
			assert.Contains(t, p.Detail, "stride 4")
		}
	}
	assert.Equal(t, []string{"c"}, kinds)
	for _, p := range Audit(rows, AuditConfig{Stride: 5}).Problems {
		assert.NotEqual(t, ProblemNumberAboveStride, p.Kind, "every number is below the stride 5")
	}
}
