#!/usr/bin/env bash
# compare.sh — gocl against OpenMPI allreduce (float sum), same sizes, one run.
#
# Usage: bench/compare.sh [repeats]        (default 3)
#   env: RANKS="2 4"  MINBYTES=4  MAXBYTES=64M  FACTOR=4
# Expects build/allreduce_perf and build/mpi_allreduce_perf; builds nothing.
#
# For every rank count the two benchmarks alternate (gocl, mpi, gocl, mpi,
# ...) so the slow drifts of a shared machine hit both alike. The table gives,
# per ranks and size, the median out-of-place time of each over the repeats
# and mpi/gocl (> 1 means gocl is faster).
#
# gocl is forced onto TCP between processes (no shared memory, no p2p): for
# now its only transport between processes. OpenMPI on one host uses its
# shared-memory transport (btl vader in 4.x, sm in 5.x), so its times are the
# bar for the later shared-memory transport issue.
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${1:-3}
ranks=${RANKS:-2 4}
# 4 B (one float) times powers of 4 reaches 64 MiB exactly.
args=(-b "${MINBYTES:-4}" -e "${MAXBYTES:-64M}" -f "${FACTOR:-4}" -c 1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # name file command...
  local name=$1 file=$2
  shift 2
  if ! "$@" >"$file" 2>&1; then
    echo "compare.sh: $name failed:" >&2
    cat "$file" >&2
    exit 1
  fi
}

for n in $ranks; do
  for r in $(seq "$repeats"); do
    run "gocl -n $n" "$out/gocl.$n.$r" \
      env GOCL_SHM_DISABLE=1 GOCL_P2P_DISABLE=1 build/allreduce_perf -n "$n" "${args[@]}"
    # Unbound, like gocl's processes; 4 ranks on 2 cores need --oversubscribe.
    run "mpi -np $n" "$out/mpi.$n.$r" \
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" build/mpi_allreduce_perf "${args[@]}"
  done
done

# Rows are the lines with 13 fields not starting with '#': $1 size, $6 time.
awk '
  function median(list,    v, n, i, j, x) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  FNR == 1 { np = split(FILENAME, p, "/"); split(p[np], f, "."); lib = f[1]; n = f[2] }
  $1 !~ /^#/ && NF == 13 {
    key = n SUBSEP $1
    if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
    t[lib, key] = t[lib, key] " " $6
  }
  END {
    printf "%5s %10s %14s %14s %9s\n", "ranks", "size(B)", "gocl_time(us)", "mpi_time(us)", "mpi/gocl"
    for (i = 1; i <= rows; i++) {
      split(order[i], k, SUBSEP)
      g = median(t["gocl", order[i]]); m = median(t["mpi", order[i]])
      printf "%5d %10d %14.2f %14.2f %9.2f\n", k[1], k[2], g, m, m / g
    }
  }
' $(for n in $ranks; do for r in $(seq "$repeats"); do echo "$out/gocl.$n.$r" "$out/mpi.$n.$r"; done; done)
