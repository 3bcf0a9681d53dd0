# Sourced by the process benchmarks (bench-cli-hit.sh, bench-process-start.sh, bench-header-hit.sh).
# batch_us command...: mean microseconds of one batch of $runs runs of the command.
batch_us() {
  local s e
  s=$(date +%s%N)
  for _ in $(seq "$runs"); do "$@" >/dev/null 2>&1; done
  e=$(date +%s%N)
  echo $(((e - s) / runs / 1000))
}
# median_of name: the median of the values recorded as "name|value" lines in $results.
median_of() {
  grep -F "$1|" "$results" | cut -d'|' -f2 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
# run_batches: $batches rounds, each running every command of "${names[@]}"
# (command lines in the associative array cmd) for one batch; appends the
# "name|mean" lines to $results.
run_batches() {
  local n
  for _ in $(seq "$batches"); do
    for n in "${names[@]}"; do
      # shellcheck disable=SC2086  # the command lines are split on purpose
      echo "$n|$(batch_us ${cmd[$n]})" >>"$results"
    done
  done
}
