#!/usr/bin/env bash
# What every CUDA kernel costs the hardware, as ptxas reports it: registers, stack frame, spills and
# static shared memory, one row per kernel. Fails (exit 1, naming each kernel) when a stack frame is
# above the limit or any kernel spills: a stack frame is local memory, which is slow.
#
#   scripts/kernel-resources.sh                  every kernels/cuda/*.cu for sm_90, limit 256 bytes
#   scripts/kernel-resources.sh --arch sm_80     another architecture
#   scripts/kernel-resources.sh --max-stack 0    a stricter limit
#   scripts/kernel-resources.sh kernels/cuda/attention_flash.cu   some files only
#
# Only device code is compiled (-cubin), with the build's device flags: a few seconds per file.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

arch=sm_90
max_stack=256
files=()
while (($#)); do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --max-stack) max_stack="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "kernel-resources: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
if ((${#files[@]} == 0)); then
  files=("$root"/kernels/cuda/*.cu)
fi
[[ "$max_stack" =~ ^[0-9]+$ ]] || { echo "kernel-resources: --max-stack takes a byte count, got '$max_stack'" >&2; exit 2; }

nvcc="${CUDACXX:-}"
if [ -z "$nvcc" ]; then
  if command -v nvcc >/dev/null 2>&1; then nvcc=nvcc; elif [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
fi
[ -n "$nvcc" ] || { echo "kernel-resources: no nvcc found (set CUDACXX)" >&2; exit 2; }
command -v c++filt >/dev/null 2>&1 || { echo "kernel-resources: c++filt (binutils) is needed" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Compile each file in the background, two at a time per core.
jobs_max=$(( $(nproc) * 2 ))
i=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "kernel-resources: no such file '$f'" >&2; exit 2; }
  (
    "$nvcc" -std=c++20 -O3 -DNDEBUG -DFMT_USE_CONSTEXPR=1 -I"$root/src" -I"$root/kernels" \
      -arch="$arch" -cubin \
      -Xptxas -v -o /dev/null "$f" >"$tmp/$i.log" 2>&1
    echo $? >"$tmp/$i.rc"
  ) &
  echo "$f" >"$tmp/$i.file"
  i=$((i + 1))
  while (($(jobs -r | wc -l) >= jobs_max)); do wait -n || true; done
done
wait

# One line per kernel: file, mangled name, registers, stack, spill stores, spill loads, smem.
: >"$tmp/rows"
for ((k = 0; k < i; k++)); do
  file="$(realpath --relative-to="$root" "$(cat "$tmp/$k.file")")"
  if [ "$(cat "$tmp/$k.rc")" != 0 ]; then
    cat "$tmp/$k.log" >&2
    echo "kernel-resources: $file does not compile" >&2
    exit 2
  fi
  awk -v file="$file" '
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2); entry[name] = 1 }
    /Function properties for/ { cur = $NF }
    /bytes stack frame/ && cur != "" { stack[cur] = $1; stores[cur] = $5; loads[cur] = $9 }
    /Used [0-9]+ registers/ && name != "" {
      match($0, /Used [0-9]+ registers/); r = substr($0, RSTART + 5, RLENGTH - 15)
      smem = 0; if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH - 11)
      regs[name] = r; shared[name] = smem
    }
    END { for (n in entry) print file "\t" n "\t" regs[n] "\t" stack[n] + 0 "\t" stores[n] + 0 "\t" loads[n] + 0 "\t" shared[n] + 0 }
  ' "$tmp/$k.log" >>"$tmp/rows"
done

# Demangle and shorten the names, then print an aligned Markdown table.
cut -f2 "$tmp/rows" | c++filt | sed -e 's/vrambench::cuda:://g' -e 's/(anonymous namespace):://g' \
  -e 's/__nv_bfloat16/bf16/g' -e 's/__half/f16/g' -e 's/ const\*/*/g' -e 's/long/i64/g' >"$tmp/names"
paste <(cut -f1 "$tmp/rows") "$tmp/names" <(cut -f3- "$tmp/rows") | sort -t$'\t' -k1,1 -k2,2 >"$tmp/table"

awk -F'\t' -v max_stack="$max_stack" -v arch="$arch" '
  function width(col, text) { if (length(text) > w[col]) w[col] = length(text) }
  function row(a, b, c, d, e, f, g) {
    printf "| %-*s | %-*s | %*s | %*s | %*s | %*s | %*s |\n", w[1], a, w[2], b, w[3], c, w[4], d, w[5], e, w[6], f, w[7], g
  }
  BEGIN {
    h[1] = "file"; h[2] = "kernel"; h[3] = "registers"; h[4] = "stack (B)"; h[5] = "spill stores (B)"
    h[6] = "spill loads (B)"; h[7] = "smem (B)"
    for (c = 1; c <= 7; c++) w[c] = length(h[c])
  }
  { n++; for (c = 1; c <= 7; c++) { cell[n, c] = $c; width(c, $c) } }
  END {
    row(h[1], h[2], h[3], h[4], h[5], h[6], h[7])
    printf "| %s | %s | %s: | %s: | %s: | %s: | %s: |\n", sep(w[1]), sep(w[2]), sep(w[3] - 1), sep(w[4] - 1), sep(w[5] - 1), sep(w[6] - 1), sep(w[7] - 1)
    bad = 0
    for (r = 1; r <= n; r++) {
      row(cell[r, 1], cell[r, 2], cell[r, 3], cell[r, 4], cell[r, 5], cell[r, 6], cell[r, 7])
      if (cell[r, 4] > max_stack || cell[r, 5] > 0 || cell[r, 6] > 0) { bad++; why[bad] = cell[r, 2] " (" cell[r, 1] "): " cell[r, 4] " B stack, " cell[r, 5] " B spill stores, " cell[r, 6] " B spill loads" }
    }
    printf "\n%d kernels for %s; stack limit %d B: ", n, arch, max_stack
    if (bad == 0) { print "every kernel within it, no spills"; exit 0 }
    print bad " over it or spilling:"
    for (b = 1; b <= bad; b++) print "  " why[b]
    exit 1
  }
  function sep(k,   s) { s = ""; while (k-- > 0) s = s "-"; return s }
' "$tmp/table"
