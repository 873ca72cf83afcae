package main

import (
	"context"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	logruslogger "github.com/virtual-kubelet/virtual-kubelet/log/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// unlimitedQueue is the library's default work-queue limiter
// (workqueue.DefaultTypedControllerRateLimiter: per-item exponential backoff from 5 ms to
// 1000 s, max'ed with a shared 10 qps / burst 100 token bucket) with the shared bucket lifted:
// a first enqueue waits the 5 ms base delay, retries still back off per item.
func unlimitedQueue() workqueue.TypedRateLimiter[any] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[any](5*time.Millisecond, 1000*time.Second),
		&workqueue.TypedBucketRateLimiter[any]{Limiter: rate.NewLimiter(rate.Inf, 0)},
	)
}

// runVKLib runs the virtual-kubelet v1.13 library the way nodeutil.NewNode wires it (pod and
// secret/configmap/service informers, an event broadcaster, a NodeController with a v1 Lease,
// the node marked Ready once the pod controller is), except that the pod controller's three
// queues are unlimited and there is no kubelet HTTP endpoint (nothing listens but /metrics).
func runVKLib(ctx context.Context, o options, client kubernetes.Interface, ready *atomic.Bool) error {
	logger := logrus.New()
	lvl, err := logrus.ParseLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger.SetLevel(lvl)
	log.L = logruslogger.FromLogrus(logrus.NewEntry(logger))
	ctx = log.WithLogger(ctx, log.L.WithField("node", o.node))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	podFactory := informers.NewSharedInformerFactoryWithOptions(client, time.Minute, podsOfNode(o.node))
	scmFactory := informers.NewSharedInformerFactoryWithOptions(client, time.Minute)
	podInformer := podFactory.Core().V1().Pods()

	eb := record.NewBroadcaster()
	defer eb.Shutdown()
	eb.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: client.CoreV1().Events(corev1.NamespaceAll)})
	recorder := eb.NewRecorder(scheme.Scheme, corev1.EventSource{Component: path.Join(o.node, "pod-controller")})

	provider := newMemoryProvider(o.startDelay)
	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:                            client.CoreV1(),
		EventRecorder:                        recorder,
		Provider:                             provider,
		PodInformer:                          podInformer,
		SecretInformer:                       scmFactory.Core().V1().Secrets(),
		ConfigMapInformer:                    scmFactory.Core().V1().ConfigMaps(),
		ServiceInformer:                      scmFactory.Core().V1().Services(),
		SyncPodsFromKubernetesRateLimiter:    unlimitedQueue(),
		DeletePodsFromKubernetesRateLimiter:  unlimitedQueue(),
		SyncPodStatusFromProviderRateLimiter: unlimitedQueue(),
	})
	if err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}

	nodeSpec := nodeObject(o.node)
	np := node.NewNaiveNodeProvider()
	nc, err := node.NewNodeController(np, nodeSpec, client.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(client.CoordinationV1().Leases(corev1.NamespaceNodeLease), node.DefaultLeaseDuration))
	if err != nil {
		return fmt.Errorf("node controller: %w", err)
	}

	podFactory.Start(ctx.Done())
	scmFactory.Start(ctx.Done())
	go pc.Run(ctx, o.workers) //nolint:errcheck // its error is read from pc.Err below
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-pc.Done():
		return fmt.Errorf("pod controller: %w", pc.Err())
	case <-pc.Ready():
	}
	go nc.Run(ctx) //nolint:errcheck // its error is read from nc.Err below
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-nc.Done():
		return fmt.Errorf("node controller: %w", nc.Err())
	case <-nc.Ready():
	}
	setNodeReady(nodeSpec)
	if err := np.UpdateStatus(ctx, nodeSpec); err != nil {
		return fmt.Errorf("marking the node Ready: %w", err)
	}
	ready.Store(true)
	select {
	case <-ctx.Done():
	case <-pc.Done():
		return fmt.Errorf("pod controller: %w", pc.Err())
	case <-nc.Done():
		return fmt.Errorf("node controller: %w", nc.Err())
	}
	cancel()
	<-pc.Done()
	<-nc.Done()
	return ctx.Err()
}

// podsOfNode is nodeutil.PodInformerFilter (not imported: package nodeutil pulls in
// k8s.io/apiserver for the kubelet endpoint's authentication, which vk-lib does not serve).
func podsOfNode(name string) informers.SharedInformerOption {
	return informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = "spec.nodeName=" + name
	})
}

// nodeObject is nodeutil.NewNode's default Node plus capacity for 10,000 pods.
func nodeObject(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10000"),
		corev1.ResourceMemory: resource.MustParse("10Ti"),
		corev1.ResourcePods:   resource.MustParse("10000"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"type":                   "virtual-kubelet",
				"kubernetes.io/role":     "agent",
				"kubernetes.io/hostname": name,
			},
		},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodePending,
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux",
				Architecture:    "amd64",
				KubeletVersion:  "v1.35.4-vk-v1.13.0-vkbench",
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse},
			},
		},
	}
}

// setNodeReady is nodeutil's: phase Running, condition Ready=True (KubeletReady).
func setNodeReady(n *corev1.Node) {
	n.Status.Phase = corev1.NodeRunning
	now := metav1.Now()
	for i, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		c.Message, c.Reason, c.Status = "Kubelet is ready", "KubeletReady", corev1.ConditionTrue
		c.LastHeartbeatTime, c.LastTransitionTime = now, now
		n.Status.Conditions[i] = c
	}
}

// memoryProvider is an in-memory node.PodLifecycleHandler + node.PodNotifier (the async path):
// CreatePod stores the pod and, after startDelay, marks it Running with its containers ready
// and notifies; DeletePod removes it and notifies it terminated (Succeeded, containers
// terminated), as the upstream mock provider does.  Safe for the controller's concurrent
// workers (the upstream mock provider's map is not).
type memoryProvider struct {
	delay  time.Duration
	mu     sync.Mutex
	pods   map[string]*corev1.Pod
	notify func(*corev1.Pod)
}

var (
	_ node.PodLifecycleHandler = (*memoryProvider)(nil)
	_ node.PodNotifier         = (*memoryProvider)(nil)
)

func newMemoryProvider(delay time.Duration) *memoryProvider {
	return &memoryProvider{delay: delay, pods: map[string]*corev1.Pod{}, notify: func(*corev1.Pod) {}}
}

func podKey(namespace, name string) string { return namespace + "/" + name }

func (p *memoryProvider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = f
	p.mu.Unlock()
}

func (p *memoryProvider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	stored := pod.DeepCopy()
	stored.Status.Phase = corev1.PodPending
	p.mu.Lock()
	p.pods[key] = stored
	p.mu.Unlock()
	uid := pod.UID
	start := func() { p.start(key, uid) }
	if p.delay > 0 {
		time.AfterFunc(p.delay, start)
	} else {
		start()
	}
	return nil
}

// start marks the pod Running (if it is still the same pod) and notifies the controller.
func (p *memoryProvider) start(key string, uid types.UID) {
	p.mu.Lock()
	pod, ok := p.pods[key]
	if !ok || pod.UID != uid || pod.Status.Phase != corev1.PodPending {
		p.mu.Unlock()
		return
	}
	now := metav1.Now()
	ip := podIP(string(pod.UID))
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		QOSClass:  corev1.PodQOSBestEffort,
	}
	for _, t := range conditions {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodConditionType(t), Status: corev1.ConditionTrue, LastTransitionTime: now,
		})
	}
	started := true
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ContainerID: fmt.Sprintf("vkbench://%s-%s", pod.UID, c.Name),
			Ready:       true,
			Started:     &started,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	out, notify := pod.DeepCopy(), p.notify
	p.mu.Unlock()
	notify(out)
}

func (p *memoryProvider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.pods[key]
	if !ok {
		return errdefs.NotFoundf("pod %s is not known to the provider", key)
	}
	updated := pod.DeepCopy()
	updated.Status = old.Status
	p.pods[key] = updated
	return nil
}

func (p *memoryProvider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	stored, ok := p.pods[key]
	if !ok {
		p.mu.Unlock()
		return errdefs.NotFoundf("pod %s is not known to the provider", key)
	}
	delete(p.pods, key)
	notify := p.notify
	p.mu.Unlock()

	out := pod.DeepCopy()
	out.Status = *stored.Status.DeepCopy()
	now := metav1.Now()
	out.Status.Phase = corev1.PodSucceeded
	out.Status.Reason = "ProviderPodDeleted"
	for i := range out.Status.ContainerStatuses {
		cs := &out.Status.ContainerStatuses[i]
		startedAt := now
		if cs.State.Running != nil {
			startedAt = cs.State.Running.StartedAt
		}
		cs.Ready = false
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "Completed", StartedAt: startedAt, FinishedAt: now,
		}}
	}
	for i := range out.Status.Conditions {
		if t := out.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
			out.Status.Conditions[i].Status = corev1.ConditionFalse
			out.Status.Conditions[i].LastTransitionTime = now
		}
	}
	notify(out)
	return nil
}

func (p *memoryProvider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[podKey(namespace, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not known to the provider", namespace, name)
	}
	return pod.DeepCopy(), nil
}

func (p *memoryProvider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

func (p *memoryProvider) GetPods(_ context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}
