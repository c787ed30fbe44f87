# bench/lib.sh: sourced by run.sh and cluster.sh. Makes a temp dir, builds
# latchd and latchd-bench into it ($tmp/latchd, $lb), and on exit kills
# every process whose pid the script appended to pids, then removes $tmp.
tmp=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building latchd and latchd-bench..." >&2
go build -o "$tmp/latchd" ./cmd/latchd
go build -o "$tmp/latchd-bench" ./cmd/latchd-bench
lb="$tmp/latchd-bench"
