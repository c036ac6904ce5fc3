package registrytest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
)

func TestInMemoryRegistryConformance(t *testing.T) {
	registrytest.TestRegistry(t, func(*testing.T) registry.Registry { return registrytest.NewRegistry() })
}

func TestOutageSwitch(t *testing.T) {
	r := registrytest.NewRegistry()
	ctx := t.Context()
	h, err := r.Claim(ctx, registry.Claim{Name: "web_1", Owner: "owner1"})
	if err != nil {
		t.Fatal(err)
	}
	r.SetDown(true)
	calls := map[string]error{}
	_, calls["claim"] = r.Claim(ctx, registry.Claim{Name: "web_2", Owner: "owner1"})
	_, calls["extend"] = r.Extend(ctx, "web_1", "owner1", h.Session, 0, 100)
	calls["touch"] = r.Touch(ctx, "web_1", "owner1", h.Session)
	calls["release"] = r.Release(ctx, "web_1", "owner1", 100)
	_, calls["get"] = r.Get(ctx, "web_1")
	_, calls["list"] = r.List(ctx)
	for op, err := range calls {
		if !errors.Is(err, snapid.ErrRegistry) {
			t.Errorf("%s while down: %v, want ErrRegistry", op, err)
		}
	}
	r.SetDown(false)
	got, err := r.Get(ctx, "web_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Reserved != 0 || got.State != registry.StateActive || got.Session != h.Session {
		t.Errorf("calls while down changed the row: %+v", got)
	}
	if _, ok := r.Row("web_2"); ok {
		t.Errorf("a claim while down made a row")
	}
}

func TestHookHoldsAndFailsCalls(t *testing.T) {
	r := registrytest.NewRegistry()
	injected := errors.New("injected")
	var seen []string
	r.SetHook(func(_ context.Context, op, name string) error {
		seen = append(seen, op+" "+name)
		if op == "claim" && name == "web_2" {
			return injected
		}
		return nil
	})
	ctx := t.Context()
	if _, err := r.Claim(ctx, registry.Claim{Name: "web_1", Owner: "owner1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Claim(ctx, registry.Claim{Name: "web_2", Owner: "owner1"}); !errors.Is(err, injected) {
		t.Errorf("the hook's error: got %v", err)
	}
	if _, ok := r.Row("web_2"); ok {
		t.Errorf("a call failed by the hook made a row")
	}
	r.SetHook(nil)
	if _, err := r.List(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"claim web_1", "claim web_2"}; !slices.Equal(seen, want) {
		t.Errorf("hook saw %q, want %q", seen, want)
	}
}

func TestClockAndPlantedRows(t *testing.T) {
	r := registrytest.NewRegistry()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	r.SetClock(func() time.Time { return at })
	h, err := r.Claim(t.Context(), registry.Claim{Name: "web_1", Owner: "owner1"})
	if err != nil {
		t.Fatal(err)
	}
	if !h.LastSeen.Equal(at) || !h.RegisteredAt.Equal(at) {
		t.Errorf("times %v / %v, want the injected clock's %v", h.RegisteredAt, h.LastSeen, at)
	}
	r.Put(registry.Holder{Name: "a_partial"})
	rows, err := r.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Name != "a_partial" || rows[1].Name != "web_1" {
		t.Errorf("List: %+v, want the planted row and the claimed one, by name", rows)
	}
}

func TestInMemoryNumberRegistryConformance(t *testing.T) {
	registrytest.TestNumberRegistry(t, func(*testing.T) registry.NumberRegistry { return registrytest.NewRegistry() })
}
