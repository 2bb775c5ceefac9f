#!/bin/sh
# macros.sh CC INCLUDE_DIR: every function-like kiln_ macro of kiln.h must
# take arguments that contain commas, such as compound literals
# (`kiln_cat(2, (kiln_tensor *[]){a, b}, 0)`): a macro that names its
# parameters splits them at such a comma ("macro passed 4 arguments, but
# takes just 3"). The test generates, from kiln.h itself, one call of every
# macro whose every argument is a compound literal of the parameter's type
# (`(double[]){(double){0}, (double){0}}[0]`) and compiles it; a macro without its `_at`
# function, or one that cannot take such arguments, fails it.
set -eu
cc=$1 inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The declarations, one per line, macros expanded (KILN_UNARY_ declares some).
"$cc" -E -P -I"$inc" "$inc/kiln.h" | tr '\n' ' ' | sed 's/;/;\n/g' > "$tmp/decls"
grep -o '^#define kiln_[A-Za-z0-9_]*(' "$inc/kiln.h" | sed 's/^#define //; s/($//' | sort -u > "$tmp/macros"
[ -s "$tmp/macros" ] || { echo "no kiln_ macros found in $inc/kiln.h"; exit 1; }
{
  echo '#include <kiln.h>'
  echo 'void kiln_macro_calls(void);'
  echo 'void kiln_macro_calls(void) {'
  while read -r m; do
    params=$(grep -o "[^A-Za-z0-9_]${m}_at *([^)]*)" "$tmp/decls" | head -n 1 | sed 's/^[^(]*(//; s/)$//')
    if [ -z "$params" ]; then
      echo "#error \"macro $m has no function ${m}_at in kiln.h\""
      continue
    fi
    # Each parameter after (const char *f, int l) becomes (T[]){(T){0}, (T){0}}[0].
    args=$(printf '%s\n' "$params" | awk -F',' '{
      out = ""
      for (i = 3; i <= NF; i++) {
        p = $i; gsub(/^ +| +$/, "", p)
        if (!match(p, /[A-Za-z_][A-Za-z0-9_]*$/) || RSTART == 1) { print "BAD:" p; exit }
        type = substr(p, 1, RSTART - 1); gsub(/ +$/, "", type)
        z = "(" type "){0}"
        out = out (i > 3 ? ", " : "") "(" type "[]){" z ", " z "}[0]"
      }
      print out
    }')
    case $args in BAD:*) echo "#error \"macro $m: cannot read parameter '${args#BAD:}'\""; continue ;; esac
    echo "  (void)$m($args);"
  done < "$tmp/macros"
  echo '}'
} > "$tmp/calls.c"
if ! "$cc" -std=c11 -Wall -Werror -fsyntax-only -I"$inc" "$tmp/calls.c" 2> "$tmp/errors"; then
  cat "$tmp/errors"
  echo "some kiln_ macros cannot take arguments with commas (generated calls: above)"
  exit 1
fi
echo "$(wc -l < "$tmp/macros") macros take compound-literal arguments"
