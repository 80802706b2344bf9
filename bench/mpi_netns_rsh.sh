#!/usr/bin/env bash
# Open MPI's "rsh agent" for the emulated cluster: mpirun calls it as `AGENT [opts] HOST CMD...`
# to start its daemon on HOST; HOST 10.77.0.(i+1) is namespace ${CERAR_MPI_NETNS_PREFIX}i on this
# machine, so instead of ssh we run CMD there with `ip netns exec`.
set -u
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options: none apply
host=${1:?host}; shift
last=${host##*.}
[[ $host == 10.77.0.* && $last =~ ^[0-9]+$ ]] || { echo "mpi_netns_rsh: unknown host $host" >&2; exit 1; }
# Every namespace shares this host's name and /tmp: without a session directory of its own, the
# daemons race on /tmp/ompi.HOST.UID and some fail to start ("ORTE_ERROR_LOG ... session_dir").
ns=${CERAR_MPI_NETNS_PREFIX:-cerar-ns}$((last - 1))
export OMPI_MCA_orte_tmpdir_base=/tmp/cerar-mpi-$ns
mkdir -p "$OMPI_MCA_orte_tmpdir_base"
exec ip netns exec "$ns" /bin/sh -c "$*"
