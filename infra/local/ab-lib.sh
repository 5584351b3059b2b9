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
