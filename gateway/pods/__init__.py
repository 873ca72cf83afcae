"""The backend-agnostic pod lifecycle: work queue, decisions (``decide`` → a plan → ``act``),
env/volume resolution, PodStatus mapping and its one writer, the status manager (see
``controller.PodController`` and docs/design/pod-sync.md)."""
