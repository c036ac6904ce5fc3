package snapid_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/snapid/snapid"

// layers is the import rule: for every package of the module (by its
// directory, "." for the root), the packages of the module its non-test
// files may import. The registry interface sits at the bottom and imports
// nothing of the facade; registries (the in-memory one, Cassandra) depend
// on it alone; the facade composes the internal layers; operators' tools
// and the simulator sit on top. A package missing here fails the test:
// a new package states its place.
var layers = map[string][]string{
	"internal/nodename":     nil,
	"internal/clock":        nil,
	"internal/ctxsync":      nil,
	"internal/envvars":      nil,
	"internal/statefile":    nil,
	"internal/hoststate":    {"internal/errs", "internal/statefile"},
	"internal/errs":         {"registry", "internal/statefile"},
	"internal/counterfile":  {"internal/errs", "internal/statefile"},
	"internal/alloc":        {"internal/errs"},
	"internal/idform":       {"internal/errs", "internal/nodename", "registry"},
	"internal/leasefile":    {"internal/counterfile", "internal/errs", "registry"},
	"internal/claim":        {"internal/counterfile", "internal/idform", "internal/retry", "internal/ctxsync", "internal/errs", "internal/statefile", "internal/clock", "registry"},
	"internal/retry":        {"internal/errs", "internal/clock", "registry"},
	"internal/sequence":     {"internal/alloc", "internal/leasefile", "internal/retry", "internal/ctxsync", "internal/errs", "internal/clock", "registry"},
	"registry":              {"internal/nodename"},
	"registry/registrytest": {"registry"},
	"internal/cql":          {"registry"},
	"internal/simcql":       {"registry", "internal/cql", "cassandra"},
	"cassandra":             {"registry", "internal/cql", "internal/envvars"},
	"internal/engine":       {"registry", "internal/nodename", "internal/clock", "internal/statefile", "internal/hoststate", "internal/errs", "internal/counterfile", "internal/alloc", "internal/idform", "internal/leasefile", "internal/claim", "internal/retry", "internal/ctxsync", "internal/sequence"},
	".":                     {"internal/engine", "internal/errs", "internal/idform", "registry"},
	"prometheus":            {".", "registry"},
	"internal/cli":          {"internal/engine", "registry", "admin", "cassandra", "internal/statefile"},
	"admin":                 {"internal/engine", "registry", "internal/nodename"},
	"cmd/snapctl":           {"internal/cli"},
	"examples/cmsserver":    {".", "cassandra", "prometheus"},
	"internal/sim": {"internal/engine", "admin", "registry", "registry/registrytest", "internal/cli", "internal/clock",
		"internal/statefile", "internal/hoststate", "internal/cql", "internal/simcql"},
	// Tests' helpers and the docs' tests: the standard library and
	// drivers only.
	"internal/testcluster": nil,
	"internal/testfs":      nil,
	"internal/docdefaults": nil,
	"internal/docstest":    nil,
}

// nestedModules are the modules of their own inside this one, and the
// internal packages of this module each may import (besides its own): Go
// lets them import any, as their paths share this module's prefix.
var nestedModules = map[string][]string{
	"bench":            {"internal/testcluster"},
	"internal/powerfs": nil,
}

// TestImportRule checks every package's imports against layers, and that
// every import layers allows is made (the rule says no more than the
// code does).
func TestImportRule(t *testing.T) {
	seen := map[string]bool{}
	used := map[[2]string]bool{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		if p != "." {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		pkg, err := build.ImportDir(p, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		dir := filepath.ToSlash(p)
		seen[dir] = true
		allowed, ok := layers[dir]
		if !ok {
			t.Errorf("package %s is not in the import rule: add it to layers with the packages of the module it may import", dir)
			return nil
		}
		for _, imp := range pkg.Imports {
			var rel string
			switch {
			case imp == module:
				rel = "."
			case strings.HasPrefix(imp, module+"/"):
				rel = strings.TrimPrefix(imp, module+"/")
			default:
				continue
			}
			if !slices.Contains(allowed, rel) {
				t.Errorf("package %s imports %s, which the import rule does not allow (it may import %v)", dir, rel, allowed)
			}
			used[[2]string{dir, rel}] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, allowed := range layers {
		if !seen[dir] {
			t.Errorf("the import rule names %s, which is not a package of the module: remove it", dir)
			continue
		}
		for _, rel := range allowed {
			if !used[[2]string{dir, rel}] {
				t.Errorf("the import rule lets %s import %s, which it does not: remove it from layers", dir, rel)
			}
		}
	}
}

// TestNestedModulesImportNoInternals checks that the modules inside this
// one (tests included) import no internal package of this module but
// those nestedModules allow.
func TestNestedModulesImportNoInternals(t *testing.T) {
	for mod, allowed := range nestedModules {
		own := module + "/" + mod
		err := filepath.WalkDir(mod, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			pkg, err := build.ImportDir(p, 0)
			if _, none := err.(*build.NoGoError); none {
				return nil
			}
			if err != nil {
				t.Errorf("%s: %v", p, err)
				return nil
			}
			for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports, pkg.XTestImports) {
				rel, ok := strings.CutPrefix(imp, module+"/")
				if !ok || imp == own || strings.HasPrefix(imp, own+"/") || !strings.Contains("/"+rel+"/", "/internal/") {
					continue
				}
				if !slices.Contains(allowed, rel) {
					t.Errorf("%s (module %s) imports %s, an internal package of the module %s that nestedModules does not allow it", filepath.ToSlash(p), mod, rel, module)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
