//go:build tools

// Package tools pins the binaries the rust-batch control-plane test harness
// builds from this wrapper module (see ../build.sh). It is never compiled:
// the blank imports only keep the packages and their dependencies in
// go.mod/go.sum for `go mod tidy`.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
