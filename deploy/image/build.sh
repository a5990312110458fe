#!/usr/bin/env bash
# Builds the image of deploy/kubernetes/ (deploy/image/Dockerfile) with the container engine that
# is there: the first of docker, podman and buildah on PATH (STOKER_CONTAINER_ENGINE names one,
# STOKER_CONTAINER_ENGINES the ones to look for).
#
#   deploy/image/build.sh [--tokenizer DIR] [--tag NAME] [--push]
#
# --tokenizer DIR  the model's tokenizer (tokenizer.json, tokenizer_config.json); default
#                  .stoker/tokenizers/qwen3, what ./stoker demo fetches
# --tag NAME       default stoker-flink:<flink.version of pom.xml>, the name the manifests use
# --push           push NAME afterwards (name a registry in it, e.g. registry.example.com/stoker-flink:2.3.0)
#
# Needs the Maven build's outputs (mvn -B package -DskipTests): job/target/stoker-job.jar and
# cluster/target/flink. The build context is a temporary folder holding only files.txt's files
# and the tokenizer, laid out as the Dockerfile copies them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() { echo "build.sh: $*" >&2; exit 1; }

flink_version=$(sed -n 's:.*<flink.version>\(.*\)</flink.version>.*:\1:p' "$repo/pom.xml" | head -1)
[ -n "$flink_version" ] || die "no <flink.version> in pom.xml"
tokenizer=$repo/.stoker/tokenizers/qwen3
tag=stoker-flink:$flink_version
push=0
while [ $# -gt 0 ]; do
  case $1 in
    --tokenizer) tokenizer=${2:?--tokenizer needs a folder}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    --push) push=1; shift ;;
    *) die "unknown argument '$1' (see the comment at the top of $0)" ;;
  esac
done
grep -q "^FROM flink:$flink_version-java17\$" "$here/Dockerfile" \
  || die "the Dockerfile's FROM is not flink:$flink_version-java17 (pom.xml's flink.version)"
for f in tokenizer.json tokenizer_config.json; do
  [ -f "$tokenizer/$f" ] || die "$tokenizer/$f is missing (--tokenizer DIR; ./stoker demo fetches the Qwen tokenizer)"
done

engine=${STOKER_CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  for e in ${STOKER_CONTAINER_ENGINES:-docker podman buildah}; do
    if command -v "$e" >/dev/null 2>&1; then engine=$e; break; fi
  done
fi
[ -n "$engine" ] || die "no container engine (${STOKER_CONTAINER_ENGINES:-docker podman buildah}) on PATH"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
while read -r src dst; do
  case $src in '' | '#'*) continue ;; esac
  [ -f "$repo/$src" ] || die "$src is missing: build with Maven first (mvn -B package -DskipTests)"
  mkdir -p "$ctx/$(dirname "$dst")"
  cp "$repo/$src" "$ctx/$dst"
done < "$here/files.txt"
mkdir -p "$ctx/tokenizer"
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$ctx/tokenizer/"
cp "$here/Dockerfile" "$ctx/Dockerfile"

echo "build.sh: $engine building $tag" >&2
case $engine in
  buildah) buildah bud --platform linux/amd64 -t "$tag" -f "$ctx/Dockerfile" "$ctx" ;;
  *) "$engine" build --platform linux/amd64 -t "$tag" -f "$ctx/Dockerfile" "$ctx" ;;
esac
if [ "$push" = 1 ]; then
  "$engine" push "$tag"
fi
echo "build.sh: built $tag" >&2
