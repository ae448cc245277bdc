#!/usr/bin/env bash
# What TLS costs: nereid serving `simple` in plain text and with TLS on both
# endpoints (a throwaway CA and server certificate from openssl, RSA 2048),
# measured with perf_analyzer 2.51 over gRPC and HTTP(S) at c1 and c8, the
# two servers alternating for TLS_ROUNDS rounds. perf_analyzer keeps its
# connections, so this is the cost per request, not per handshake. Prints a
# markdown table for docs/benchmarks.md ("TLS").
#
#   benches/tls.sh     # after `make setup-test` and `make release`; needs openssl
#
# Environment: TLS_ROUNDS (2), TLS_REQUESTS (requests per window, 2000),
# NEREID_BIN (target/release/nereid).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${TLS_ROUNDS:-2}
requests=${TLS_REQUESTS:-2000}
nereid_bin=${NEREID_BIN:-target/release/nereid}
pa=$PWD/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=60 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=20
BENCH_TAG=tls
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir tls
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/ort-path.sh)}

pki=$work/pki
mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca \
  -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
  -keyout "$pki/server.key" -out "$pki/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$pki/san"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
  -CAcreateserial -days 1 -extfile "$pki/san" -out "$pki/server.pem" 2>/dev/null

tls_flags=()
for endpoint in http grpc; do
  tls_flags+=("--$endpoint-use-ssl=true" "--$endpoint-server-cert=$pki/server.pem"
    "--$endpoint-server-key=$pki/server.key")
done

# start MODE: a server in plain text or with TLS; sets pid, http, grpc.
start() {
  read -r http grpc metrics <<<"$(free_ports)"
  local extra=()
  [ "$1" = tls ] && extra=("${tls_flags[@]}")
  "$nereid_bin" --model-repository model_repository --http-port "$http" \
    --grpc-port "$grpc" --metrics-port "$metrics" --http-address 127.0.0.1 \
    --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 "${extra[@]}" \
    --backend-config=python,python-path="$PWD/.venv/bin/python" \
    >"$work/nereid-$1.log" 2>&1 &
  pid=$!
  if [ "$1" = tls ]; then
    wait_ready "$pid" "https://localhost:$http/v2/health/ready" "$work/nereid-$1.log" \
      "nereid (tls)" --cacert "$pki/ca.pem"
  else
    wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid-$1.log" "nereid (plain)"
  fi
}

# measure MODE PROTOCOL CONCURRENCY ROUND: one CSV line
# "mode,protocol,c,infer_per_s,p50_us,p99_us".
measure() {
  local mode=$1 protocol=$2 c=$3 round=$4 csv args
  csv=$work/$mode-$protocol-$c-$round.csv
  case "$mode/$protocol" in
    plain/http) args=(-u "127.0.0.1:$http") ;;
    plain/grpc) args=(-u "127.0.0.1:$grpc") ;;
    tls/http) args=(-u "https://localhost:$http" --ssl-https-ca-certificates-file "$pki/ca.pem"
      --ssl-https-verify-peer 1 --ssl-https-verify-host 2) ;;
    tls/grpc) args=(-u "localhost:$grpc" --ssl-grpc-use-ssl
      --ssl-grpc-root-certifications-file "$pki/ca.pem") ;;
  esac
  if timeout "$PA_TIMEOUT_S" "$pa" -m simple -i "$protocol" "${args[@]}" -b 1 \
    --concurrency-range "$c" --measurement-mode count_windows \
    --measurement-request-count "$requests" -s 50 -r 5 -f "$csv" >"$csv.log" 2>&1; then
    awk -F, -v m="$mode" -v p="$protocol" -v c="$c" '
      NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i }
      NR == 2 { printf "%s,%s,%s,%d,%d,%d\n", m, p, c, $col["Inferences/Second"],
                $col["p50 latency"], $col["p99 latency"] }' "$csv"
  else
    die "$mode $protocol c$c: perf_analyzer failed: $(tail -n 2 "$csv.log" | tr '\n' ' ')"
  fi
}

for ((round = 1; round <= rounds; round++)); do
  for mode in plain tls; do
    start "$mode"
    for protocol in grpc http; do
      for c in 1 8; do
        measure "$mode" "$protocol" "$c" "$round" >>"$work/results.csv"
      done
    done
    stop_server "$pid"
  done
done

echo "| protocol | concurrency | plain infer/s | TLS infer/s | TLS / plain | plain p50 µs | TLS p50 µs | plain p99 µs | TLS p99 µs |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
python3 - "$work/results.csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
def median(mode, protocol, c, column):
    return statistics.median(float(r[column]) for r in rows if r[:3] == [mode, protocol, c])
for protocol in ("grpc", "http"):
    for c in ("1", "8"):
        plain = [median("plain", protocol, c, i) for i in (3, 4, 5)]
        tls = [median("tls", protocol, c, i) for i in (3, 4, 5)]
        name = "gRPC" if protocol == "grpc" else "HTTP / HTTPS"
        print(f"| {name} | c{c} | {plain[0]:,.0f} | {tls[0]:,.0f} | {tls[0] / plain[0]:.2f} | "
              f"{plain[1]:,.0f} | {tls[1]:,.0f} | {plain[2]:,.0f} | {tls[2]:,.0f} |")
EOF
echo
echo "Medians of $rounds rounds, $requests requests per window; \`simple\`, release build."
