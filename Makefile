# SPDX-License-Identifier: GPL-2.0
# vhost-poll: the commands a developer and CI use. The module itself is
# built by kbuild from Kbuild (scripts/module does that per kernel).
#
# ENV selects the environment: uml, uml-tt or qemu (x86_64 also names
# the qemu kernel).

ENV ?= uml
KERNEL = $(if $(filter qemu x86_64,$(ENV)),x86_64,uml)

.PHONY: help setup kernel kdir module selftests series check check-full storms demo bench lint clean

help:
	@echo 'vhost-poll targets:'
	@echo '  make demo          build what is missing, boot UML, show the module working'
	@echo '  make check         host tests, the selftests in uml, uml-tt and qemu, the benchmark'"'"'s short pass'
	@echo '  make check-full    make check, plus the storms in uml'
	@echo '  make storms        the long storms (1000x each) and a 10-minute soak, debug kernel'
	@echo '  make bench         the benchmark in the x86_64 guest (QUICK=1: a short pass)'
	@echo '  make setup         install the toolchain (Debian packages, bindgen)'
	@echo '  make kernel ENV=   build the kernel for ENV (uml, qemu) if missing'
	@echo '  make kdir ENV=     print that kernel'"'"'s build directory'
	@echo '  make module ENV=   build vhost_poll.ko for ENV into build/KERNEL/rust/'
	@echo '  make selftests     build selftests/vhost_poll on the host'
	@echo '  make series        the whole series and a kernel tree, per kernel line (LINE=6.12 or 7.3; default both)'
	@echo '  make lint          rustfmt, clippy, the series made and checkpatch-clean'
	@echo '  make clean         remove build/ (the kernel cache stays: see README.md)'
	@echo 'Boot a shell command: scripts/vm ENV -- COMMAND (scripts/vm --help)'

setup:
	@scripts/setup

kernel:
	@scripts/kernel build $(KERNEL)

kdir:
	@scripts/kernel kdir $(KERNEL)

module:
	@scripts/module $(KERNEL)

selftests:
	@$(MAKE) -s -C selftests/vhost_poll

series:
	@scripts/series $(LINE)

check:
	@scripts/check

check-full:
	@scripts/check --full

storms:
	@scripts/storms $(if $(N),--n $(N)) $(if $(SOAK),--soak $(SOAK))

demo:
	@scripts/demo

bench:
	@scripts/bench $(if $(filter 1,$(QUICK)),--quick)

lint:
	@scripts/lint

clean:
	rm -rf build
	@$(MAKE) -s -C selftests/vhost_poll clean 2>/dev/null || true
	@$(MAKE) -s -C bench clean 2>/dev/null || true
