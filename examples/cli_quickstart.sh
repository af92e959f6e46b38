#!/usr/bin/env bash
# The CLI end to end against a running server ($MTAWINDOWS_TARGET, default localhost:50051):
#   mtawindows serve &            # or: mtawindows serve --workers 3  (a local cluster)
#   bash examples/cli_quickstart.sh
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stream="orders_$$"

mtawindows streams create "$stream" --field amount:DOUBLE --field shop:STRING --key shop
mtawindows windows create "$stream" last_hour --agg n=count --agg total=sum:amount \
    --agg biggest=max:amount --policy time:1h --durable
cat > "$work/orders.csv" <<CSV
ts,amount,shop
2026-01-01T12:00:00Z,10.0,north
2026-01-01T12:20:00Z,15.5,south
2026-01-01T12:40:00Z,4.5,north
2026-01-01T13:30:00Z,8.0,north
CSV
mtawindows append "$stream" "$work/orders.csv"
mtawindows query "$stream" last_hour --key north     # 12:40 and 13:30: the 12:00 order left
mtawindows keys list "$stream"
mtawindows query "$stream" last_hour --key north --json --raw   # for scripts
mtawindows streams delete "$stream"
