# SPDX-License-Identifier: GPL-2.0
# Shared settings and helpers for the vhost-poll scripts. Sourced, not run.

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# CI may run with a bare environment: find the home directory if unset.
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME
CACHE=${VHOST_POLL_CACHE:-$HOME/.cache/vhost-poll}

# The kernels the series is against, one "line" each: 6.12, the LTS
# Debian 13 runs (the default), and 7.3, the newest Debian packages.
# Each is the tarball of Debian's linux-source-X.Y at one exact package
# version (scripts/setup), not whatever /usr/src holds: Debian's updates
# move the installed package on (6.12.118 replaced 6.12.117). The pin is
# moved deliberately, here. A line's patches are patches/LINE/.
KLINES="6.12 7.3"
use_line() {
	case $1 in
	6.12)
		KVER=6.12.117 KDEB=linux-source-6.12 KDEB_VERSION=6.12.117-1~deb12u1
		# LLVM=1: clang is Debian 12's default, clang-14.
		KSUITE= KLLVM=14 KLLVM_ARG=1 KBINDGEN_VERSION=0.69.5 ;;
	7.3)
		# 7.x wants LLVM 15 or later: Debian 12's llvm-19.
		KVER=7.3.4 KDEB=linux-source-7.3 KDEB_VERSION=7.3.4-1~bpo13+1
		# And bindgen 0.71.1 or later.
		KSUITE=trixie-backports KLLVM=19 KLLVM_ARG=-19 KBINDGEN_VERSION=0.71.1 ;;
	*) die "unknown kernel line '$1' (expected one of: $KLINES)" ;;
	esac
	KLINE=$1
	KTARBALL=$CACHE/linux-source-$KVER.tar.xz
	KSRC=$CACHE/linux-$KVER
	PATCHES=$TOP/patches/$KLINE
	# Each line's clang, lld and llvm tools, and bindgen on the same
	# clang's libclang (bindgen takes the newest installed otherwise).
	export LIBCLANG_PATH=/usr/lib/llvm-$KLLVM/lib
	# Each line's bindgen-cli from crates.io (6.12's where it always was).
	BINDGEN=$TOOLS/bindgen-$KBINDGEN_VERSION/bin/bindgen
	[ "$KLINE" != 6.12 ] || BINDGEN=$TOOLS/bin/bindgen
	BINDGEN_VERSION=$KBINDGEN_VERSION
}

# A kernel's name is its kind, with "-7.3" for the 7.3 line: uml,
# x86_64 and x86_64-kcsan are 6.12's; uml-7.3 and x86_64-7.3 are 7.3's.
kernel_line() { case $1 in *-7.3) echo 7.3 ;; *) echo 6.12 ;; esac; }
kernel_kind() { echo "${1%-7.3}"; }
# Select kernel $1's line (KVER, KSRC, PATCHES and the rest).
use_kernel() { use_line "$(kernel_line "$1")"; }

TOOLS=$CACHE/tools

# Debian's rustc-web (1.96, with rust-src) must win over rustup's rustc,
# which has no rust-src and cannot build the kernel's core crate.
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$TOOLS/bin:$PATH

# Packages the build and the runner need, all from Debian 12.
APT_PACKAGES="rustc-web rust-web-src libstd-rust-web-dev
	rust-web-clippy rustfmt-web libclang-dev clang lld llvm flex bison
	libelf-dev dwarves cpio busybox-static qemu-system-x86 bc libssl-dev
	build-essential kmod python3 python3-ply python3-git python3-matplotlib rsync
	iperf3 clang-19 lld-19 llvm-19 libclang-19-dev python3-venv udev"

msg() { printf '%s: %s\n' "${PROG:-vhost-poll}" "$*" >&2; }
die() { msg "error: $*"; exit 1; }

use_line "${VHOST_POLL_LINE:-6.12}"

# Map a runner environment to the kernel it boots.
env_kernel() {
	case $1 in
	uml|uml-tt) echo uml ;;
	qemu) echo x86_64 ;;
	qemu-kcsan) echo x86_64-kcsan ;;
	qemu-builtin) echo x86_64-builtin ;;
	uml-7.3|uml-7.3-tt) echo uml-7.3 ;;
	qemu-7.3) echo x86_64-7.3 ;;
	x86_64|x86_64-kcsan|x86_64-builtin|x86_64-7.3) echo "$1" ;;
	*) return 1 ;;
	esac
}

check_kernel_name() {
	case $1 in
	uml|x86_64|x86_64-kcsan|x86_64-builtin|uml-7.3|x86_64-7.3) ;;
	*) die "unknown kernel '$1' (expected uml, x86_64, x86_64-kcsan, x86_64-builtin, uml-7.3 or x86_64-7.3)" ;;
	esac
}

kernel_arch() { [ "$(kernel_kind "$1")" = uml ] && echo um || echo x86_64; }

# git in the line's tree in the cache.
git_k() { git -C "$KSRC" -c user.name=vhost-poll -c user.email=vhost-poll@localhost "$@"; }

# Commit tree $2 on parent $3 with the author, date and message of patch
# $1 (scratch space in $4); print the commit.
patch_commit() {
	local info
	info=$(git mailinfo "$4/msg" "$4/diff" <"$1")
	GIT_AUTHOR_NAME=$(sed -n 's/^Author: //p' <<<"$info") \
	GIT_AUTHOR_EMAIL=$(sed -n 's/^Email: //p' <<<"$info") \
	GIT_AUTHOR_DATE=$(sed -n 's/^Date: //p' <<<"$info") \
	GIT_COMMITTER_DATE=$(sed -n 's/^Date: //p' <<<"$info") \
		git_k commit-tree "$2" -p "$3" \
		-m "$(sed -n 's/^Subject: //p' <<<"$info")" -F "$4/msg"
}

# The whole series (scripts/series) checked out: a worktree of the
# line's tree at branch vhost-poll-series, for what must build the
# module in the tree (x86_64-builtin, the ksft step).
series_tree() { echo "$CACHE/series-tree-$KVER"; }
sync_series_tree() {
	local wt
	wt=$(series_tree)
	"$TOP/scripts/series" "$KLINE" >&2 || die "make series failed"
	if [ ! -d "$wt" ]; then
		msg "checking out branch vhost-poll-series in $wt (once, about 1 min)"
		git -C "$KSRC" worktree prune
		git -C "$KSRC" worktree add -q --detach "$wt" vhost-poll-series
	fi
	git -C "$wt" checkout -q -f --detach vhost-poll-series
}

# The source tree kernel $1 is built from: the series' for the built-in
# module, else the tree with the kernel-side patches.
kernel_src() {
	use_kernel "$1"
	case $(kernel_kind "$1") in *-builtin) series_tree ;; *) echo "$KSRC" ;; esac
}
kernel_builddir() { echo "$CACHE/build/$1"; }

# The kernel's modules, installed as a distribution would (modules_install,
# depmod): scripts/vm shows this directory to the guest as /lib/modules.
kernel_modroot() { echo "$(kernel_builddir "$1")/modroot"; }
kernel_moddir() { echo "$(kernel_modroot "$1")/lib/modules"; }

kernel_image() {
	local b
	b=$(kernel_builddir "$1")
	if [ "$(kernel_kind "$1")" = uml ]; then echo "$b/linux"; else echo "$b/arch/x86/boot/bzImage"; fi
}

# The kernel-side patches of the line (patches/LINE/series), in order,
# one path a line. The module's and the selftests' patches are not
# there: scripts/series makes them from rust/ and selftests/.
series_files() {
	local p
	[ -f "$PATCHES/series" ] || return 0
	while read -r p; do
		case $p in ''|'#'*) continue ;; esac
		[ -f "$PATCHES/$p" ] || die "patches/$KLINE/series names missing patch $p"
		echo "$PATCHES/$p"
	done <"$PATCHES/series"
}

series_hash() {
	local f
	{
		echo "$KVER"
		for f in $(series_files); do
			echo "== $(basename "$f")"
			cat "$f"
		done
	} | sha256sum | cut -c1-16
}

# The fragments merged into kernel $1's config, in order.
kernel_fragments() {
	use_kernel "$1"
	case $(kernel_kind "$1") in
	uml) echo "$TOP/configs/common.config $TOP/configs/uml.config $TOP/configs/debug.config" ;;
	x86_64) echo "$KSRC/kernel/configs/kvm_guest.config $TOP/configs/common.config $TOP/configs/x86_64.config $TOP/configs/vng.config" ;;
	x86_64-kcsan) echo "$(kernel_fragments x86_64) $TOP/configs/kcsan.config" ;;
	x86_64-builtin) echo "$(kernel_fragments x86_64) $TOP/configs/builtin.config" ;;
	esac
}

kernel_baseconfig() { [ "$(kernel_kind "$1")" = uml ] && echo defconfig || echo tinyconfig; }

# Everything a built kernel depends on: source version, patches,
# fragments, the toolchain.
kernel_key() {
	local f
	use_kernel "$1"
	{
		echo "kernel $1 $KVER $(series_hash) $(kernel_baseconfig "$1")"
		# The module and its selftests too, for a kernel built from
		# the whole series (tools/ is not built).
		case $(kernel_kind "$1") in *-builtin)
			git -C "$(series_tree)" ls-tree HEAD | grep -v "	tools\$" ;;
		esac
		for f in $(kernel_fragments "$1"); do
			case $f in "$KSRC"/*) echo "== ${f#"$KSRC"/}" ;; *) echo "== ${f#"$TOP"/}"; cat "$f" ;; esac
		done
		rustc --version 2>/dev/null
		"clang-$KLLVM" --version 2>/dev/null | head -1
	} | sha256sum | cut -c1-16
}

kmake() {
	local k=$1
	shift
	use_kernel "$k"
	make -C "$(kernel_src "$k")" O="$(kernel_builddir "$k")" ARCH="$(kernel_arch "$k")" \
		LLVM="$KLLVM_ARG" BINDGEN="$BINDGEN" "$@"
}

# Build vhost_test.ko, the kernel's drivers/vhost/test.c (no Kconfig
# symbol builds it out of tree), for kernel $1 into directory $2; the
# log is $2/build.log.
build_vhost_test() {
	local k=$1 tdir=$2
	use_kernel "$k"
	mkdir -p "$tdir"
	ln -sfn "$KSRC/drivers/vhost/test.c" "$tdir/test.c"
	ln -sfn "$KSRC/drivers/vhost/test.h" "$tdir/test.h"
	printf '%s\n' 'obj-m := vhost_test.o' 'vhost_test-y := test.o' \
		'ccflags-y := -I$(srctree)/drivers/vhost' >"$tdir/Kbuild"
	kmake "$k" M="$tdir" modules >"$tdir/build.log" 2>&1 ||
		{ cat "$tdir/build.log" >&2; die "vhost_test.ko for $k did not build"; }
}

# Print elapsed time as 1m05s.
fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# virtme-ng (vng), the way kernel developers boot a kernel they built,
# from PyPI into a venv of the cache, at this version.
VNG_VERSION=1.42
VNG=$TOOLS/vng/bin/vng
vng_setup() {
	# The version, not just a working vng: a cache kept from another
	# version is replaced.
	[ "$("$VNG" --version 2>/dev/null)" = "virtme-ng $VNG_VERSION" ] && return 0
	msg "installing virtme-ng $VNG_VERSION from PyPI into $TOOLS/vng"
	rm -rf "$TOOLS/vng"
	python3 -m venv "$TOOLS/vng" || die "python3 -m venv failed (Debian's python3-venv)"
	"$TOOLS/vng/bin/pip" install -q "virtme-ng==$VNG_VERSION" ||
		die "pip install virtme-ng==$VNG_VERSION failed"
}

# Boot kernel build directory $1 with vng (TCG unless the CPU has vmx or
# svm; 2 CPUs, 1 GiB), run shell command $3 in it as root, within $2
# seconds; the directories after $3 writable in the guest, the first of
# them given. vng shows the host's root read-only and a fresh tmpfs on
# /tmp. Its console on stdout.
vng_run() {
	local kb=$1 secs=$2 cmd=$3 d accel=(--disable-kvm) rw=() sh
	shift 3
	[ $# -gt 0 ] || die "vng_run: no writable directory given"
	vng_setup
	grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ] && accel=()
	for d in "$@"; do rw+=(--rwdir "$d"); done
	# The command goes to the guest as a file, and the kernel command
	# line carries only "sh FILE": vng hands --exec to the guest's
	# /bin/sh through the command line, where redirections and long
	# paths have not always come through whole.
	sh=$1/vng-run.sh
	printf '%s\n' "$cmd" >"$sh"
	# vng wants a terminal for its console: script(1) gives it one.
	PATH=$TOOLS/vng/bin:$PATH timeout "$secs" script -qec "$(printf '%q ' "$VNG" --run "$kb" "${accel[@]}" \
		--cpus 2 --memory 1G "${rw[@]}" --exec "sh $(printf %q "$sh")")" /dev/null </dev/null | tr -d '\r'
	return "${PIPESTATUS[0]}"
}
