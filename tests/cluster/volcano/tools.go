//go:build tools

// Package tools pins the binary the rust-batch peers benchmark builds from this wrapper
// module (see ../build-peers.sh). It is never compiled: the blank import only keeps the
// package and its dependencies in go.mod/go.sum for `go mod tidy`.
package tools

import (
	_ "volcano.sh/volcano/cmd/scheduler"
)
