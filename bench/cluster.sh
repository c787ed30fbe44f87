#!/usr/bin/env bash
# bench/cluster.sh: what `make bench-cluster` runs. Starts a three-node
# latchd cluster of real processes on loopback (raft log fdatasynced),
# finds the leader, runs the latchd-bench table against it and, with
# COMPARE=1, against a single node started beside it in the same sweep.
# With COMPARE_ETCD=1 it also starts a three-node etcd cluster on the same
# disk and drives its leader in the same sweep: each op is a Mutex
# Lock+Unlock over one lease per worker (etcd's v3lock service, reached
# through its JSON gateway). It installs nothing: etcd and curl must be on
# PATH (Debian: apt-get install etcd-server curl).
#
# Before the table it prints the disk's floor: one file appended and
# synced, and three at once (the three nodes here share one disk, and
# their syncs run at the same time); then the same into preallocated
# space, which is how the nodes' logs write. Each row shows the CPU the target's
# server processes and latchd-bench used: on a machine with few cores,
# the cores it kept busy say whether the CPU bounds the row.
#
# Environment:
#   WORKERS  worker counts  (default 1,10,100)
#   ROUNDS   ops per worker (default 1000)
#   MODE     lock|contended|sem|twophase (default lock)
#   COMPARE  1 = also a single-node latchd in the same sweep (default 1)
#   COMPARE_ETCD  1 = also a three-node etcd cluster (default 0)
#   BENCH_ARGS  extra flags for latchd-bench
set -euo pipefail

cd "$(dirname "$0")/.."
WORKERS=${WORKERS:-1,10,100}
ROUNDS=${ROUNDS:-1000}
MODE=${MODE:-lock}

if [ "${COMPARE_ETCD:-0}" = 1 ]; then
	for tool in etcd curl; do
		if ! command -v "$tool" >/dev/null; then
			echo "COMPARE_ETCD=1 needs $tool on PATH (Debian: apt-get install etcd-server curl)" >&2
			exit 1
		fi
	done
fi

# shellcheck source=bench/lib.sh
. bench/lib.sh

peers=""
declare -a ids clients rafts
for i in 1 2 3; do
	ids[$i]="n$i"
	clients[$i]=$("$lb" freeport)
	rafts[$i]=$("$lb" freeport)
	peers+="${peers:+,}n$i=127.0.0.1:${rafts[$i]}=127.0.0.1:${clients[$i]}"
done
for i in 1 2 3; do
	"$tmp/latchd" --host 127.0.0.1 --port "${clients[$i]}" --log-level error --raft-log-level off \
		--raft-dir "$tmp/n$i" --node-id "n$i" --raft-addr "127.0.0.1:${rafts[$i]}" \
		--bootstrap --cluster-peers "$peers" >"$tmp/n$i.log" 2>&1 &
	pids+=($!)
done
"$lb" wait "127.0.0.1:${clients[1]}" "127.0.0.1:${clients[2]}" "127.0.0.1:${clients[3]}"
cpu=(--cpu "cluster3=$(IFS=,; echo "${pids[*]}")")

if ! leader=$("$lb" leader "127.0.0.1:${clients[1]}" "127.0.0.1:${clients[2]}" "127.0.0.1:${clients[3]}"); then
	echo "no leader elected" >&2
	cat "$tmp"/n*.log >&2
	exit 1
fi
echo "leader at $leader" >&2

compare=()
if [ "${COMPARE:-1}" = 1 ]; then
	single=$("$lb" freeport)
	"$tmp/latchd" --host 127.0.0.1 --port "$single" --log-level error >"$tmp/single.log" 2>&1 &
	pids+=($!)
	"$lb" wait "127.0.0.1:$single"
	compare=(--compare "single=tcp://127.0.0.1:$single")
	cpu+=(--cpu "single=${pids[-1]}")
fi
if [ "${COMPARE_ETCD:-0}" = 1 ]; then
	# shellcheck source=bench/etcd.sh
	. bench/etcd.sh
	n=${#pids[@]}
	start_etcd
	compare+=(--compare "etcd3=etcd://$etcd_leader")
	cpu+=(--cpu "etcd3=$(IFS=,; echo "${pids[*]:n}")")
fi
"$lb" disk --dir "$tmp" --parallel 3 --prealloc >&2
# shellcheck disable=SC2086
"$lb" --addr "$leader" --name "cluster3" --workers "$WORKERS" --rounds "$ROUNDS" --mode "$MODE" \
	"${compare[@]}" "${cpu[@]}" --no-progress ${BENCH_ARGS:-}
