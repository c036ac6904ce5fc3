module github.com/snapid/snapid

go 1.26.8

require (
	github.com/gofrs/flock v0.13.1
	golang.org/x/sys v0.49.0
)
