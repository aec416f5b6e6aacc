#!/bin/sh
# build-ttyd.sh SOURCE [TAG] [DIR]: builds ttyd (https://github.com/tsl0922/ttyd) for the page
# benchmark, in a scratch folder outside the repository; nothing of it is committed.
#
# SOURCE is a git directory (a bare repo or a snapshot's .git, e.g. the one the `fetch` tool
# brings) or a git URL (cloned bare into DIR/git). TAG is a release tag (default 1.7.7).
# DIR is the scratch folder (default /tmp/ttyd-build); the binary ends up in DIR/ttyd.
# Build dependencies are Debian's: cmake, build-essential, libjson-c-dev, libwebsockets-dev
# (built with libuv: LWS_WITH_LIBUV in lws_config.h), libuv1-dev, zlib1g-dev; installed with
# apt-get when missing. ttyd's page is compiled into the binary (src/html.h, committed upstream),
# so no Node toolchain is needed.
set -eu

src=${1:?usage: build-ttyd.sh SOURCE-GIT-DIR-OR-URL [TAG] [DIR]}
tag=${2:-1.7.7}
dir=${3:-/tmp/ttyd-build}

case "$dir" in
"$(git rev-parse --show-toplevel 2>/dev/null || echo /nonexistent)"*)
	echo "build-ttyd.sh: $dir is inside the repository; give a scratch folder outside it" >&2
	exit 2 ;;
esac

need=""
for p in cmake build-essential libjson-c-dev libwebsockets-dev libuv1-dev zlib1g-dev; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
	echo "==> apt-get install$need"
	apt-get install -y $need >/dev/null || { apt-get update >/dev/null && apt-get install -y $need >/dev/null; }
fi
if ! grep -q '^#define LWS_WITH_LIBUV$' /usr/include/lws_config.h; then
	echo "build-ttyd.sh: Debian's libwebsockets lacks libuv support (LWS_WITH_LIBUV); ttyd needs it" >&2
	exit 1
fi

mkdir -p "$dir"
case "$src" in
*://* | git@*)
	[ -d "$dir/git" ] || git clone --bare --quiet "$src" "$dir/git"
	gitdir="$dir/git" ;;
*) gitdir="$src" ;;
esac

commit=$(git --git-dir="$gitdir" rev-parse "$tag^{commit}")
rm -rf "$dir/src" "$dir/build"
mkdir -p "$dir/src" "$dir/build"
git --git-dir="$gitdir" archive "$commit" | tar -x -C "$dir/src"

echo "==> ttyd $tag ($commit): cmake and make in $dir/build"
start=$(date +%s)
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >"$dir/cmake.log" 2>&1 || { tail -20 "$dir/cmake.log" >&2; exit 1; }
make -C "$dir/build" -j"$(nproc)" >"$dir/make.log" 2>&1 || { tail -20 "$dir/make.log" >&2; exit 1; }
cp "$dir/build/ttyd" "$dir/ttyd"
echo "$tag $commit" >"$dir/VERSION"
echo "==> $dir/ttyd: $("$dir/ttyd" --version) (commit $commit), built in $(( $(date +%s) - start )) s"
