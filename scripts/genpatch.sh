# SPDX-License-Identifier: GPL-2.0
# The machinery of the series' generated patches (scripts/module-patch,
# scripts/selftests-patch, run by scripts/series): a patch made from this
# repository's sources against v$KVER with the patches before it
# applied, in a scratch repository, with fixed author, dates and commit
# id, so that the same sources give the same patch, byte for byte, on
# any machine. Sourced after lib.sh, not run.
#
#   gp_begin OUT              the patch follows those OUT/series names
#   gp_add PATH FILE MODE     put FILE at PATH in the patch's tree
#   gp_edit PATH SED_SCRIPT   edit PATH of the tree with sed
#   gp_has PATH               whether the tree before the patch has PATH
#   gp_finish MSG_FILE        commit; write the patch into OUT and name
#                             it last in OUT/series

GP_AUTHOR_NAME="vhost-poll developers"
GP_AUTHOR_EMAIL="dev@vhost-poll.invalid"
# Fixed, so that the patch is a function of its sources alone.
GP_DATE="Mon, 30 Nov 2026 02:10:18 +0000"

# The options every generator takes: --out DIR.
gp_args() {
	GP_OUT=
	case ${1:-} in
	-h|--help) usage; exit 0 ;;
	--out) GP_OUT=${2:-} ;;
	esac
	[ -n "$GP_OUT" ] && [ $# = 2 ] || { usage >&2; exit 2; }
	[ -f "$GP_OUT/series" ] || die "$GP_OUT/series missing: scripts/series makes it"
}

gp_begin() {
	local p
	GP_OUT=$1
	[ -d "$KSRC/.git" ] && git -C "$KSRC" rev-parse -q --verify "v$KVER^{tree}" >/dev/null \
		|| die "no v$KVER in $KSRC: run scripts/series, which makes it"
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

	mapfile -t GP_BASE < <(grep -v -e '^#' -e '^$' "$GP_OUT/series")
	GP_NUMBER=$((${#GP_BASE[@]} + 1))
	gp_git read-tree "$(git -C "$KSRC" rev-parse "v$KVER^{tree}")"
	for p in "${GP_BASE[@]}"; do
		gp_git apply --cached "$GP_OUT/$p" || die "$p does not apply to v$KVER"
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
	local msgfile=$1 commit out name
	commit=$(gp_git commit-tree "$(gp_git write-tree)" -p "$GP_PARENT" -F "$msgfile")
	mkdir "$GP_TMP/out"
	gp_git -c core.abbrev=12 format-patch -q --zero-commit --no-signature --numbered \
		--start-number "$GP_NUMBER" -o "$GP_TMP/out" -1 "$commit"
	out=$(echo "$GP_TMP"/out/*.patch)
	[ -f "$out" ] || die "git format-patch wrote no patch"
	name=${out##*/}
	cp "$out" "$GP_OUT/$name"
	echo "$name" >>"$GP_OUT/series"
	msg "wrote $name"
}
