# SPDX-License-Identifier: GPL-2.0
# Shared settings and helpers for the vhost-poll scripts. Sourced, not run.

KVER=6.12.117
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# CI may run with a bare environment: find the home directory if unset.
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME
CACHE=${VHOST_POLL_CACHE:-$HOME/.cache/vhost-poll}
# The kernel source: the tarball of Debian's linux-source-6.12 at the
# version the series is against, taken from that exact package version
# (scripts/setup), not from whatever /usr/src holds: Debian's security
# updates move the installed package on (6.12.118 replaced 6.12.117).
KDEB=linux-source-6.12
KDEB_VERSION=$KVER-1~deb12u1
KTARBALL=${KTARBALL:-$CACHE/linux-source-$KVER.tar.xz}
KSRC=$CACHE/linux-$KVER
TOOLS=$CACHE/tools
BINDGEN=$TOOLS/bin/bindgen
BINDGEN_VERSION=0.69.5

# Debian's rustc-web (1.96, with rust-src) must win over rustup's rustc,
# which has no rust-src and cannot build the kernel's core crate.
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$TOOLS/bin:$PATH

# Packages the build and the runner need, all from Debian 12.
APT_PACKAGES="rustc-web rust-web-src libstd-rust-web-dev
	rust-web-clippy rustfmt-web libclang-dev clang lld llvm flex bison
	libelf-dev dwarves cpio busybox-static qemu-system-x86 bc libssl-dev
	build-essential kmod python3 python3-ply python3-git python3-matplotlib rsync
	iperf3"

msg() { printf '%s: %s\n' "${PROG:-vhost-poll}" "$*" >&2; }
die() { msg "error: $*"; exit 1; }

# Map a runner environment to the kernel it boots.
env_kernel() {
	case $1 in
	uml|uml-tt) echo uml ;;
	qemu) echo x86_64 ;;
	qemu-kcsan) echo x86_64-kcsan ;;
	x86_64|x86_64-kcsan) echo "$1" ;;
	*) return 1 ;;
	esac
}

check_kernel_name() {
	case $1 in
	uml|x86_64|x86_64-kcsan) ;;
	*) die "unknown kernel '$1' (expected uml, x86_64 or x86_64-kcsan)" ;;
	esac
}

kernel_arch() { [ "$1" = uml ] && echo um || echo x86_64; }
kernel_builddir() { echo "$CACHE/build/$1"; }

# The kernel's modules, installed as a distribution would (modules_install,
# depmod): scripts/vm shows this directory to the guest as /lib/modules.
kernel_modroot() { echo "$(kernel_builddir "$1")/modroot"; }
kernel_moddir() { echo "$(kernel_modroot "$1")/lib/modules"; }

kernel_image() {
	local b
	b=$(kernel_builddir "$1")
	if [ "$1" = uml ]; then echo "$b/linux"; else echo "$b/arch/x86/boot/bzImage"; fi
}

# The patches of patches/series, in order, one path a line.
series_files() {
	local p
	[ -f "$TOP/patches/series" ] || return 0
	while read -r p; do
		case $p in ''|'#'*) continue ;; esac
		[ -f "$TOP/patches/$p" ] || die "patches/series names missing patch $p"
		echo "$TOP/patches/$p"
	done <"$TOP/patches/series"
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
	case $1 in
	uml) echo "$TOP/configs/common.config $TOP/configs/uml.config $TOP/configs/debug.config" ;;
	x86_64) echo "$KSRC/kernel/configs/kvm_guest.config $TOP/configs/common.config $TOP/configs/x86_64.config" ;;
	x86_64-kcsan) echo "$(kernel_fragments x86_64) $TOP/configs/kcsan.config" ;;
	esac
}

kernel_baseconfig() { [ "$1" = uml ] && echo defconfig || echo tinyconfig; }

# Everything a built kernel depends on: source version, patches,
# fragments, the toolchain.
kernel_key() {
	local f
	{
		echo "kernel $1 $KVER $(series_hash) $(kernel_baseconfig "$1")"
		for f in $(kernel_fragments "$1"); do
			case $f in "$KSRC"/*) echo "== ${f#"$KSRC"/}" ;; *) echo "== ${f#"$TOP"/}"; cat "$f" ;; esac
		done
		rustc --version 2>/dev/null
		clang --version 2>/dev/null | head -1
	} | sha256sum | cut -c1-16
}

kmake() {
	local k=$1
	shift
	make -C "$KSRC" O="$(kernel_builddir "$k")" ARCH="$(kernel_arch "$k")" \
		LLVM=1 BINDGEN="$BINDGEN" "$@"
}

# Build vhost_test.ko, the kernel's drivers/vhost/test.c (no Kconfig
# symbol builds it out of tree), for kernel $1 into directory $2; the
# log is $2/build.log.
build_vhost_test() {
	local k=$1 tdir=$2
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
