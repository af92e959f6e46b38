#!/bin/sh
# Form the compose file's Redis Cluster once: 3 primaries + 3 replicas (--cluster-replicas 1)
# out of the nodes in $REDIS_CLUSTER_NODES ("host:port ..."). Run by the one-shot
# `redis-cluster-init` service after every node is healthy; does nothing when the cluster is
# already formed (a second `docker compose up`). Every wait is bounded.
#
#   REDIS_CLUSTER_NODES   default "redis-1:6379 ... redis-6:6379"
#   REDIS_CLI             default valkey-cli (redis-cli works the same)
#   REDIS_CLUSTER_WAIT    seconds to wait for each node, default 60
set -eu

NODES="${REDIS_CLUSTER_NODES:-redis-1:6379 redis-2:6379 redis-3:6379 redis-4:6379 redis-5:6379 redis-6:6379}"
CLI="${REDIS_CLI:-valkey-cli}"
WAIT="${REDIS_CLUSTER_WAIT:-60}"

host_of() { echo "${1%:*}"; }
port_of() { echo "${1##*:}"; }
# ask NODE ARGS...: the CLI's answer from NODE (no carriage returns, errors dropped)
ask() { _n="$1"; shift; "$CLI" -h "$(host_of "$_n")" -p "$(port_of "$_n")" "$@" 2>/dev/null | tr -d '\r'; }

wait_until() {  # wait_until WHAT COMMAND...: run COMMAND every second, at most $WAIT times
    what="$1"; shift
    i=0
    until "$@"; do
        i=$((i + 1))
        if [ "$i" -ge "$WAIT" ]; then
            echo "redis-cluster-init: $what: not within ${WAIT}s" >&2
            exit 1
        fi
        sleep 1
    done
}

answers() { [ "$(ask "$1" ping)" = "PONG" ]; }
cluster_ok() { ask "$1" cluster info | grep -q '^cluster_state:ok$'; }
sees_all() { [ "$(ask "$1" cluster nodes | awk '$8 == "connected"' | wc -l)" -ge "$count" ]; }

count=0
for node in $NODES; do
    count=$((count + 1))
    wait_until "$node answering PING" answers "$node"
done

first="${NODES%% *}"
if cluster_ok "$first"; then
    echo "redis-cluster-init: the cluster is already formed"
    exit 0
fi

# CLUSTER MEET takes IP addresses, not names: resolve each node, IPv4 first (getent is in
# every Debian image)
addresses=""
for node in $NODES; do
    host="$(host_of "$node")"
    case "$host" in
        *[!0-9.]*)
            ip="$(getent ahostsv4 "$host" | awk '{ print $1; exit }')"
            [ -n "$ip" ] || ip="$(getent hosts "$host" | awk '{ print $1; exit }')"
            ;;
        *) ip="$host" ;;
    esac
    if [ -z "$ip" ]; then
        echo "redis-cluster-init: cannot resolve $host" >&2
        exit 1
    fi
    addresses="$addresses $ip:$(port_of "$node")"
done

echo "redis-cluster-init: creating the cluster on$addresses"
# shellcheck disable=SC2086  # one argument per address
"$CLI" --cluster create $addresses --cluster-replicas 1 --cluster-yes

for node in $NODES; do
    wait_until "$node reporting cluster_state:ok" cluster_ok "$node"
    wait_until "$node seeing all $count nodes" sees_all "$node"
done
echo "redis-cluster-init: the cluster is formed ($count nodes)"
