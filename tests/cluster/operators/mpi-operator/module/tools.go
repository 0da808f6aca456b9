//go:build tools

// Package tools pins the MPI operator's main package in this wrapper module (see
// ../build.sh). It is never compiled: the blank import only keeps the package and its
// dependencies in go.mod/go.sum for `go mod tidy`.
package tools

import (
	_ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
)
