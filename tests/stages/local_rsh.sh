#!/usr/bin/env bash
# A stand-in for ssh that makes one machine several hosts, for OpenMPI's rsh
# launcher (OMPI_MCA_plm_rsh_agent) and launch.sh's reachability check:
#
#   local_rsh.sh [ssh options] HOST COMMAND...
#
# runs COMMAND here, through a shell as ssh does, in its own UTS and mount
# namespaces with the host name HOST: mpirun's orted daemons then start
# "remotely", every rank's gethostname() is its host's name, and the MPI
# library sees one node per host (shared memory only within a host, TCP
# between hosts).  Needs root (unshare), as the tests run in CI.
#
# Broken hosts, for the launch error tests (space-separated lists):
#   LOCAL_RSH_DOWN="h ..."      refuse the connection, as ssh does (exit 255)
#   LOCAL_RSH_HANG="h ..."      never answer (a black-holed host)
#   LOCAL_RSH_HIDE="h:PATH ..." PATH is an empty non-executable file on host h
#                               (/dev/null bound over it in h's namespace)
#   LOCAL_RSH_LOG=FILE          append "HOST COMMAND" for every call
while [[ $# -gt 0 && $1 == -* ]]; do
  case "$1" in
    -o|-p|-l|-i|-F) shift 2 ;;  # ssh options with a value
    *) shift ;;
  esac
done
host=${1:?local_rsh.sh: no host}
shift
[ -n "${LOCAL_RSH_LOG:-}" ] && echo "$host $*" >> "$LOCAL_RSH_LOG"
case " ${LOCAL_RSH_DOWN:-} " in *" $host "*)
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255 ;;
esac
case " ${LOCAL_RSH_HANG:-} " in *" $host "*) exec sleep 3600 ;; esac
hide=""
for h in ${LOCAL_RSH_HIDE:-}; do
  [ "${h%%:*}" = "$host" ] && hide+="mount --bind /dev/null $(printf '%q' "${h#*:}") && "
done
exec unshare --mount --uts bash -c "hostname $(printf '%q' "$host") && $hide exec bash -c \"\$0\"" "$*"
