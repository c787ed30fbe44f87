#!/usr/bin/env bash
# bench/run.sh: what `make bench` runs. Builds latchd and latchd-bench,
# starts latchd and the ceiling responder (and redis-server, see REDIS) on
# free loopback ports, runs the same table against all of them in one sweep
# (rows alternate targets per worker count) with the latchd/other ratio,
# and stops everything it started.
#
# Environment:
#   WORKERS  worker counts        (default 1,10,50,100,200,500)
#   ROUNDS   ops per worker       (default 1000)
#   MODE     lock|contended|sem|twophase (default lock)
#   HOT_MODES  hot-key tables run after the main one (default contended,sem;
#            empty = none; the main MODE is not repeated): every worker on
#            one key, beside the ceiling answering the same requests
#   HOT_WORKERS  worker counts of the hot-key tables (default 10,200)
#   LIMIT    semaphore slots for --mode sem (default 4)
#   MUX      connections of latchd's tagged-mode rows (default 2; 0 = none):
#            the same workers sharing MUX connections through client.Mux
#   DFLOCKD  path to a dflockd binary: also start it and compare with it
#   REDIS    1 = compare with redis-server (fail if missing), 0 = never;
#            unset = compare when redis-server is on PATH
#   HTTP     1 = also run the table over latchd's REST API
#   BENCH_ARGS  extra flags for latchd-bench (e.g. "--plot bench.svg")
set -euo pipefail

cd "$(dirname "$0")/.."
WORKERS=${WORKERS:-1,10,50,100,200,500}
ROUNDS=${ROUNDS:-1000}
MODE=${MODE:-lock}
HOT_MODES=${HOT_MODES-contended,sem}
HOT_WORKERS=${HOT_WORKERS:-10,200}
LIMIT=${LIMIT:-4}
MUX=${MUX:-2}
mux_args=()
if [ "$MUX" != 0 ]; then mux_args=(--mux "$MUX"); fi

# shellcheck source=bench/lib.sh
. bench/lib.sh

port() { "$lb" freeport; }

latchd_port=$(port)
latchd_args=(--host 127.0.0.1 --port "$latchd_port" --log-level error)
wait_for=("127.0.0.1:$latchd_port")
if [ "${HTTP:-0}" = 1 ]; then
	http_port=$(port)
	latchd_args+=(--http-port "$http_port")
	wait_for+=("127.0.0.1:$http_port")
fi
"$tmp/latchd" "${latchd_args[@]}" >"$tmp/latchd.log" 2>&1 &
pids+=($!)

ceiling_port=$(port)
"$lb" ceiling --host 127.0.0.1 --port "$ceiling_port" >"$tmp/ceiling.log" 2>&1 &
pids+=($!)

compare=(--compare "ceiling=tcp://127.0.0.1:$ceiling_port")
hot_compare=("${compare[@]}")
wait_for+=("127.0.0.1:$ceiling_port")

if [ -n "${DFLOCKD:-}" ]; then
	dflockd_port=$(port)
	"$DFLOCKD" --host 127.0.0.1 --port "$dflockd_port" >"$tmp/dflockd.log" 2>&1 &
	pids+=($!)
	compare+=(--compare "dflockd=tcp://127.0.0.1:$dflockd_port")
	hot_compare+=(--compare "dflockd=tcp://127.0.0.1:$dflockd_port")
	wait_for+=("127.0.0.1:$dflockd_port")
fi

use_redis=${REDIS:-auto}
if [ "$use_redis" = auto ]; then
	if command -v redis-server >/dev/null; then use_redis=1; else use_redis=0; fi
fi
if [ "$use_redis" = 1 ]; then
	if ! command -v redis-server >/dev/null; then
		echo "REDIS=1 but redis-server is not on PATH (apt-get install redis-server)" >&2
		exit 1
	fi
	redis_port=$(port)
	redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
		--protected-mode yes --loglevel warning >"$tmp/redis.log" 2>&1 &
	pids+=($!)
	compare+=(--compare "redis=redis://127.0.0.1:$redis_port")
	wait_for+=("127.0.0.1:$redis_port")
fi

if ! "$lb" wait --timeout 15s "${wait_for[@]}"; then
	echo "a server did not start; logs:" >&2
	tail -n 20 "$tmp"/*.log >&2
	exit 1
fi

echo "## latchd-bench: mode $MODE, workers $WORKERS, $ROUNDS rounds ($(nproc) cores)"
echo
# shellcheck disable=SC2086 # BENCH_ARGS is split on purpose
"$lb" --addr "127.0.0.1:$latchd_port" --name latchd --mode "$MODE" --limit "$LIMIT" \
	--workers "$WORKERS" --rounds "$ROUNDS" "${mux_args[@]}" "${compare[@]}" ${BENCH_ARGS:-}

# The hot key: one key for every worker, the FIFO hand-off rate. Redis's
# classic lock has no queue (a waiter polls), so it sits these out.
for m in ${HOT_MODES//,/ }; do
	[ "$m" = "$MODE" ] && continue
	echo
	echo "## latchd-bench: mode $m (one key$([ "$m" = sem ] && echo ", limit $LIMIT")), workers $HOT_WORKERS, $ROUNDS rounds"
	echo
	# shellcheck disable=SC2086
	# A key per mode: a lock and a semaphore of one name would clash.
	"$lb" --addr "127.0.0.1:$latchd_port" --name latchd --mode "$m" --limit "$LIMIT" \
		--key-prefix "hot-$m" --workers "$HOT_WORKERS" --rounds "$ROUNDS" "${mux_args[@]}" "${hot_compare[@]}" ${BENCH_ARGS:-}
done

if [ "${HTTP:-0}" = 1 ]; then
	echo
	echo "## REST API (HTTP keep-alive, one session per worker)"
	echo
	# shellcheck disable=SC2086
	"$lb" --transport http --http-addr "127.0.0.1:$http_port" --name latchd-http \
		--mode "$MODE" --workers "$WORKERS" --rounds "$ROUNDS" ${BENCH_ARGS:-}
fi
