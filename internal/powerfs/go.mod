module github.com/snapid/snapid/internal/powerfs

go 1.25.0

replace github.com/snapid/snapid => ../../

require github.com/hanwen/go-fuse/v2 v2.12.1

require (
	github.com/snapid/snapid v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.47.0
)

require (
	github.com/gofrs/flock v0.13.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
