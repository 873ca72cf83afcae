package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// conditions a real kubelet reports for a running pod (bench/ideal_kubelet.py CONDITIONS).
var conditions = []string{"PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}

// runningStatusPatch is bench/ideal_kubelet.py running_status: a strategic-merge status patch
// that takes the pod straight to Running and Ready, with the same fields and sizes.
func runningStatusPatch(pod *corev1.Pod) ([]byte, error) {
	now := time.Now().UTC().Format("2006-01-02T15:04:05Z")
	uid := string(pod.UID)
	ip := podIP(uid)
	conds := make([]map[string]any, 0, len(conditions))
	for _, t := range conditions {
		conds = append(conds, map[string]any{"type": t, "status": "True", "lastTransitionTime": now})
	}
	statuses := make([]map[string]any, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, map[string]any{
			"name":         c.Name,
			"image":        c.Image,
			"imageID":      "",
			"containerID":  fmt.Sprintf("ideal://%s-%s", uid, c.Name),
			"ready":        true,
			"started":      true,
			"restartCount": 0,
			"state":        map[string]any{"running": map[string]any{"startedAt": now}},
		})
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status": map[string]any{
			"phase":             "Running",
			"hostIP":            "127.0.0.1",
			"hostIPs":           []map[string]any{{"ip": "127.0.0.1"}},
			"podIP":             ip,
			"podIPs":            []map[string]any{{"ip": ip}},
			"startTime":         now,
			"qosClass":          "BestEffort",
			"conditions":        conds,
			"containerStatuses": statuses,
		},
	})
}

// podIP is bench/ideal_kubelet.py's made-up pod IP: 10.d0.d1.(d2 or 1) of sha256(uid).
func podIP(uid string) string {
	d := sha256.Sum256([]byte(uid))
	last := int(d[2])
	if last == 0 {
		last = 1
	}
	return fmt.Sprintf("10.%d.%d.%d", d[0], d[1], last)
}

// floor is bench/ideal_kubelet.py with client-go: an informer on the node's pods, a queue keyed
// by pod (latest object wins: the worker reads the informer's store), N workers; per pod one
// status PATCH to Running and, once it has a deletionTimestamp, one DELETE with grace 0 and a
// UID precondition.  No Node, no Lease, no Events, no retries beyond client-go's own.
type floor struct {
	client   kubernetes.Interface
	store    cache.Store
	queue    workqueue.TypedInterface[string]
	mu       sync.Mutex
	running  map[types.UID]bool // uids already patched to Running
	deleting map[types.UID]bool // uids whose final DELETE was sent
}

func runFloor(ctx context.Context, o options, client kubernetes.Interface, ready *atomic.Bool) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, podsOfNode(o.node))
	inf := factory.Core().V1().Pods().Informer()
	f := &floor{
		client:   client,
		store:    inf.GetStore(),
		queue:    workqueue.NewTyped[string](),
		running:  map[types.UID]bool{},
		deleting: map[types.UID]bool{},
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			f.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			for f.next(ctx) {
			}
		})
	}
	ready.Store(true)
	<-ctx.Done()
	f.queue.ShutDown()
	wg.Wait()
	factory.Shutdown()
	return ctx.Err()
}

func (f *floor) next(ctx context.Context) bool {
	key, quit := f.queue.Get()
	if quit {
		return false
	}
	defer f.queue.Done(key)
	obj, exists, err := f.store.GetByKey(key)
	if err != nil || !exists {
		return true
	}
	pod := obj.(*corev1.Pod)
	if err := f.sync(ctx, pod); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		fmt.Printf("vkbench floor: %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
	return true
}

// claim marks uid in set and reports whether it was new.
func (f *floor) claim(set map[types.UID]bool, uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if set[uid] {
		return false
	}
	set[uid] = true
	return true
}

func (f *floor) sync(ctx context.Context, pod *corev1.Pod) error {
	pods := f.client.CoreV1().Pods(pod.Namespace)
	if pod.DeletionTimestamp != nil {
		if !f.claim(f.deleting, pod.UID) {
			return nil
		}
		opts := *metav1.NewDeleteOptions(0)
		opts.Preconditions = metav1.NewUIDPreconditions(string(pod.UID))
		return pods.Delete(ctx, pod.Name, opts)
	}
	if !f.claim(f.running, pod.UID) {
		return nil
	}
	body, err := runningStatusPatch(pod)
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}
