//go:build tools

// The upstream virtual-kubelet command (its mock provider at its own defaults) is the third Go
// agent of bench/: built from this module with
// `go build github.com/virtual-kubelet/virtual-kubelet/cmd/virtual-kubelet`.  This blank
// import (never compiled: the "tools" tag) keeps its dependencies in go.mod and go.sum.
package main

import _ "github.com/virtual-kubelet/virtual-kubelet/cmd/virtual-kubelet"
