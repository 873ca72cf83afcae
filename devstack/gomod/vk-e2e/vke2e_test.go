// Package vke2e runs the upstream virtual-kubelet e2e suite (github.com/virtual-kubelet/
// virtual-kubelet/test/e2e) against any node. Parameters come from the environment so the
// compiled test binary needs no flags of its own (docs/design/upstream-e2e.md):
//
//	VKE2E_KUBECONFIG     absolute path (required)
//	VKE2E_NODE           node name (required)
//	VKE2E_NAMESPACE      default "vke2e"
//	VKE2E_WATCH_TIMEOUT  Go duration, default 3m
//	VKE2E_SKIP           comma-separated test method names to skip
package vke2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/test/e2e"
)

func TestVKE2E(t *testing.T) {
	kubeconfig := os.Getenv("VKE2E_KUBECONFIG")
	node := os.Getenv("VKE2E_NODE")
	if kubeconfig == "" || node == "" {
		t.Fatal("VKE2E_KUBECONFIG and VKE2E_NODE must be set")
	}
	namespace := os.Getenv("VKE2E_NAMESPACE")
	if namespace == "" {
		namespace = "vke2e"
	}
	timeout := 3 * time.Minute
	if v := os.Getenv("VKE2E_WATCH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("VKE2E_WATCH_TIMEOUT: %v", err)
		}
		timeout = d
	}
	skip := map[string]bool{}
	for _, name := range strings.Split(os.Getenv("VKE2E_SKIP"), ",") {
		if name = strings.TrimSpace(name); name != "" {
			skip[name] = true
		}
	}
	cfg := e2e.EndToEndTestSuiteConfig{
		Kubeconfig:     kubeconfig,
		Namespace:      namespace,
		NodeName:       node,
		WatchTimeout:   timeout,
		ShouldSkipTest: func(name string) bool { return skip[name] },
	}
	e2e.NewEndToEndTestSuite(cfg).Run(t)
}
