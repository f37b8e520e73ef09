#!/usr/bin/env bash
# Prometheus's own tools as the judge of kquotad's and kquota-proxy's metrics: both servers are
# started on loopback with their metrics listeners, each /metrics is scraped as a text/plain
# scraper asks and given to `promtool check metrics` (any finding fails), /healthz and /readyz are
# checked, then the alert rules (check and unit tests) and the dashboard's PromQL.
#
#   deploy/check-metrics.sh            # builds both binaries (release) first
#   KQUOTA_BIN=target/release deploy/check-metrics.sh   # uses binaries already built there
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if ! command -v promtool >/dev/null; then
    echo "promtool missing: installing Debian's prometheus package" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get install -y prometheus >/dev/null || { $sudo apt-get update >/dev/null && $sudo apt-get install -y prometheus >/dev/null; } \
        || { echo "FAILED: cannot install promtool (apt-get install prometheus)" >&2; exit 1; }
    command -v promtool >/dev/null || { echo "FAILED: promtool still missing" >&2; exit 1; }
fi

bin=${KQUOTA_BIN:-}
if [ -z "$bin" ]; then
    cargo build --release -p kquotad -p kquota-proxy
    bin=target/release
fi

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits for http://$1$2 to answer at all.
wait_http() {
    for _ in $(seq 1 100); do
        curl -s -o /dev/null "http://$1$2" && return 0
        sleep 0.1
    done
    echo "FAILED: nothing answers on http://$1$2" >&2
    exit 1
}

kq_metrics=127.0.0.1:$(port)
kq_listen=127.0.0.1:$(port)
"$bin/kquotad" --listeners "PLAINTEXT://$kq_listen" --data-dir "$work/kquotad" \
    --metrics-listen "$kq_metrics" >"$work/kquotad.log" 2>&1 &
pids+=($!)
px_metrics=127.0.0.1:$(port)
# The proxy is ready only while its cluster can be reached: kquotad's listener stands for one.
"$bin/kquota-proxy" --listen "127.0.0.1:$(port)" --upstream "$kq_listen" --listen-base 127.0.0.1:0 \
    --data-dir "$work/proxy" --metrics-listen "$px_metrics" >"$work/proxy.log" 2>&1 &
pids+=($!)
# And one whose cluster nobody listens for: serving (/healthz), not ready (/readyz says why).
away_metrics=127.0.0.1:$(port)
away_upstream=127.0.0.1:$(port)
"$bin/kquota-proxy" --listen "127.0.0.1:$(port)" --upstream "$away_upstream" --listen-base 127.0.0.1:0 \
    --data-dir "$work/proxy-away" --metrics-listen "$away_metrics" >"$work/proxy-away.log" 2>&1 &
pids+=($!)

status=0
for target in "kquotad $kq_metrics" "kquota-proxy $px_metrics"; do
    set -- $target
    wait_http "$2" /healthz
    # Ready once kquotad serves and, for the proxy, its probe has reached it (every second).
    for _ in $(seq 1 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$2/readyz")" = 200 ] && break
        sleep 0.1
    done
    for check in "/healthz 200 ok" "/readyz 200 ready"; do
        set -- $target $check
        code=$(curl -s -o "$work/answer" -w '%{http_code}' "http://$2$3")
        body=$(cat "$work/answer")
        if [ "$code $body" != "$4 $5" ]; then
            echo "FAILED: $1 $3 answered '$code $body', not '$4 $5'" >&2
            status=1
        fi
    done
    set -- $target
    curl -sf -H 'Accept: text/plain' "http://$2/metrics" >"$work/$1.prom"
    echo "== promtool check metrics: $1 ($(grep -c '^# TYPE' "$work/$1.prom") families)"
    if ! findings=$(promtool check metrics <"$work/$1.prom" 2>&1) || [ -n "$findings" ]; then
        echo "$findings" >&2
        echo "FAILED: promtool found problems in $1's metrics" >&2
        status=1
    fi
done

wait_http "$away_metrics" /healthz
code=$(curl -s -o "$work/answer" -w '%{http_code}' "http://$away_metrics/readyz")
body=$(cat "$work/answer")
case "$code $body" in
"503 the cluster at $away_upstream cannot be reached: "*) echo "== kquota-proxy with its cluster away: /readyz $code $body" ;;
*)
    echo "FAILED: kquota-proxy with its cluster away answered /readyz '$code $body', not 503 naming $away_upstream" >&2
    status=1
    ;;
esac

echo "== promtool check rules / test rules"
promtool check rules deploy/prometheus/kquota-alerts.yml || status=1
(cd deploy/prometheus && promtool test rules kquota-alerts.test.yml) || status=1
echo "== dashboard PromQL"
deploy/grafana/check-dashboard.sh || status=1

[ "$status" -eq 0 ] && echo "check-metrics: OK" || echo "check-metrics: FAILED" >&2
exit "$status"
