# Helpers shared by benches/run.sh and benches/batching.sh; sourced, not run.
#
# The caller sets BENCH_TAG (the log prefix) and STOP_TIMEOUT_S before using
# stop_server.

log() { printf '[%s] %s\n' "${BENCH_TAG:-bench}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The pid and every descendant of it, parents first.
process_tree() {
  local pid=$1 child
  [ -d "/proc/$pid" ] || return 0
  echo "$pid"
  for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
    process_tree "$child"
  done
}

# Stops a server and its children (Triton's python backend stubs): TERM,
# then KILL for whatever is left after STOP_TIMEOUT_S.
stop_server() {
  local pid=$1 tree i
  [ -n "$pid" ] || return 0
  tree=$(process_tree "$pid")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < ${STOP_TIMEOUT_S:-20} * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  for p in $tree; do kill -KILL "$p" 2>/dev/null || true; done
  wait "$pid" 2>/dev/null || true
}

# N free TCP ports on 127.0.0.1 (3 by default), space-separated.
free_ports() {
  python3 - "${1:-3}" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Percent of all CPU time that was busy over 2 s, while nothing of ours
# runs: other work on the machine skews every number, and the report says so.
background_busy_pct() {
  local a b
  a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  sleep 2
  b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  echo "$a $b" | awk '{ busy = $3 - $1; idle = $4 - $2; printf "%d\n", 100 * busy / (busy + idle + 1e-9) }'
}

# --- CPU accounting, in clock ticks ----------------------------------------
#
# To tell how much of the machine other work took while we measured: all
# busy ticks, minus the server's own, minus those of this shell's finished
# children (perf_analyzer, curl, raw_ort), over all ticks.

# "busy total" ticks of the whole machine since boot.
machine_ticks() {
  awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}

# user + system ticks of a process tree (every thread counted by its process).
tree_ticks() {
  local total=0 pid t
  for pid in $(process_tree "$1"); do
    # Fields after the ")" of the command name: utime and stime are 12 and 13.
    t=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }' || true)
    total=$((total + ${t:-0}))
  done
  echo "$total"
}

# user + system ticks of the script's children that have been waited for
# ($$, not $BASHPID: this runs inside command substitutions).
children_ticks() {
  sed 's/.*) //' "/proc/$$/stat" | awk '{ print $14 + $15 }'
}

# A snapshot for other_busy_pct: machine busy, machine total, server, children.
cpu_snapshot() {
  echo "$(machine_ticks) $(tree_ticks "${1:-0}") $(children_ticks)"
}

# key=value lines for a results .env from two snapshots: the share of the
# machine other processes took, and the ticks the server and our children
# (perf_analyzer) used, with the tick rate.
cpu_env() {
  echo "other_busy_pct=$(other_busy_pct "$1" "$2")"
  echo "$1 $2" | awk '{ print "server_ticks=" $7 - $3; print "children_ticks=" $8 - $4 }'
  echo "ticks_per_s=$(getconf CLK_TCK)"
}

# Percent of all CPU time between two snapshots that went to processes other
# than the server (pid given to both snapshots) and this shell's children.
other_busy_pct() {
  echo "$1 $2" | awk '{
    total = $6 - $2; ours = ($7 - $3) + ($8 - $4)
    other = ($5 - $1) - ours; if (other < 0) other = 0
    printf "%d\n", (total > 0) ? 100 * other / total : 0 }'
}

# --- server CPU per inference ----------------------------------------------

# Sum of inference_count over the versions of MODEL, from GET
# /v2/models/MODEL/stats on the HTTP PORT (nereid and Triton answer alike);
# "none" when that fails.
#   inference_count PORT MODEL
inference_count() {
  curl -sf "http://127.0.0.1:$1/v2/models/$2/stats" 2>/dev/null |
    python3 -c 'import json, sys
print(sum(int(v.get("inference_count", 0)) for v in json.load(sys.stdin)["model_stats"]))' \
      2>/dev/null || echo none
}

# "ticks inferences" of a server now: its process tree's user+system ticks and
# MODEL's inference count.
#   cpu_point PID PORT MODEL
cpu_point() {
  echo "$(tree_ticks "$1") $(inference_count "$2" "$3")"
}

# key=value lines for a results .cpu file from two cpu_points: the server's
# ticks and inferences in between, the tick rate and the CPU µs per
# inference; false when a count is missing or nothing was inferred.
cpu_env_per_inference() {
  echo "$1 $2" | awk -v hz="$(getconf CLK_TCK)" '
    $2 !~ /^[0-9]+$/ || $4 !~ /^[0-9]+$/ || $4 <= $2 { exit 1 }
    { ticks = $3 - $1; n = $4 - $2
      print "ticks=" ticks; print "inferences=" n; print "ticks_per_s=" hz
      printf "us_per_inference=%.1f\n", ticks * 1e6 / hz / n }'
}

# Waits until the server PID answers READY_URL with 200, failing with the
# tail of LOG when it exits or READY_TIMEOUT_S passes; logs how long it took.
# CURL_ARGS go to curl (for HTTPS, --cacert).
#   wait_ready PID READY_URL LOG NAME [CURL_ARGS...]     (sets READY_MS)
wait_ready() {
  local pid=$1 url=$2 logfile=$3 name=$4 t0
  shift 4
  t0=$(now_ms)
  until curl -sf -o /dev/null "$@" "$url"; do
    kill -0 "$pid" 2>/dev/null || { tail -n 30 "$logfile" >&2; die "$name exited"; }
    (($(now_ms) - t0 < READY_TIMEOUT_S * 1000)) || { tail -n 30 "$logfile" >&2; die "$name not ready"; }
    sleep 0.02
  done
  READY_MS=$(($(now_ms) - t0))
  log "$name ready in $READY_MS ms"
}

# Sets `work` to a new temporary folder and `pid` to empty, and at exit
# stops the server in `pid` and removes the folder: what a bench with one
# server at a time needs. $1 names the folder (nereid-$1.XXXXXX).
bench_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-$1.XXXXXX")
  pid=
  trap bench_cleanup EXIT
}

bench_cleanup() {
  local rc=$?
  stop_server "$pid"
  rm -rf "$work"
  exit "$rc"
}

# Exports ORT_DYLIB_PATH: the ONNX Runtime library in .venv (set up by
# scripts/setup-python.sh), or stops.
use_venv_onnxruntime() {
  ORT_DYLIB_PATH=$(scripts/ort-path.sh)
  [ -n "$ORT_DYLIB_PATH" ] || die "no libonnxruntime in .venv (scripts/setup-python.sh)"
  export ORT_DYLIB_PATH
}

# Builds the release nereid at $nereid_bin when it is not there.
build_nereid_if_missing() {
  if [ ! -x "$nereid_bin" ]; then
    log "building nereid (release)"
    cargo build --release --bin nereid
  fi
}

# Builds the raw_ort example at $raw_bin when it is not there.
build_raw_ort_if_missing() {
  if [ ! -x "$raw_bin" ]; then
    log "building raw_ort (release)"
    cargo build --release -p nereid-backend-onnx --example raw_ort
  fi
}
