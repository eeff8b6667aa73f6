#!/usr/bin/env bash
# Hosts on one machine, for tests of live runs across hosts: each host is a
# Linux network namespace with its own address on a private bridge, its own
# host name (a UTS namespace), and an sshd that takes the key this script
# makes. The file system is shared, so the project's programs are at the
# same paths on every host.
#
#   tools/netns-cluster.sh up N [--slurm]
#                                    hosts node0..node{N-1} and master; with
#                                    --slurm also a Slurm cluster of them:
#                                    munged, slurmctld on master, a slurmd on
#                                    each node (partition "hosts")
#   tools/netns-cluster.sh down      kills everything in them, removes them
#   tools/netns-cluster.sh exec HOST COMMAND...
#                                    COMMAND on HOST (master, node3, ...)
#   tools/netns-cluster.sh address HOST
#   tools/netns-cluster.sh link HOST up|down
#                                    HOST's cable, pulled or put back
#
# Layout (NETNS_PREFIX, default "oobleck", names every part):
#   <prefix>-switch     a namespace holding the bridge; nothing runs there
#   <prefix>-master     10.213.0.1, where the master (and the tests) run
#   <prefix>-node<i>    10.213.0.(10+i), each with an sshd on port 22
# Each host resolves every host name through its own /etc/hosts
# (/etc/netns/<namespace>/hosts, which `ip netns exec` mounts over
# /etc/hosts), and the master's ssh client finds the key through its own
# /etc/ssh (/etc/netns/<prefix>-master/ssh). Nothing leaves the namespaces:
# the bridge has no port outside them, and the machine's own network and
# files outside /etc/netns/<prefix>-* and the state folder are untouched.
#
# Needs root, iproute2, util-linux's unshare and openssh-server (and
# slurm-wlm and munge for --slurm). `up` first removes whatever an earlier
# run left; `down` is safe to run at any time. State (keys, configurations,
# logs) in /run/<prefix>-netns; `exec` sets SLURM_CONF to its slurm.conf.
set -euo pipefail

prefix=${NETNS_PREFIX:-oobleck}
state=/run/$prefix-netns
subnet=10.213.0
switch=$prefix-switch

die() {
  echo "netns-cluster: $*" >&2
  exit 2
}

namespaces() { ip netns list 2>/dev/null | awk -v p="$prefix-" 'index($1, p) == 1 {print $1}'; }

address_of() {
  case "$1" in
    master) echo "$subnet.1" ;;
    node[0-9]*)
      local i=${1#node}
      [[ $i =~ ^[0-9]+$ ]] && ((10#$i < 240)) || die "no host $1"
      echo "$subnet.$((10 + 10#$i))"
      ;;
    *) die "no host $1 (expected master or node<i>)" ;;
  esac
}

down() {
  local ns pids
  for ns in $(namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null || true; fi
  done
  # munged lives outside the namespaces (its socket is a file).
  if [ -s "$state/munged.pid" ]; then kill -9 "$(cat "$state/munged.pid")" 2>/dev/null || true; fi
  # Killed processes leave their namespace once they are reaped.
  for _ in $(seq 50); do
    local left=""
    for ns in $(namespaces); do left+=$(ip netns pids "$ns" 2>/dev/null || true); done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for ns in $(namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf /etc/netns/"$prefix"-* "$state"
}

write_sshd_config() {  # host address
  cat > "$state/sshd-$1.conf" <<EOF
ListenAddress $2
Port 22
HostKey $state/host_key
AuthorizedKeysFile $state/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 200:30:400
MaxSessions 200
PidFile $state/sshd-$1.pid
LogLevel ERROR
EOF
}

write_slurm_config() {  # node count
  local count=$1 d=$state/slurm
  mkdir -p "$d/ctld"
  {
    cat <<EOF
ClusterName=$prefix
SlurmctldHost=master($(address_of master))
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$state/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/ctld
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/linear
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=2
EOF
    for i in $(seq 0 $((count - 1))); do
      echo "NodeName=node$i NodeAddr=$(address_of "node$i") CPUs=1 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=hosts Nodes=node[0-$((count - 1))] Default=YES MaxTime=INFINITE State=UP"
  } > "$state/slurm.conf"
  # slurmd opens a cgroup plugin whatever tracks processes; its autodetect
  # misses a v1 hierarchy under a tmpfs.
  local cgroup=cgroup/v1
  if [ -e /sys/fs/cgroup/cgroup.controllers ]; then cgroup=cgroup/v2; fi
  printf 'CgroupPlugin=%s\nCgroupMountpoint=/sys/fs/cgroup\n' "$cgroup" > "$state/cgroup.conf"
}

slurm_up() {  # node count
  local count=$1 idle=0
  for tool in munged slurmctld slurmd; do
    [ -x "/usr/sbin/$tool" ] || die "needs $tool: apt-get install slurm-wlm munge"
  done
  dd if=/dev/urandom of="$state/munge.key" bs=1024 count=1 status=none
  chmod 400 "$state/munge.key"
  /usr/sbin/munged --force --key-file="$state/munge.key" --socket="$state/munge.socket" \
    --pid-file="$state/munged.pid" --log-file="$state/munged.log" --seed-file="$state/munge.seed"
  write_slurm_config "$count"
  in_host master /usr/sbin/slurmctld -f "$state/slurm.conf" ||
    die "slurm: slurmctld did not start: $(tail -n 3 "$state/slurm/slurmctld.log" 2> /dev/null)"
  for i in $(seq 0 $((count - 1))); do
    in_host "node$i" /usr/sbin/slurmd -f "$state/slurm.conf" -N "node$i" ||
      die "slurm: the slurmd of node$i did not start: $(tail -n 3 "$state/slurm/slurmd-node$i.log" 2> /dev/null)"
  done
  # Every node answering before anyone allocates.
  for _ in $(seq 200); do
    idle=$(in_host master sinfo -h -N -t idle -o %N 2> /dev/null | sort -u | wc -l || true)
    [ "$idle" -eq "$count" ] && return 0
    sleep 0.1
  done
  die "slurm: only $idle of $count nodes idle: see $state/slurm/*.log"
}

up() {
  local count=$1
  [[ $count =~ ^[0-9]+$ ]] && ((count >= 1 && count <= 200)) || die "up: expected 1 to 200 hosts, got '$count'"
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
  command -v unshare > /dev/null || die "needs unshare (util-linux)"
  [ -x /usr/sbin/sshd ] || die "needs sshd: apt-get install openssh-server"
  down
  mkdir -p "$state" /run/sshd
  chmod 700 "$state"
  ssh-keygen -q -t ed25519 -N "" -C "$prefix-netns" -f "$state/id_ed25519"
  ssh-keygen -q -t ed25519 -N "" -C "$prefix-netns-host" -f "$state/host_key"
  cp "$state/id_ed25519.pub" "$state/authorized_keys"

  local hosts=(master)
  for i in $(seq 0 $((count - 1))); do hosts+=("node$i"); done
  {
    echo "127.0.0.1 localhost"
    for h in "${hosts[@]}"; do echo "$(address_of "$h") $h"; done
  } > "$state/hosts"

  ip netns add "$switch"
  ip -n "$switch" link set lo up
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  for h in "${hosts[@]}"; do
    local ns=$prefix-$h
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$switch" link add "s-$h" type veth peer name eth0 netns "$ns"
    ip -n "$switch" link set "s-$h" master br0 up
    ip -n "$ns" addr add "$(address_of "$h")/24" dev eth0
    ip -n "$ns" link set eth0 up
    mkdir -p "/etc/netns/$ns"
    cp "$state/hosts" "/etc/netns/$ns/hosts"
  done

  mkdir -p "/etc/netns/$prefix-master/ssh"
  cat > "/etc/netns/$prefix-master/ssh/ssh_config" <<EOF
Host *
  IdentityFile $state/id_ed25519
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
EOF
  for h in "${hosts[@]}"; do
    [ "$h" = master ] && continue
    write_sshd_config "$h" "$(address_of "$h")"
    in_host "$h" /usr/sbin/sshd -f "$state/sshd-$h.conf" -E "$state/sshd-$h.log"
  done
  # Every sshd answering before anyone connects.
  for h in "${hosts[@]}"; do
    [ "$h" = master ] && continue
    for _ in $(seq 100); do
      [ -s "$state/sshd-$h.pid" ] && break
      sleep 0.05
    done
    [ -s "$state/sshd-$h.pid" ] || die "the sshd of $h did not start: $(cat "$state/sshd-$h.log" 2>/dev/null)"
  done
  if [ "${2:-}" = --slurm ]; then slurm_up "$count"; fi
  echo "netns-cluster: master at $(address_of master), node0..node$((count - 1)) at $subnet.10..${2:+ (Slurm)}" >&2
}

# COMMAND in HOST's namespaces, under HOST's name (the words that do it).
in_host_words() {
  address_of "$1" > /dev/null
  ip netns list | awk '{print $1}' | grep -qx "$prefix-$1" || die "no host $1: run '$0 up N' first"
  words=(ip netns exec "$prefix-$1" env SLURM_CONF="$state/slurm.conf" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$@")
}
in_host() {
  in_host_words "$@"
  "${words[@]}"
}

case "${1:-}" in
  up)
    [ $# -le 3 ] && { [ $# -lt 3 ] || [ "$3" = --slurm ]; } || die "up: expected N [--slurm]"
    up "${2:-}" "${3:-}"
    ;;
  down) down ;;
  exec)
    [ $# -ge 3 ] || die "exec: expected HOST COMMAND..."
    shift
    in_host_words "$@"
    exec "${words[@]}"  # signals reach COMMAND itself
    ;;
  address) address_of "${2:-}" ;;
  link)
    [ $# -eq 3 ] && [[ $3 == up || $3 == down ]] || die "link: expected HOST up|down"
    address_of "$2" > /dev/null
    ip -n "$switch" link set "s-$2" "$3"
    ;;
  *) die "expected up N, down, exec HOST COMMAND..., address HOST or link HOST up|down" ;;
esac
