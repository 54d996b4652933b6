# SPDX-License-Identifier: GPL-2.0
# The machinery of the series' generated patches (scripts/module-patch,
# scripts/selftests-patch): a patch made from this repository's sources
# against v$KVER with the patches before it applied, in a scratch
# repository, with fixed author, dates and commit id, so that the same
# sources give the same patch, byte for byte, on any machine. Sourced
# after lib.sh, not run.
#
#   gp_begin GLOB [BEFORE_GLOB]  the patch is patches/NNNN-GLOB; it goes
#                                before the entry BEFORE_GLOB in
#                                patches/series if it is not listed yet
#   gp_add PATH FILE MODE        put FILE at PATH in the patch's tree
#   gp_edit PATH SED_SCRIPT      edit PATH of the tree with sed
#   gp_has PATH                  whether the tree before the patch has PATH
#   gp_finish MSG_FILE CHECK     commit; with CHECK=1 compare, else write

GP_AUTHOR_NAME="vhost-poll developers"
GP_AUTHOR_EMAIL="dev@vhost-poll.invalid"
# Fixed, so that the patch is a function of its sources alone.
GP_DATE="Mon, 30 Nov 2026 02:10:18 +0000"

gp_begin() {
	local p listed=0
	GP_GLOB=$1
	GP_BEFORE=${2:-}
	[ -d "$KSRC/.git" ] && git -C "$KSRC" rev-parse -q --verify "v$KVER^{tree}" >/dev/null \
		|| die "no v$KVER in $KSRC: run scripts/kernel build uml first"
	GP_TMP=$(mktemp -d)
	# shellcheck disable=SC2064 # the path is fixed now
	trap "rm -rf '$GP_TMP'" EXIT

	# No user or system configuration: the output must not depend on
	# who runs this. The scratch repository borrows the kernel tree's
	# objects; what it writes stays in it.
	export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
	unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY \
		GIT_ALTERNATE_OBJECT_DIRECTORIES
	export GIT_AUTHOR_NAME=$GP_AUTHOR_NAME GIT_AUTHOR_EMAIL=$GP_AUTHOR_EMAIL
	export GIT_AUTHOR_DATE=$GP_DATE GIT_COMMITTER_DATE=$GP_DATE
	export GIT_COMMITTER_NAME=$GP_AUTHOR_NAME GIT_COMMITTER_EMAIL=$GP_AUTHOR_EMAIL
	git init -q --bare "$GP_TMP/git"
	git -C "$KSRC" rev-parse --path-format=absolute --git-path objects \
		>"$GP_TMP/git/objects/info/alternates"

	# The series before this patch: the entries before its own, or,
	# if it is not listed yet, before BEFORE_GLOB's.
	if [ -f "$TOP/patches/series" ]; then
		while read -r p; do
			# shellcheck disable=SC2254 # the globs are patterns
			case $p in $GP_GLOB) listed=1 ;; esac
		done <"$TOP/patches/series"
	fi
	GP_BASE=()
	while read -r p; do
		# shellcheck disable=SC2254
		case $p in
		''|'#'*) continue ;;
		$GP_GLOB) break ;;
		esac
		if [ $listed = 0 ] && [ -n "$GP_BEFORE" ]; then
			# shellcheck disable=SC2254
			case $p in $GP_BEFORE) break ;; esac
		fi
		GP_BASE+=("$p")
	done < <(cat "$TOP/patches/series" 2>/dev/null || true)
	GP_NUMBER=$((${#GP_BASE[@]} + 1))
	GP_LISTED=$listed

	gp_git read-tree "$(git -C "$KSRC" rev-parse "v$KVER^{tree}")"
	for p in "${GP_BASE[@]}"; do
		[ -f "$TOP/patches/$p" ] || die "patches/series names missing patch $p"
		gp_git apply --cached "$TOP/patches/$p" || die "$p does not apply to v$KVER"
	done
	GP_PARENT=$(gp_git commit-tree "$(gp_git write-tree)" \
		-m "Linux $KVER with patches 0001-$(printf %04d $((GP_NUMBER - 1)))")
}

gp_git() { GIT_INDEX_FILE=$GP_TMP/index git --git-dir="$GP_TMP/git" "$@"; }

gp_has() { gp_git ls-files --error-unmatch "$1" >/dev/null 2>&1; }

gp_add() {
	local blob
	blob=$(gp_git hash-object -w --no-filters "$2")
	gp_git update-index --add --cacheinfo "$3,$blob,$1"
}

gp_edit() {
	local mode blob
	gp_has "$1" || die "the tree has no $1 to edit"
	gp_git cat-file blob ":$1" >"$GP_TMP/edit"
	sed "$2" "$GP_TMP/edit" >"$GP_TMP/edit.new"
	! cmp -s "$GP_TMP/edit" "$GP_TMP/edit.new" || die "$1: the edit changed nothing"
	mode=$(gp_git ls-files -s "$1" | cut -d' ' -f1)
	blob=$(gp_git hash-object -w --no-filters "$GP_TMP/edit.new")
	gp_git update-index --cacheinfo "$mode,$blob,$1"
}

gp_finish() {
	local msgfile=$1 check=$2 commit out name patch bad=0 f total
	commit=$(gp_git commit-tree "$(gp_git write-tree)" -p "$GP_PARENT" -F "$msgfile")
	mkdir "$GP_TMP/out"
	gp_git -c core.abbrev=12 format-patch -q --zero-commit --no-signature --numbered \
		--start-number "$GP_NUMBER" -o "$GP_TMP/out" -1 "$commit"
	out=$(echo "$GP_TMP"/out/*.patch)
	[ -f "$out" ] || die "git format-patch wrote no patch"
	# Numbered in the whole series, as scripts/cover-letter numbers the
	# others: [PATCH i/n].
	total=$(grep -cv -e '^#' -e '^$' "$TOP/patches/series" 2>/dev/null || true)
	[ "$GP_LISTED" = 1 ] || total=$((total + 1))
	sed -i "0,/^Subject: \[PATCH [0-9]*\/[0-9]*\]/s//Subject: [PATCH $GP_NUMBER\/$total]/" "$out"
	name=${out##*/}
	patch=$TOP/patches/$name

	if [ "$check" = 1 ]; then
		if [ ! -f "$patch" ]; then
			msg "patches/$name missing"
			bad=1
		elif ! cmp -s "$out" "$patch"; then
			msg "patches/$name is not what its sources give now:"
			diff -u "$patch" "$out" | head -40 >&2 || true
			bad=1
		fi
		grep -qxF "$name" "$TOP/patches/series" 2>/dev/null ||
			{ msg "patches/series does not name $name"; bad=1; }
		for f in "$TOP"/patches/$GP_GLOB; do
			[ -e "$f" ] && [ "$f" != "$patch" ] && { msg "stale ${f#"$TOP"/}"; bad=1; }
		done
		[ $bad = 0 ] || die "run scripts/$PROG to regenerate it"
		msg "patches/$name is current"
		return 0
	fi

	for f in "$TOP"/patches/$GP_GLOB; do
		[ -e "$f" ] && [ "$f" != "$patch" ] && rm -f "$f"
	done
	cp "$out" "$patch"
	gp_series_place "$name"
	msg "wrote patches/$name"
}

# Name $1 in patches/series: in place of its old number, else before
# GP_BEFORE's entry, else last.
gp_series_place() {
	local name=$1 p done=0 series=$TOP/patches/series
	: >"$GP_TMP/series"
	touch "$series"
	while read -r p; do
		# shellcheck disable=SC2254
		case $p in
		$GP_GLOB) [ $done = 1 ] || echo "$name"; done=1; continue ;;
		esac
		if [ $done = 0 ] && [ "$GP_LISTED" = 0 ] && [ -n "$GP_BEFORE" ]; then
			# shellcheck disable=SC2254
			case $p in $GP_BEFORE) echo "$name"; done=1 ;; esac
		fi
		echo "$p"
	done <"$series" >"$GP_TMP/series"
	[ $done = 1 ] || echo "$name" >>"$GP_TMP/series"
	cp "$GP_TMP/series" "$series"
}
