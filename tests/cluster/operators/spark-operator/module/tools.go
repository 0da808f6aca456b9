//go:build tools

// Package tools pins the Spark operator this wrapper module builds (see ../build.sh). It is
// never compiled: the blank import only keeps the operator and its dependencies in
// go.mod/go.sum for `go mod tidy`.
package tools

import (
	_ "github.com/kubeflow/spark-operator/v2/cmd/operator"
)
