// Command vkbench is the Go side of vkgate's pod-burst benchmark (bench/README.md): one
// binary, two agents, chosen with -mode.
//
//   - vk-lib: the Go virtual-kubelet v1.13 library (node.NewPodController and
//     node.NewNodeController) with an in-memory provider and the work-queue rate limiters
//     lifted (vklib.go);
//   - floor: a raw client-go floor, bench/ideal_kubelet.py written with client-go: one status
//     PATCH per pod and one final DELETE (floor.go).
//
// Both count every write their client sends and serve the counts as
// vkgate_api_writes_total{verb,resource} on a plain-HTTP /metrics (counting.go), the metric
// vkgate itself exposes, so the harness reads every agent the same way.  /healthz answers 200
// once pods bound to the node will be picked up.  See docs/design/control-plane.md,
// "Go virtual-kubelet".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type options struct {
	mode        string
	kubeconfig  string
	node        string
	metricsAddr string
	qps         float64
	burst       int
	workers     int
	startDelay  time.Duration
	logLevel    string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("vkbench", flag.ContinueOnError)
	fs.StringVar(&o.mode, "mode", "", "vk-lib or floor")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server")
	fs.StringVar(&o.node, "node", "", "node name to serve")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "loopback host:port for plain-HTTP /metrics and /healthz")
	fs.Float64Var(&o.qps, "qps", 1000, "client-go QPS")
	fs.IntVar(&o.burst, "burst", 2000, "client-go burst")
	fs.IntVar(&o.workers, "workers", 10, "workers per queue")
	fs.DurationVar(&o.startDelay, "start-delay", 50*time.Millisecond, "vk-lib: CreatePod -> Running delay of the in-memory provider")
	fs.StringVar(&o.logLevel, "log-level", "warn", "vk-lib: library log level (debug, info, warn, error)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.mode != "vk-lib" && o.mode != "floor":
		return o, fmt.Errorf("-mode: want vk-lib or floor, got %q", o.mode)
	case o.node == "":
		return o, errors.New("-node is required")
	case o.kubeconfig == "":
		return o, errors.New("-kubeconfig is required (or KUBECONFIG)")
	case o.qps <= 0 || o.burst < 1:
		return o, fmt.Errorf("-qps must be > 0 and -burst >= 1 (got %v/%d)", o.qps, o.burst)
	case o.workers < 1:
		return o, fmt.Errorf("-workers must be >= 1 (got %d)", o.workers)
	case o.startDelay < 0:
		return o, fmt.Errorf("-start-delay must be >= 0 (got %v)", o.startDelay)
	}
	if err := loopbackOnly(o.metricsAddr); err != nil {
		return o, err
	}
	return o, nil
}

// loopbackOnly refuses a metrics address that is not on 127.0.0.0/8 ("Loopback only",
// docs/design/control-plane.md).
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-metrics-addr %q: %v", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-metrics-addr %q: the host must be a loopback IP", addr)
	}
	return nil
}

// newClient builds a clientset with the given rate limit whose every write is counted.
func newClient(o options, counts *writeCounter) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.QPS = float32(o.qps)
	cfg.Burst = o.burst
	cfg.UserAgent = "vkbench/" + o.mode
	cfg.Wrap(counts.wrap)
	return kubernetes.NewForConfig(cfg)
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "vkbench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "vkbench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	counts := newWriteCounter()
	client, err := newClient(o, counts)
	if err != nil {
		return err
	}
	var ready atomic.Bool
	srv, err := serveMetrics(o.metricsAddr, counts, &ready)
	if err != nil {
		return err
	}
	defer srv.Close()

	switch o.mode {
	case "vk-lib":
		err = runVKLib(ctx, o, client, &ready)
	default:
		err = runFloor(ctx, o, client, &ready)
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func serveMetrics(addr string, counts *writeCounter, ready *atomic.Bool) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(counts.exposition()))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}
