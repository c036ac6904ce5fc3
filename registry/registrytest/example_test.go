package registrytest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
)

// A program's test opens its Generator on an in-memory registry instead of
// Cassandra, and sees how the name is registered.
func ExampleRegistry() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// The host's record of the name is kept in the example's directory
	// too, not in the machine's place (/var/lib/snapid/records).
	reg := registrytest.NewRegistry()
	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, ReserveStep: 100},
		BindingDir: filepath.Join(dir, "records"),
	})
	if err != nil {
		panic(err)
	}
	id, err := g.UniqueID()
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	row, _ := reg.Row("web_1")
	fmt.Println(row.State, row.Reserved)

	// The last process of the host returns the unused reservation at Close.
	if err := g.Close(); err != nil {
		panic(err)
	}
	row, _ = reg.Row("web_1")
	fmt.Println(row.State, row.Reserved)
	// Output:
	// web_1-1
	// active 100
	// active 1
}

// A second host asking for a name held by the first is refused.
func ExampleRegistry_nameTaken() {
	reg := registrytest.NewRegistry()
	dirA, _ := os.MkdirTemp("", "host_a")
	dirB, _ := os.MkdirTemp("", "host_b")
	defer os.RemoveAll(dirA)
	defer os.RemoveAll(dirB)

	// Each simulated host keeps its record of the name in a place of its
	// own, as two machines do.
	a, err := snapid.Open(filepath.Join(dirA, "counter.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg},
		BindingDir: filepath.Join(dirA, "records"),
	})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	_, err = snapid.Open(filepath.Join(dirB, "counter.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg},
		BindingDir: filepath.Join(dirB, "records"),
	})
	fmt.Println(errors.Is(err, snapid.ErrNameTaken))
	// Output: true
}
