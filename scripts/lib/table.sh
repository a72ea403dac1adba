# Sourced by the scripts that write reference tables. `table FOLDER NAME ARGS...` runs
# `$bin ARGS... --quiet --out FOLDER --name NAME` and writes FOLDER/NAME.md (the command, then the
# table and its summary line) beside the CSV and JSON the run writes itself (with provenance).
# Returns the run's exit code; the Markdown of a failed run keeps what it printed.
table() {
  local folder=$1 name=$2
  shift 2
  mkdir -p "$folder"
  local printed status=0
  printed=$(mktemp)
  "$bin" "$@" --quiet --out "$folder" --name "$name" >"$printed" || status=$?
  { echo "# $name"; echo; echo '```'; echo "vrambench $*"; echo '```'; echo
    grep -v '^wrote ' "$printed" || true; } >"$folder/$name.md"
  rm -f "$printed"
  echo "wrote $folder/$name.{md,csv,json}"
  return "$status"
}
