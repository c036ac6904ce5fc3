package snapid_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "snapid-example-")
	if err != nil {
		log.Fatal(err)
	}

	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	for range 3 {
		id, err := g.UniqueID()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id)
	}
	// Output:
	// web_1-1
	// web_1-2
	// web_1-3
}

// A server hands out ids within a request's deadline: when the counter
// update (or, with a registry, an extension of the reserved mark) takes
// longer than the request may wait, the call returns the context's error
// instead of holding the request.
func ExampleGenerator_UniqueIDContext() {
	dir, err := os.MkdirTemp("", "snapid-example-")
	if err != nil {
		log.Fatal(err)
	}

	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_2", snapid.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	id, err := g.UniqueIDContext(ctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Println("no id in time; answer 503 and let the client retry")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(id)
	}
	// Output:
	// web_2-1
}

func ExampleGenerator_NextN() {
	dir, err := os.MkdirTemp("", "snapid-example-")
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "counter.u64")

	// Continue a counter whose next number is 100.
	if _, err := admin.Init(path, 100); err != nil {
		log.Fatal(err)
	}
	g, err := snapid.Open(path, "batch", snapid.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	first, err := g.NextN(3) // one counter update for three numbers
	if err != nil {
		log.Fatal(err)
	}
	for n := first; n < first+3; n++ {
		fmt.Println(snapid.ID{Name: g.Name(), Number: n})
	}
	last, _ := admin.ReadCounter(path)
	fmt.Println("last issued:", last)
	// Output:
	// batch-100
	// batch-101
	// batch-102
	// last issued: 102
}

func ExampleParseID() {
	id, err := snapid.ParseID("server_a-123")
	fmt.Println(id.Name, id.Number, err)

	for _, s := range []string{"server_a-0123", "server-a-1", "server_a-18446744073709551616"} {
		_, err := snapid.ParseID(s)
		fmt.Println(errors.Is(err, snapid.ErrInvalidID))
	}
	// Output:
	// server_a 123 <nil>
	// true
	// true
	// true
}

func ExampleValidateName() {
	fmt.Println(snapid.ValidateName("server_a"))
	err := snapid.ValidateName("Server-A")
	fmt.Println(errors.Is(err, snapid.ErrInvalidName))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// snapid: invalid node name "Server-A": byte 0 is 'S'; a node name must match ^[a-z_][a-z0-9_]{0,62}$ (lower-case ASCII letters, digits and _, 1 to 63 characters, not starting with a digit)
}

func ExampleNameFromHostname() {
	name, changed, err := snapid.NameFromHostname("Web-01.example.com")
	fmt.Println(name, err)
	fmt.Println(changed)

	name, changed, err = snapid.NameFromHostname("db_2")
	fmt.Printf("%s %q %v\n", name, changed, err)

	_, _, err = snapid.NameFromHostname("1st.example.com")
	fmt.Println(errors.Is(err, snapid.ErrInvalidName))
	// Output:
	// web_01 <nil>
	// host name "Web-01.example.com" became "web_01": cut at the first "." ("Web-01"), replaced "-" by "_", lower-cased
	// db_2 "" <nil>
	// true
}

func ExampleID_Compare() {
	var ids []snapid.ID
	for _, s := range []string{"a-10", "b-1", "a-9", "a-100"} {
		id, err := snapid.ParseID(s)
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, id)
	}
	slices.SortFunc(ids, snapid.ID.Compare)
	fmt.Println(ids)
	// Output:
	// [a-9 a-10 a-100 b-1]
}

func ExampleBlock() {
	dir, err := os.MkdirTemp("", "snapid-example-")
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "counter.u64")

	// Reserve 100 numbers per counter update and serve them from memory.
	g, err := snapid.Open(path, "fast", snapid.Config{Block: &snapid.Block{Size: 100}})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		id, err := g.UniqueID()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id)
	}
	if err := g.Close(); err != nil {
		log.Fatal(err)
	}
	// The unused rest of the block is a gap, never a repeat.
	last, _ := admin.ReadCounter(path)
	fmt.Println("last reserved:", last)
	// Output:
	// fast-1
	// fast-2
	// fast-3
	// last reserved: 100
}

// The decimal form, Snap!'s "<node number>.<number>": numbers ending in 0
// are skipped, so that no two ids are equal as decimals (5.1 and 5.10
// would be).
func ExampleDecimal() {
	dir, err := os.MkdirTemp("", "snapid-example-")
	if err != nil {
		log.Fatal(err)
	}

	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_3", snapid.Config{
		Form:       snapid.Decimal{NodeNumber: 5},
		BindingDir: filepath.Join(dir, "names"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	var ids []string
	for range 11 {
		id, err := g.UniqueID()
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, id)
	}
	fmt.Println(ids)
	// Output: [5.1 5.2 5.3 5.4 5.5 5.6 5.7 5.8 5.9 5.11 5.12]
}

// The striped form: one integer, number × stride + node number, appended
// to a reused buffer or returned as a uint64, allocating nothing.
func ExampleStriped() {
	dir, err := os.MkdirTemp("", "snapid-example-")
	if err != nil {
		log.Fatal(err)
	}

	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_4", snapid.Config{
		Form:       snapid.Striped{NodeNumber: 7, Stride: 1000, MaxID: snapid.MaxSafeInteger},
		BindingDir: filepath.Join(dir, "names"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	v, err := g.UniqueUint64()
	if err != nil {
		log.Fatal(err)
	}
	buf, err := g.AppendUniqueID(make([]byte, 0, 32))
	if err != nil {
		log.Fatal(err)
	}
	id, err := snapid.ParseID(string(buf))
	if err != nil {
		log.Fatal(err)
	}
	id, err = id.Unstripe(1000)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v, string(buf), id.Node, id.Number)
	// Output: 1007 2007 7 2
}
