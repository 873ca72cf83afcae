#!/usr/bin/env bash
# The side-by-side comparison in docs/benchmarks.md, regenerated: every agent on one API server
# per run, N = 200, 1,000 and 10,000, then the same through a real Nomad (mock_driver) against
# the Nomad floor at N = 1,000 (a burst and 20 pods/s), then the plots.  About 45 minutes on
# 2 cores.  Run from the repository root, with the bench extra installed (pip install -e '.[bench]'):
#     bash bench/compare.sh              # everything
#     bash bench/compare.sh --no-nomad   # the simulated backend only (~35 min)
#     bash bench/compare.sh --nomad      # the Nomad comparison only (~16 min)
#     NOMAD_LARGE=1 bash bench/compare.sh --nomad   # and 2,000 and 5,000 pods through Nomad (+ ~60 min)
set -uo pipefail  # a run that reports errors (e.g. a timed-out agent) does not stop the rest
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/vkgate-bench}
mkdir -p "$OUT"
SIMULATED=1
NOMAD=1
case "${1:-}" in
  --no-nomad) NOMAD=0 ;;
  --nomad) SIMULATED=0 ;;
  "") ;;
  *) echo "usage: bash bench/compare.sh [--no-nomad | --nomad]" >&2; exit 2 ;;
esac
run() { "$PY" -m devstack.netns -- "$PY" -m bench.pods_burst "$@"; }
nomad() { "$PY" -m devstack.netns -- "$PY" -m bench.nomad_burst "$@"; }

if [ "$SIMULATED" = 1 ]; then
LIFTED=(--set kube.qps=1000 --set kube.burst=2000 --set kube.event_qps=1000 --set kube.event_burst=2000)

# Limits lifted: vkgate against the Go virtual-kubelet library and the client-go floor.
run --pods 200 --rounds 3 --agents go-floor,go-vk-lib,vkgate "${LIFTED[@]}" \
    --label lifted --json "$OUT/lifted-200.json" --section burst_lifted_200 --write-docs
run --pods 1000 --rounds 3 --agents go-floor,go-vk-lib,vkgate "${LIFTED[@]}" \
    --label lifted --json "$OUT/lifted-1000.json" --profile "$OUT" --section burst_lifted_1000 --write-docs
run --pods 10000 --rounds 1 --concurrency 100 --timeout 900 --agents go-floor,go-vk-lib,vkgate "${LIFTED[@]}" \
    --label lifted --json "$OUT/lifted-10000.json" --section burst_lifted_10000 --write-docs
# Every agent at its own defaults: vkgate against the Go virtual-kubelet command (5 QPS).
run --pods 200 --rounds 1 --agents go-vk-binary,vkgate \
    --label defaults --json "$OUT/defaults-200.json" --section burst_defaults_200 --write-docs
run --pods 1000 --rounds 1 --timeout 300 --idle 20 --agents go-vk-binary,vkgate \
    --label defaults --json "$OUT/defaults-1000.json" --section burst_defaults_1000 --write-docs
# Why vkgate's create phase is slower than the floor's with the limits lifted: its Events.
# The same burst with vkgate's Event budget at 0.1/s (they wait in the queue; not a setting
# anyone should use) shows what the API server's time for them costs.
run --pods 1000 --rounds 1 --agents go-floor,vkgate "${LIFTED[@]}" --set kube.event_qps=0.1 \
    --set kube.event_burst=1 --label events-held --section burst_lifted_1000_events_held --write-docs
fi

if [ "$NOMAD" = 1 ]; then
  # Through a real Nomad dev agent (mock_driver tasks) against the Nomad floor: a 1,000-pod
  # burst with 30 s of steady state and a py-spy profile, then 1,000 pods at 20 pods/s; a
  # 300-pod burst first (time to all Running against N).
  nomad --pods 300 --json "$OUT/nomad-300.json" --section nomad_burst_300 --write-docs
  nomad --pods 1000 --rate 20 --rate-pods 1000 --idle 30 --profile "$OUT" \
      --json "$OUT/nomad-1000.json" --section nomad_burst_1000 --write-docs
  # The same on the e2e cluster's topology: a server and two clients, ACLs (vkgate with the
  # shipped policy's token), mutual TLS.
  nomad --pods 1000 --rate 20 --rate-pods 1000 --idle 30 --cluster --label cluster \
      --json "$OUT/nomad-1000-cluster.json" --section nomad_burst_1000_cluster --write-docs
  if [ "${NOMAD_LARGE:-0}" = 1 ]; then
    # 2,000 and 5,000 with 60 s of steady state (5,000: ~15 min on a quiet machine; on the
    # cluster ~30 min)
    nomad --pods 2000 --idle 60 --timeout 900 --json "$OUT/nomad-2000.json" \
        --section nomad_burst_2000 --write-docs
    nomad --pods 5000 --idle 60 --timeout 900 --json "$OUT/nomad-5000.json" \
        --section nomad_burst_5000 --write-docs
    nomad --pods 5000 --idle 90 --timeout 1500 --cluster --label cluster \
        --json "$OUT/nomad-5000-cluster.json" --section nomad_burst_5000_cluster --write-docs
  fi
fi
"$PY" -m bench.plots "$OUT"/*.json --out docs/bench
