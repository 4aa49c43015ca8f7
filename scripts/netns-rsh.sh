#!/usr/bin/env bash
# Open MPI's rsh agent for the hosts of scripts/netns.sh (namespaces on this machine):
#
#   OMPI_MCA_plm_rsh_agent=/path/to/scripts/netns-rsh.sh mpirun --hostfile H ...
#   (or mpirun --mca plm_rsh_agent /path/to/scripts/netns-rsh.sh, or
#    scripts/mpi-cluster.sh start --rsh-agent /path/to/scripts/netns-rsh.sh ...)
#
# H lists netns.sh host names (e.g. `madfs-123-h0 slots=1`). Open MPI calls the agent like ssh:
# `AGENT [ssh options] HOST word...`; the words form one shell command line, which this runs
# with /bin/sh on HOST through `scripts/netns.sh exec` (HOST's network namespace and hostname,
# same file system, same user). ssh options before HOST are accepted and ignored. Run mpirun
# itself on one of the hosts (`scripts/netns.sh exec P-h3 mpirun ...`): the daemons it starts
# connect back to it, and the hosts reach nothing outside their namespaces.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;   # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 255; }
host="$1"; shift
exec "$here/netns.sh" exec "$host" /bin/sh -c "$*"
