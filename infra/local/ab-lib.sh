# Shared by the A/B scripts (sourced, not run). The caller declares
#   keys=(...)            the bench.json keys to compare
#   declare -A vals=()    filled with each side's values, space-separated
# ab_median: the median of the numbers on stdin.
ab_median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# ab_record SIDE JSON PREFIX: adds each key's value in the seqbench report
# JSON to vals[SIDE.key] and prints PREFIX followed by " key=value" for each.
ab_record() {
  local side=$1 json=$2 line=$3 k v
  for k in "${keys[@]}"; do
    v=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], 'nan'))" "$json" "$k")
    vals[$side.$k]+="$v "
    line+=" $k=$(printf '%.1f' "$v")"
  done
  echo "$line"
}

# ab_summary A B: each key's median on side A and on side B.
ab_summary() {
  local k x y
  echo "medians ($1 -> $2):"
  for k in "${keys[@]}"; do
    x=$(tr ' ' '\n' <<<"${vals[$1.$k]}" | grep . | ab_median)
    y=$(tr ' ' '\n' <<<"${vals[$2.$k]}" | grep . | ab_median)
    printf '  %-34s %10.1f -> %10.1f\n' "$k" "$x" "$y"
  done
}

# ab_restart ROOT "NAME=value ...": restarts the local stack
# (infra/local/stack.sh) with those variables set and loads its
# .data/local.env. The words are split on ';' when there is one (for values
# with spaces, e.g. "SEQFLOW_KAFKA_PROPS=a=1 b=2;"), else on spaces.
ab_restart() {
  local root=$1 env=$2 words=()
  if [[ $env == *";"* ]]; then
    IFS=';' read -ra words <<<"$env"
  else
    read -ra words <<<"$env"
  fi
  bash "$root/infra/local/stack.sh" down >/dev/null
  env "${words[@]}" bash "$root/infra/local/stack.sh" up >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$root/.data/local.env"
  set +a
}
