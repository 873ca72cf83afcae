package main

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// writeVerbs maps HTTP methods to the verbs of vkgate_api_writes_total (gateway/kube/client.py).
var writeVerbs = map[string]string{
	http.MethodPost:   "create",
	http.MethodPut:    "update",
	http.MethodPatch:  "patch",
	http.MethodDelete: "delete",
}

type writeKey struct{ verb, resource string }

// writeCounter counts every write request the client sends (retries included), by verb and
// resource[/subresource], as vkgate's own KubeClient does.
type writeCounter struct {
	mu     sync.Mutex
	counts map[writeKey]int64
}

func newWriteCounter() *writeCounter {
	return &writeCounter{counts: map[writeKey]int64{}}
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{next: rt, counts: c}
}

func (c *writeCounter) add(method, path string) {
	verb, ok := writeVerbs[method]
	if !ok {
		return
	}
	c.mu.Lock()
	c.counts[writeKey{verb, resourceOf(path)}]++
	c.mu.Unlock()
}

// exposition renders the counts in the Prometheus text format.
func (c *writeCounter) exposition() string {
	c.mu.Lock()
	keys := make([]writeKey, 0, len(c.counts))
	for k := range c.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].resource != keys[j].resource {
			return keys[i].resource < keys[j].resource
		}
		return keys[i].verb < keys[j].verb
	})
	var b strings.Builder
	b.WriteString("# HELP vkgate_api_writes_total Writes sent to the Kubernetes API\n")
	b.WriteString("# TYPE vkgate_api_writes_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "vkgate_api_writes_total{resource=%q,verb=%q} %d\n", k.resource, k.verb, c.counts[k])
	}
	c.mu.Unlock()
	return b.String()
}

type countingTransport struct {
	next   http.RoundTripper
	counts *writeCounter
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.counts.add(req.Method, req.URL.Path)
	return t.next.RoundTrip(req)
}

// resourceOf is gateway/kube/client.py resource_of: /api/v1/namespaces/ns/pods/p/status ->
// pods/status, /apis/coordination.k8s.io/v1/namespaces/ns/leases/n -> leases.
func resourceOf(path string) string {
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	switch {
	case len(parts) >= 1 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) >= 1 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch {
	case len(parts) == 0:
		return ""
	case len(parts) > 2:
		return parts[0] + "/" + parts[2]
	default:
		return parts[0]
	}
}
