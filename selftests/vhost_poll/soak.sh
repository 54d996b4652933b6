#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The soak: storm_test again and again for a while, then kmemleak's
# verdict on what all those runs left behind. Runs inside the guest.

usage() {
	cat <<USAGE
Usage: selftests/vhost_poll/soak.sh [--help] [SECONDS]

Runs storm_test (the program next to this script) repeatedly until
SECONDS (600 by default) have passed, with VHOST_POLL_STORM as set, or
20. A run fails if storm_test exits non-zero; its output is printed then,
and only then. Each run's "buffers checked" figures are summed.

Then kmemleak scans twice, 5 s apart, and any leak it reports is printed
(the first 40 lines). Without CONFIG_DEBUG_KMEMLEAK
(/sys/kernel/debug/kmemleak) the leak check is skipped.

Last line: "soak: R runs in S s, F failed, B buffers checked, L leaks".
Exits 0 only if no run failed and kmemleak found no leak.
USAGE
}

secs=600
case ${1:-} in
-h|--help) usage; exit 0 ;;
"") ;;
*[!0-9]*) usage >&2; exit 2 ;;
*) secs=$1 ;;
esac
if [ $# -gt 1 ]; then
	usage >&2
	exit 2
fi

here=$(dirname "$0")
prog=$here/storm_test
if [ ! -x "$prog" ]; then
	echo "soak: no $prog: build the selftests first" >&2
	exit 2
fi
VHOST_POLL_STORM=${VHOST_POLL_STORM:-20}
export VHOST_POLL_STORM

kmemleak=/sys/kernel/debug/kmemleak
leakcheck=1
if [ ! -e "$kmemleak" ]; then
	echo "soak: SKIP: no kmemleak (CONFIG_DEBUG_KMEMLEAK)"
	leakcheck=0
else
	# Forget what was reported before the soak, boot included.
	echo clear > "$kmemleak"
fi

out=$(mktemp "${TMPDIR:-/tmp}/soak.XXXXXX") || exit 2
trap 'rm -f "$out"' EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
runs=0 failed=0 buffers=0
echo "soak: storm_test for $secs s, VHOST_POLL_STORM=$VHOST_POLL_STORM"
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
	runs=$((runs + 1))
	"$prog" > "$out" 2>&1
	rc=$?
	# "... 20640 buffers checked, ...": the number before the words.
	# Summed by the shell, in 64 bits (awk's printf may stop at 2^31).
	n=0
	for v in $(sed -n 's/.*[^0-9]\([0-9][0-9]*\) buffers checked.*/\1/p' "$out"); do
		n=$((n + v))
	done
	buffers=$((buffers + n))
	if [ "$rc" -ne 0 ]; then
		failed=$((failed + 1))
		echo "soak: run $runs failed (exit $rc):"
		cat "$out"
	else
		echo "soak: run $runs passed, $n buffers checked, $(($(date +%s) - start)) s"
	fi
done
elapsed=$(($(date +%s) - start))

leaks=0
# A kmemleak that turned itself off (kmemleak=off, or out of memory for
# its own records) keeps its file, takes "clear" and refuses "scan".
if [ "$leakcheck" = 1 ] && ! echo scan > "$kmemleak" 2>/dev/null; then
	echo "soak: SKIP: kmemleak is off (see dmesg)"
	leakcheck=0
fi
if [ "$leakcheck" = 1 ]; then
	# An object is reported once a scan finds it unreferenced and old
	# enough (5 s): a second scan, a few seconds after the first.
	sleep 5
	echo scan > "$kmemleak"
	leaks=$(grep -c 'unreferenced object' "$kmemleak")
	leaks=${leaks:-0}
	if [ "$leaks" -gt 0 ]; then
		echo "soak: kmemleak reports $leaks objects:"
		head -n 40 "$kmemleak"
	fi
fi

# storm_test exits 0 when its storms skip (not root, no VHOST_POLL_KO):
# a soak that checked nothing says so.
if [ "$runs" -gt 0 ] && [ "$buffers" -eq 0 ]; then
	echo "soak: warning: no buffer checked: did every storm skip?"
fi
echo "soak: $runs runs in $elapsed s, $failed failed, $buffers buffers checked, $leaks leaks"
[ "$failed" -eq 0 ] && [ "$leaks" -eq 0 ]
