#!/bin/bash
# Run each unit test binary; print one total line the CI recognises.
set -u
pass=0; fail=0; bad=0
for t in "$@"; do
	out=$("$t" 2>&1); rc=$?
	echo "$out" | sed 's/^/  /'
	line=$(echo "$out" | grep -E '^[a-z0-9_-]+: [0-9]+ passed, [0-9]+ failed$' | tail -1)
	p=$(echo "$line" | sed -nE 's/.* ([0-9]+) passed.*/\1/p'); f=$(echo "$line" | sed -nE 's/.* ([0-9]+) failed/\1/p')
	pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
	if [ $rc -ne 0 ] || [ -z "$line" ]; then bad=$((bad + 1)); echo "  !! $t exited $rc"; fi
done
echo "unit: $pass passed, $fail failed"
[ $bad -eq 0 ] && [ $fail -eq 0 ]
