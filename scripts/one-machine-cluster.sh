#!/usr/bin/env bash
# A Ray cluster on this machine alone, to try `--ray` (docs/tutorials/cluster.md): a head on loopback
# with a temp folder of its own, one tiny training through it, then this cluster stopped — only
# this one: `ray stop` would stop every Ray on the machine, other people's included.
#
#   scripts/one-machine-cluster.sh [HOME]    # HOME: the runs home (default ./runs)
set -euo pipefail

home=${1:-runs}
# A free port for the head; Ray picks free ones for the rest.
port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Ray's temp folder: its own, so that nothing (the address file `--ray auto` reads, the sockets)
# mixes with another cluster's; short, since Unix socket paths are limited to 107 bytes.
temp=$(mktemp -d /tmp/ray-XXXXXX)

# --node-ip-address 127.0.0.1: bind to loopback, not to the machine's network address.
# --block: the head stays in the foreground, and a SIGTERM to it stops the processes it started.
ray start --head --node-ip-address 127.0.0.1 --port "$port" --num-cpus 2 --temp-dir "$temp" \
    --include-dashboard false --disable-usage-stats --block > "$temp/head.log" 2>&1 &
head=$!
echo "Ray head at 127.0.0.1:$port (pid $head), temp folder $temp" >&2
stop() {
    kill -TERM "$head" 2>/dev/null || true
    wait "$head" 2>/dev/null || true
    rm -rf "$temp"
}
trap stop EXIT

for _ in $(seq 120); do  # the head writes the cluster's address once it is up
    grep -qs "$port" "$temp/ray_current_cluster" && break
    kill -0 "$head" 2>/dev/null || { cat "$temp/head.log" >&2; exit 1; }
    sleep 0.5
done

export RLRUN_RAY_ADDRESS=127.0.0.1:$port
rlrun train reinforce_cartpole --home "$home" --ray --frames 3k --sessions 2 \
    --set meta.eval_frequency=1k --set meta.num_eval_episodes=2
rlrun show latest --home "$home"
