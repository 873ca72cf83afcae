# The Nomad ACL policy of vkgate's token: exactly the grants of the Nomad calls vkgate makes
# (translators/nomad/acl.py; tests/unit/translators/nomad/test_nomad_acl.py compares both ways).
#
#   nomad acl policy apply -description "vkgate" vkgate deploy/nomad/vkgate-policy.hcl
#   nomad acl token create -name vkgate -policy vkgate -type client
#
# One namespace block per Nomad namespace vkgate uses: backend.nomad.namespace ("default"
# here) and every name in backend.nomad.namespaces.

namespace "default" {
  capabilities = [
    "list-jobs",        # GET /v1/jobs: vkgate's jobs (the backstop list)
    "read-job",         # jobs, allocations, evaluations, allocation stats, the event stream
    "submit-job",       # register, stop and purge a pod's job
    "alloc-lifecycle",  # SIGKILL when a delete's grace is shorter than the kill timeout
    "read-fs",          # kubectl logs, and log file sizes (--tail with -f, --previous)
    "alloc-exec",       # kubectl exec
    "alloc-node-exec",  # kubectl exec into raw_exec tasks (no filesystem isolation)
    "csi-mount-volume", # register a job that claims a CSI volume (a PV with spec.csi)
  ]

  # Each job's own Variable, nomad/jobs/<job>: the pod's files and Secret env values, which
  # its tasks read with their workload identity (so they are not in the job spec).
  variables {
    path "nomad/jobs/*" {
      capabilities = [
        "write",   # PUT /v1/var/nomad/jobs/<job>: before registering, and on a content change
        "destroy", # DELETE /v1/var/nomad/jobs/<job>: when the job is purged
      ]
    }
  }
}

# GET /v1/nodes, /v1/node/:id: the virtual node's capacity, addresses and versions, and the
# HTTP address of the client agent a kubectl exec connects to.
node {
  policy = "read"
}

# POST /v1/jobs of a job that mounts a host volume (a PV annotated nomad.vkgate.io/host-volume):
# a read-write mount needs "write" on the volume's name.  "*" is any name; narrow it to the
# names your PVs use (e.g. host_volume "data-*"), one block per pattern.
host_volume "*" {
  policy = "write"
}
