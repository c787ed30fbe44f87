# bench/etcd.sh: sourced by cluster.sh after lib.sh. start_etcd starts a
# three-node etcd cluster of real processes on loopback, its data in $tmp
# (the same disk as latchd's), and sets etcd_leader to the client address
# of its leader. It runs in the calling shell, so lib.sh's cleanup stops
# the processes it appends to pids.
start_etcd() {
	local i cluster="" urls=()
	declare -a cport pport
	for i in 1 2 3; do
		cport[$i]=$("$lb" freeport)
		pport[$i]=$("$lb" freeport)
		cluster+="${cluster:+,}e$i=http://127.0.0.1:${pport[$i]}"
	done
	for i in 1 2 3; do
		etcd --name "e$i" --data-dir "$tmp/e$i" --log-level error \
			--listen-client-urls "http://127.0.0.1:${cport[$i]}" \
			--advertise-client-urls "http://127.0.0.1:${cport[$i]}" \
			--listen-peer-urls "http://127.0.0.1:${pport[$i]}" \
			--initial-advertise-peer-urls "http://127.0.0.1:${pport[$i]}" \
			--initial-cluster "$cluster" --initial-cluster-state new >"$tmp/e$i.log" 2>&1 &
		pids+=($!)
		urls+=("127.0.0.1:${cport[$i]}")
	done
	local try status
	for try in $(seq 100); do
		for addr in "${urls[@]}"; do
			status=$(curl -s -m 1 -X POST "http://$addr/v3/maintenance/status" -d '{}' || true)
			# The member that leads reports its own id as the leader.
			if [[ $status =~ \"member_id\":\"([0-9]+)\" ]] && [[ $status == *"\"leader\":\"${BASH_REMATCH[1]}\""* ]]; then
				echo "etcd leader at $addr" >&2
				etcd_leader=$addr
				return 0
			fi
		done
		sleep 0.1
	done
	echo "etcd: no leader elected" >&2
	cat "$tmp"/e*.log >&2
	return 1
}
